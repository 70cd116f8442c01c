"""Shared clusters: queues with quotas, borrowing, lending, fair share, reclaim, priority.

The cluster of every story: four racks of 18 nodes, 2 spares each, so 16 nodes of each rack
take work (64 in all); jobs are one slice of 16 (a whole rack) unless said otherwise.

    research (org)            prod (org)
      pretrain  nominal 32      infer  nominal 16
      rl        nominal 16

Each test states only what it changes in that tree.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from rackplane.engine import Engine
from rackplane.models import (
    CommandRejected,
    CompleteJob,
    ConfigurePolicy,
    DefragPlanned,
    JobBlocked,
    JobKind,
    JobPlaced,
    JobPreempted,
    JobSubmitted,
    PolicySettings,
    PreemptJobs,
    QueueSpec,
    RegisterTopology,
    StartJob,
    SubmitJob,
)
from rackplane.policies import QueueBook, preset
from rackplane.policies.placement import Capacity
from rackplane.policies.tas import FairLine, schedule
from rackplane.projections import QueueUsage
from rackplane.projections.snapshot import decode_state, encode_state
from tests.builders import CLUSTER, T0, Clock, cmd, job, rack, topology
from tests.invariants import check_invariants

RACKS = ("r01", "r02", "r03", "r04")


def tree(**changes: dict[str, Any]) -> tuple[QueueSpec, ...]:
    """The stories' queue tree, with `changes` per queue name."""
    base: dict[str, dict[str, Any]] = {
        "research": {},
        "pretrain": {"parent": "research", "nominal_nodes": 32},
        "rl": {"parent": "research", "nominal_nodes": 16},
        "prod": {},
        "infer": {"parent": "prod", "nominal_nodes": 16},
    }
    for name, change in changes.items():
        base[name] = base[name] | change
    return tuple(QueueSpec(name=n, **fields) for n, fields in base.items())


class Cluster:
    """The engine over the stories' cluster, with the full production stack."""

    def __init__(self, queues: tuple[QueueSpec, ...] | None = None, **settings: Any) -> None:
        self.clock = Clock()
        fields = {"slice_size": 16, "queues": tree() if queues is None else queues} | settings
        policies, chosen = preset("tas+spares+defrag", PolicySettings(**fields))
        self.engine = Engine(CLUSTER, clock=self.clock, policies=policies)
        self.events = self.run(
            cmd(RegisterTopology, topology=topology(*(rack(r) for r in RACKS)), settings=chosen)
        )

    def run(self, *commands: Any) -> list[Any]:
        out = []
        for c in commands:
            out.extend(self.engine.handle(c))
            check_invariants(self.engine.state, out)
            self.clock.now += timedelta(minutes=1)
        return out

    def submit(self, job_id: str, queue: str | None, nodes: int = 16, **fields: Any) -> list[Any]:
        spec = job(job_id, nodes, queue=queue, checkpoint_interval=timedelta(hours=1), **fields)
        events = self.run(cmd(SubmitJob, job=spec))
        if any(isinstance(e, JobPlaced) and e.job == job_id for e in events):
            self.run(cmd(StartJob, job=job_id))
        return events

    @property
    def book(self) -> QueueBook:
        book = QueueBook.of(self.engine.state)
        assert book is not None
        return book

    def rack_of(self, job_id: str) -> str:
        return self.engine.state.jobs[job_id].slices[0].racks[0]

    def status(self, job_id: str) -> str:
        status = self.engine.state.status_of(job_id)
        assert status is not None
        return status.value


def rejection(events: list[Any]) -> tuple[str, str]:
    (r,) = [e for e in events if isinstance(e, CommandRejected)]
    return r.code, r.reason


# -- the tree and the submission ------------------------------------------------------------


@pytest.mark.parametrize(
    ("queues", "default", "why"),
    [
        ((QueueSpec(name="a"), QueueSpec(name="a")), None, "queue 'a' is listed twice"),
        ((QueueSpec(name="a", parent="x"),), None, "names parent 'x', which is not a queue"),
        (
            (QueueSpec(name="a", parent="b"), QueueSpec(name="b", parent="a")),
            None,
            "is its own ancestor",
        ),
        (
            (
                QueueSpec(name="o", nominal_nodes=10),
                QueueSpec(name="t", parent="o", nominal_nodes=4),
            ),
            None,
            "states a nominal of 10 nodes but its children's sum to 4",
        ),
        ((QueueSpec(name="o"), QueueSpec(name="t", parent="o")), "o", "has child queues"),
        ((QueueSpec(name="a"),), "b", "the default queue 'b' is not a queue"),
    ],
)
def test_a_queue_tree_that_is_no_tree_is_refused_with_the_reason(
    queues: tuple[QueueSpec, ...], default: str | None, why: str
) -> None:
    with pytest.raises(ValidationError, match=why):
        PolicySettings(queues=queues, default_queue=default)


def test_a_parent_sums_its_childrens_quota_and_holdings() -> None:
    c = Cluster()
    c.submit("p1", "pretrain")
    c.submit("r1", "rl")
    book = c.book
    assert (book.nominal["research"], book.held["research"]) == (48, 32)
    assert (book.nominal["prod"], book.held["prod"]) == (16, 0)


@pytest.mark.parametrize(
    ("settings", "queue", "kind", "want"),
    [
        ({}, None, JobKind.MANAGED, ("unknown_queue", "has queues and no default queue")),
        ({}, "nope", JobKind.MANAGED, ("unknown_queue", "queue 'nope' is not a queue")),
        ({}, "research", JobKind.MANAGED, ("unknown_queue", "queue 'research' has child queues")),
        (
            {"queues": tree(infer={"kinds": (JobKind.INFERENCE,)})},
            "infer",
            JobKind.MANAGED,
            ("kind_not_allowed", "queue infer runs inference jobs, not managed"),
        ),
        ({"queues": ()}, "rl", JobKind.MANAGED, ("unknown_queue", "has no queues")),
    ],
)
def test_a_job_must_name_a_leaf_queue_that_runs_its_kind(
    settings: dict[str, Any], queue: str | None, kind: JobKind, want: tuple[str, str]
) -> None:
    c = Cluster(**settings)
    code, reason = rejection(c.submit("j", queue, kind=kind))
    assert code == want[0] and want[1] in reason


def test_a_job_naming_no_queue_goes_to_the_default_queue() -> None:
    c = Cluster(default_queue="rl")
    events = c.submit("j", None)
    (submitted,) = [e for e in events if isinstance(e, JobSubmitted)]
    assert submitted.job.queue == "rl"
    assert c.book.held["rl"] == 16


def test_a_queue_with_unfinished_jobs_cannot_be_dropped_from_the_settings() -> None:
    c = Cluster()
    c.submit("r1", "rl")
    settings = c.engine.state.settings.model_copy(
        update={"queues": tuple(q for q in tree() if q.name != "rl")}
    )
    code, reason = rejection(c.run(cmd(ConfigurePolicy, settings=settings)))
    assert code == "queue_in_use"
    assert reason.startswith("queue rl still has 1 unfinished job(s) (first: r1)")


# -- borrowing and its limits ---------------------------------------------------------------


def test_a_queue_borrows_unused_quota_up_to_its_borrowing_limit_then_blocks_for_quota() -> None:
    c = Cluster(tree(pretrain={"borrowing_limit": 16}))
    for j in ("p1", "p2", "p3"):
        c.submit(j, "pretrain")
    assert [c.status(j) for j in ("p1", "p2", "p3")] == ["running"] * 3  # p3 borrows
    events = c.submit("p4", "pretrain")
    (blocked,) = [e for e in events if isinstance(e, JobBlocked)]
    assert blocked.reason == "quota"
    assert blocked.explanation == (
        "queue pretrain would hold 64 nodes: over its nominal 32 + borrowing limit 16"
    )
    assert blocked.standing is not None
    assert (blocked.standing.queue, blocked.standing.position) == ("pretrain", 1)
    assert (blocked.standing.nodes_held, blocked.standing.nominal_nodes) == (48, 32)


def test_a_cycle_passes_over_jobs_their_queue_refuses_again_and_proposes_the_same() -> None:
    c = Cluster(tree(pretrain={"borrowing_limit": 16}))
    for j in ("p1", "p2", "p3"):
        c.submit(j, "pretrain")
    c.submit("p4", "pretrain")  # blocked for quota
    c.submit("p5", "pretrain", nodes=8)  # so is 8 more: 56 > 48
    c.submit("p6", "pretrain", nodes=32, slice_size=16)
    jobs = c.engine.state.jobs
    assert [getattr(jobs[j].blocked, "reason", None) for j in ("p4", "p5", "p6")] == ["quota"] * 3
    c.submit("i1", "infer", nodes=8)  # room for no other job
    state = c.engine.state

    def offered(capacity: Capacity | None) -> list[str]:
        line = FairLine(state, QueueBook.of(state), capacity)
        seen = []
        for queued in line:
            seen.append(queued.id)
            assert line.refused(queued, Capacity(state))
        return seen

    assert offered(None) == ["p4", "p5", "p6"]
    assert offered(Capacity(state)) == []  # refused again, each for the limit: passed over
    assert schedule(state) == schedule(state, pass_over=False)


def test_an_orgs_borrowing_limit_caps_all_its_teams_together() -> None:
    c = Cluster(tree(research={"borrowing_limit": 0}))
    c.submit("p1", "pretrain")
    c.submit("p2", "pretrain")
    c.submit("r1", "rl")  # research holds its 48
    events = c.submit("p3", "pretrain")
    (blocked,) = [e for e in events if isinstance(e, JobBlocked)]
    assert blocked.reason == "quota"
    assert "queue research would hold 64 nodes: over its nominal 48 + borrowing limit 0" in (
        blocked.explanation
    )


def test_what_a_queue_does_not_lend_stays_free_for_it() -> None:
    c = Cluster(tree(infer={"lending_limit": 0}))
    c.submit("p1", "pretrain")
    c.submit("p2", "pretrain")
    c.submit("r1", "rl")  # 16 nodes are free: infer's, which it lends to nobody
    events = c.submit("p3", "pretrain")
    (blocked,) = [e for e in events if isinstance(e, JobBlocked)]
    assert (blocked.reason, blocked.explanation) == (
        "quota",
        "queue pretrain would borrow: of 16 free nodes, 16 are kept by other queues under "
        "their lending limits, leaving 0 for 16",
    )
    c.submit("i1", "infer")
    assert c.status("i1") == "running"


# -- fair share -----------------------------------------------------------------------------


def test_usage_history_decays_by_half_every_half_life() -> None:
    hl = timedelta(hours=1)
    usage = QueueUsage(nodes=16, average=0.0, since=T0)
    assert usage.average_at(T0 + hl, hl) == 8.0
    idle = usage.changed(-16, T0 + hl, hl)  # the queue gives its nodes back
    assert (idle.nodes, idle.average, idle.since) == (0, 8.0, T0 + hl)
    assert idle.average_at(T0 + 2 * hl, hl) == 4.0


def test_fair_share_gives_freed_room_to_the_queue_of_the_lowest_share_not_the_first_come() -> None:
    # Every queue at its nominal; pretrain and then rl want one more rack (both would borrow,
    # so nobody reclaims). rl has weight 2: its share, 16 / (2 x 16) = 0.5, is below
    # pretrain's 32 / 32 = 1. When a rack frees, rl's job goes first though submitted last.
    c = Cluster(tree(rl={"weight": 2.0}), fair_share_history=0.0)
    for j, q in (("p1", "pretrain"), ("p2", "pretrain"), ("r1", "rl"), ("i1", "infer")):
        c.submit(j, q)
    c.submit("p3", "pretrain")
    c.submit("r2", "rl")
    assert (c.status("p3"), c.status("r2")) == ("queued", "queued")
    assert c.book.share("pretrain") == 1.0 and c.book.share("rl") == 0.5
    c.run(cmd(CompleteJob, job="i1"))
    assert (c.status("p3"), c.status("r2")) == ("queued", "placed")


def test_history_counts_in_the_share_a_queue_that_ran_long_waits_behind_one_that_did_not() -> None:
    # pretrain and rl have the same quota and hold the same now, but rl held 16 nodes for the
    # last half-life: with history only (h = 1), rl's share is higher, so pretrain's job
    # goes first when a rack frees, though rl's was submitted first.
    hl = timedelta(hours=1)
    c = Cluster(tree(pretrain={"nominal_nodes": 16}), fair_share_history=1.0,
                fair_share_half_life=hl)  # fmt: skip
    c.submit("r1", "rl")
    c.clock.now += hl
    c.run(cmd(CompleteJob, job="r1"))
    for j, q in (("p1", "pretrain"), ("r2", "rl"), ("i1", "infer"), ("x1", "infer")):
        c.submit(j, q)  # guaranteed work, and x1 on the 16 nodes no queue is owed
    c.submit("r3", "rl")
    c.submit("p2", "pretrain")
    book = c.book
    assert book.held["rl"] == book.held["pretrain"] == 16
    assert book.share("rl") > 2 * book.share("pretrain")
    c.run(cmd(CompleteJob, job="x1"))
    assert (c.status("p2"), c.status("r3")) == ("placed", "queued")


# -- reclaim and priority -------------------------------------------------------------------


def full_with_infer_borrowing(kind: JobKind = JobKind.MANAGED, **settings: Any) -> Cluster:
    """pretrain at its 32, infer at 16 plus rl's idle 16 borrowed (i2): the cluster is full."""
    c = Cluster(**settings)
    c.submit("p1", "pretrain")
    c.submit("p2", "pretrain")
    c.submit("i1", "infer")
    c.submit("i2", "infer", kind=kind)
    assert c.status("i2") == "running"
    return c


def test_a_guaranteed_job_reclaims_the_quota_another_queue_borrowed() -> None:
    c = full_with_infer_borrowing()
    rack_of_i2 = c.rack_of("i2")
    events = c.submit("r1", "rl")
    (plan,) = [e for e in events if isinstance(e, DefragPlanned)]
    assert (plan.cause, plan.victims, plan.target_racks) == ("reclaim", ("i2",), (rack_of_i2,))
    (preempted,) = [e for e in events if isinstance(e, JobPreempted)]
    assert (preempted.job, preempted.cause) == ("i2", "reclaim")
    assert preempted.lost_gpu_hours > 0
    assert plan.cost_gpu_hours == preempted.lost_gpu_hours
    assert c.rack_of("r1") == rack_of_i2
    # Guaranteed work stays; the victim waits for room, and reclaims nothing itself.
    assert [c.status(j) for j in ("p1", "p2", "i1", "i2")] == [
        "running", "running", "running", "queued"
    ]  # fmt: skip
    assert "queue rl holds 0 of its 16 nominal nodes and is owed 16 for r1" in plan.explanation


def test_a_job_that_would_borrow_reclaims_nothing() -> None:
    c = full_with_infer_borrowing()
    c.submit("r1", "rl")  # reclaims i2
    events = c.submit("r2", "rl")  # rl would hold 32 of 16: borrowing
    assert not [e for e in events if isinstance(e, JobPreempted)]
    assert c.status("r2") == "queued"


@pytest.mark.parametrize(
    ("kind", "allowed", "reclaimed"),
    [
        (JobKind.MANAGED, False, True),
        (JobKind.INFERENCE, False, False),
        (JobKind.INTERACTIVE, False, False),
    ],
)
def test_reclaim_keeps_the_victim_rules_of_auto_defrag(
    kind: JobKind, allowed: bool, reclaimed: bool
) -> None:
    c = full_with_infer_borrowing(kind)
    events = c.submit("r1", "rl")
    assert bool([e for e in events if isinstance(e, JobPreempted)]) is reclaimed
    assert c.status("r1") == ("running" if reclaimed else "queued")


def test_a_queue_gives_back_only_what_it_borrowed() -> None:
    # infer runs four 4-node jobs within its 16 and borrows 16 more with i5: rl's 16-node job
    # may take i5's rack only, never infer's guaranteed four.
    c = Cluster()
    c.submit("p1", "pretrain")
    c.submit("p2", "pretrain")
    for j in ("i1", "i2", "i3", "i4"):
        c.submit(j, "infer", nodes=4, slice_size=4)
    c.submit("i5", "infer")
    events = c.submit("r1", "rl")
    assert [e.job for e in events if isinstance(e, JobPreempted)] == ["i5"]
    assert all(c.status(j) == "running" for j in ("i1", "i2", "i3", "i4"))


def test_a_higher_priority_job_preempts_lower_priority_work_of_its_own_queue_when_allowed() -> None:
    c = Cluster(tree(pretrain={"borrowing_limit": 0, "preempt_lower_priority": True}))
    c.submit("p1", "pretrain")
    c.submit("p2", "pretrain")
    rack_of_p2 = c.rack_of("p2")
    events = c.submit("hi", "pretrain", priority=5)
    (plan,) = [e for e in events if isinstance(e, DefragPlanned)]
    assert (plan.cause, plan.victims) == ("priority", ("p2",))
    (preempted,) = [e for e in events if isinstance(e, JobPreempted)]
    assert (preempted.job, preempted.cause) == ("p2", "priority")
    assert c.rack_of("hi") == rack_of_p2 and c.status("p1") == "running"


def test_reclaim_plans_for_the_first_owed_job_in_queue_order() -> None:
    # r1 (rl) is owed rl's 16 but infer's borrowed i2 serves inference, never preempted: no
    # plan. hi (pretrain, priority 5) is owed too and comes first in queue order: its
    # priority plan preempts p2, though r1 was owed first.
    c = full_with_infer_borrowing(
        JobKind.INFERENCE,
        queues=tree(pretrain={"borrowing_limit": 0, "preempt_lower_priority": True}),
    )
    events = c.submit("r1", "rl")
    assert not [e for e in events if isinstance(e, DefragPlanned)] and c.status("r1") == "queued"
    events = c.submit("hi", "pretrain", priority=5)
    (plan,) = [e for e in events if isinstance(e, DefragPlanned)]
    assert (plan.job, plan.cause, plan.victims) == ("hi", "priority", ("p2",))
    assert c.status("r1") == "queued"


def test_without_the_queues_say_so_priority_preempts_nothing() -> None:
    c = Cluster(tree(pretrain={"borrowing_limit": 0}))
    c.submit("p1", "pretrain")
    c.submit("p2", "pretrain")
    events = c.submit("hi", "pretrain", priority=5)
    assert not [e for e in events if isinstance(e, JobPreempted)]
    (blocked,) = [e for e in events if isinstance(e, JobBlocked)]
    assert blocked.reason == "quota"


def test_the_controller_refuses_to_reclaim_guaranteed_work() -> None:
    c = full_with_infer_borrowing()
    events = c.run(cmd(PreemptJobs, jobs=("i1",), cause="reclaim", actor="policy:reclaim"))
    code, reason = rejection(events)
    assert code == "not_preemptible"
    assert "runs within queue infer's nominal quota" in reason


def test_queue_usage_survives_a_snapshot() -> None:
    c = full_with_infer_borrowing()
    state = c.engine.state
    assert state.queue_usage["infer"].nodes == 32
    assert decode_state(encode_state(state)) == state


def test_a_job_blocked_for_topology_is_blocked_for_quota_once_its_queue_took_its_nominal() -> None:
    # rl may not borrow. p1 ends and frees r01: the cycle places rl's P there (rl now holds
    # its 16), infer's B meets the verdict for 8 nodes (topology, as before), and rl's A, of
    # B's size and blocked for topology too, must now be blocked for quota: its queue's
    # answer changed with P, though its sizes' verdict did not.
    queues = tree(rl={"borrowing_limit": 0})
    engine = Engine(CLUSTER, clock=Clock(), policies=[])  # the test runs the cycle
    engine.handle(cmd(RegisterTopology, topology=topology(*(rack(r) for r in RACKS)),
                      settings=PolicySettings(slice_size=16, queues=queues)))  # fmt: skip

    def submit_and_cycle(*specs: Any) -> list[Any]:
        for spec in specs:
            engine.handle(cmd(SubmitJob, job=spec))
        proposed = schedule(engine.state)
        assert proposed == schedule(engine.state, pass_over=False)
        for c in proposed:
            engine.handle(c)
        return proposed

    submit_and_cycle(
        job("p1", 16, queue="pretrain"),
        job("p2", 16, queue="pretrain"),
        job("p3", 12, slice_size=12, queue="pretrain"),
        job("i1", 12, slice_size=12, queue="infer"),
    )
    submit_and_cycle(
        job("P", 16, queue="rl"),
        job("A", 8, slice_size=8, queue="rl"),
        job("B", 8, slice_size=8, queue="infer"),
    )
    jobs = engine.state.jobs
    assert [jobs[j].blocked.reason for j in ("A", "B")] == ["topology", "topology"]  # type: ignore[union-attr]
    engine.handle(cmd(StartJob, job="p1"))
    engine.handle(cmd(CompleteJob, job="p1"))
    proposed = submit_and_cycle()
    assert [(type(c).__name__, c.job) for c in proposed] == [("PlaceJob", "P"), ("BlockJob", "A")]
    assert engine.state.jobs["A"].blocked.reason == "quota"  # type: ignore[union-attr]
