"""Invariants of shared clusters under the full policy stack, whatever the teams submit.

The cluster of `test_policy_properties.py` (four racks of 8 nodes, 1 spare each) and a queue
tree drawn per example: two orgs, each with one or two teams, random quotas and limits.
Checked after every event: what `check_invariants` checks (no queue past its nominal plus
borrowing limit, queue usage equal to what its jobs hold), that reclaim preempts only
borrowing work, for a guaranteed job, and that reserved nodes take no work that could run
past the reservation's start, and none after it but the jobs that name a dedicated one (for a
user or a queue), which are placed only inside it while it runs and never preempted by it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from rackplane.engine import Engine
from rackplane.models import (
    CommandRejected,
    DefragPlanned,
    Event,
    Health,
    JobKind,
    JobPlaced,
    JobPreempted,
    NodeSwapped,
    PolicySettings,
    QueueSpec,
    RegisterTopology,
    ReportNodeHealth,
    ReservationStarted,
    Reserve,
    SliceMigrated,
    SubmitJob,
)
from rackplane.policies import QueueBook, preset
from rackplane.policies.quotas import borrowing_jobs
from rackplane.policies.tas import schedule
from rackplane.projections import ClusterState, fold, initial_state
from tests.builders import CLUSTER, Clock, cmd, finish_command, job, rack, topology
from tests.invariants import check_invariants

RACKS = (rack("r01", 8, "p1"), rack("r02", 8, "p1"), rack("r03", 8, "p2"), rack("r04", 8, "p2"))
NODES = [n for r in RACKS for n in r.nodes]
LEAVES = ("a1", "a2", "b1", "b2")

limits = st.one_of(st.none(), st.integers(0, 16))
team = st.fixed_dictionaries(
    {
        "nominal_nodes": st.sampled_from([0, 4, 7, 8, 14]),
        "borrowing_limit": limits,
        "lending_limit": limits,
        "weight": st.sampled_from([0.5, 1.0, 3.0]),
        "preempt_lower_priority": st.booleans(),
    }
)
trees = st.tuples(team, team, team, team, limits, limits)

submit = st.tuples(
    st.just("submit"),
    st.sampled_from(LEAVES),
    st.sampled_from([2, 4, 7, 8, 14]),
    st.sampled_from([2, 4, 7]),
    st.sampled_from([JobKind.MANAGED] * 4 + [JobKind.INTERACTIVE, JobKind.INFERENCE]),
    st.integers(0, 2),
    st.sampled_from([None, 30, 120, 600]),
    st.sampled_from(["alice", "bob"]),
    st.sampled_from([False, False, True]),  # into a reservation it is a member of, if any
)
# Who a reservation is for: nobody (maintenance), a user, or a leaf queue.
members = st.sampled_from([None, None, "alice", "a1", "b2"])
step = st.one_of(
    submit,
    submit,
    submit,
    submit,
    submit,
    st.tuples(st.just("fail"), st.sampled_from(NODES)),
    st.tuples(st.just("finish"), st.integers(0, 50), st.sampled_from(["complete", "cancel"])),
    st.tuples(st.just("wait"), st.integers(1, 600)),
    st.tuples(
        st.just("reserve"),
        st.sampled_from(RACKS),
        st.integers(0, 240),
        st.integers(1, 600),
        members,
    ),
)


def queues_of(drawn: tuple[Any, ...]) -> tuple[QueueSpec, ...]:
    *teams, limit_a, limit_b = drawn
    out = [QueueSpec(name="a", borrowing_limit=limit_a), QueueSpec(name="b", lending_limit=limit_b)]
    for name, fields in zip(LEAVES, teams, strict=True):
        out.append(QueueSpec(name=name, parent=name[0], **fields))
    return tuple(out)


class Watch:
    """A sink that checks each event against the state before it and after it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.before: ClusterState = engine.state
        self.plans: dict[str, str] = {}
        self.reclaims = 0
        self.starts = 0
        self.inside = 0

    def __call__(self, event: Event) -> None:
        before, after = self.before, self.engine.state
        check_invariants(after, [event])
        # Passing over the jobs blocked for quota that their queue refuses again changes no
        # proposal of a scheduling cycle.
        assert schedule(after) == schedule(after, pass_over=False)
        if isinstance(event, DefragPlanned) and event.cause == "reclaim":
            book = QueueBook.of(before)
            assert book is not None
            beneficiary = before.jobs[event.job]
            queue = beneficiary.spec.queue
            assert queue is not None
            assert book.guaranteed(queue, beneficiary.spec.nodes), (
                f"{event.job} reclaims, but would borrow itself"
            )
        if isinstance(event, JobPreempted) and event.cause == "reclaim":
            book = QueueBook.of(before)
            assert book is not None
            over = borrowing_jobs(book, before.jobs.values())
            victim = before.jobs[event.job]
            assert victim in over.get(victim.spec.queue or "", []), (
                f"guaranteed job {event.job} preempted for reclaim"
            )
            self.reclaims += 1
        if isinstance(event, ReservationStarted):
            self.starts += 1
        # Reserved nodes take no work that could run past the start, none after it: not by a
        # placement, nor by a running job's swap or slice migration (whose limit counts from
        # its start); and no policy proposes what the controller would refuse for it.
        given: set[str] = set()
        since = None
        if isinstance(event, JobPlaced):
            given = {n for sl in event.slices for n in sl.nodes}
        elif isinstance(event, SliceMigrated):
            given, since = set(event.new_nodes), before.jobs[event.job].started_at
        elif isinstance(event, NodeSwapped):
            given, since = {event.new_node}, before.jobs[event.job].started_at
        if given:
            spec = before.jobs[event.job].spec
            for w in before.windows.values():
                if given & w.nodes:
                    assert not w.keeps_from(spec, event.at, since), f"{event.type} in {w.id}"
            # A job that names a reservation is placed only inside it, while it runs.
            if isinstance(event, JobPlaced) and spec.reservation is not None:
                w = before.windows[spec.reservation]
                assert w.started and event.at < w.end and given <= w.nodes, f"{event.job}"
                self.inside += 1
        # A reservation's start never preempts its members' jobs.
        if isinstance(event, JobPreempted) and event.cause == "reservation":
            victim = before.jobs[event.job]
            assert any(
                w.started and set(victim.nodes) & w.nodes and not w.member(victim.spec)
                for w in before.windows.values()
            ), f"member job {event.job} preempted by its reservation"
        if isinstance(event, CommandRejected):
            assert event.code != "reserved", (
                f"a policy proposed {event.command_type}: {event.reason}"
            )
        self.before = after


@settings(max_examples=200, deadline=None)
@given(
    drawn=trees, steps=st.lists(step, min_size=20, max_size=60), history=st.sampled_from([0.0, 0.5])
)
def test_quotas_hold_and_reclaim_takes_only_borrowed_work(
    drawn: tuple[Any, ...], steps: list[tuple[Any, ...]], history: float
) -> None:
    clock = Clock()
    base = PolicySettings(spares_per_rack=1, queues=queues_of(drawn), fair_share_history=history,
                          fair_share_half_life=timedelta(hours=2))  # fmt: skip
    policies, chosen = preset("tas+spares+defrag", base)
    log: list[Event] = []
    engine = Engine(CLUSTER, clock=clock, policies=policies, sinks=[log.append])
    engine.handle(cmd(RegisterTopology, topology=topology(*RACKS), settings=chosen))
    watch = Watch(engine)
    engine.sinks.append(watch)
    for i, s in enumerate(steps):
        match s:
            case ("submit", queue, n, size, kind, prio, limit, owner, inside):
                spec = job(f"j{i}", n, slice_size=size, kind=kind, priority=prio, queue=queue,
                           owner=owner, checkpoint_interval=timedelta(minutes=15),
                           time_limit=timedelta(minutes=limit) if limit else None)  # fmt: skip
                rooms = sorted(w.id for w in engine.state.windows.values()
                               if w.dedicated and w.member(spec))  # fmt: skip
                if inside and rooms:
                    spec = spec.model_copy(update={"reservation": rooms[0]})
                command = cmd(SubmitJob, job=spec)
            case ("reserve", r, after, minutes, member):
                begins = clock.now + timedelta(minutes=after)
                who = {} if member is None else (
                    {"users": (member,)} if member == "alice" else {"queues": (member,)}
                )  # fmt: skip
                command = cmd(Reserve, reservation=f"w{i}", racks=(r.id,), start=begins,
                              end=begins + timedelta(minutes=minutes), **who)  # fmt: skip
            case ("fail", node):
                command = cmd(ReportNodeHealth, node=node, health=Health.FAILED, cause="XID 79")
            case ("finish", k, how):
                finish = finish_command(engine, k, how)
                if finish is None:
                    continue
                command = finish
            case ("wait", minutes):
                clock.now += timedelta(minutes=minutes)
                continue
        engine.handle(command)
        clock.now += timedelta(minutes=1)
        engine.wake()  # time limits and reservations whose time came
    assert fold(initial_state(CLUSTER), log) == engine.state
    event(f"reclaims: {'some' if watch.reclaims else 'none'}")  # the statistics show both
    event(f"reservations started: {'some' if watch.starts else 'none'}")
    event(f"jobs placed in their reservation: {'some' if watch.inside else 'none'}")
