"""Invariants under the full policy stack, whatever happens to the cluster.

The cluster (8 nodes per rack, 1 spare each):

    pod p1:  r01 [n01 .. n08]   r02 [n01 .. n08]
    pod p2:  r03 [n01 .. n08]   r04 [n01 .. n08]
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from rackplane.engine import Engine
from rackplane.models import (
    CancelJob,
    CompleteJob,
    Health,
    JobKind,
    JobPlaced,
    PolicySettings,
    RackHealth,
    RegisterTopology,
    RepairNode,
    ReportNodeHealth,
    ReportRackHealth,
    StartJob,
    SubmitJob,
)
from rackplane.policies import preset
from rackplane.projections import fold, initial_state
from tests.builders import CLUSTER, T0, cmd, job, rack, topology
from tests.invariants import check_blocked_reasons, check_invariants

RACKS = (rack("r01", 8, "p1"), rack("r02", 8, "p1"), rack("r03", 8, "p2"), rack("r04", 8, "p2"))
NODES = [n for r in RACKS for n in r.nodes]

submit = st.builds(
    lambda n, s, kind, prio, floor, short: ("submit", n, s, kind, prio, floor, short),
    st.integers(1, 20),
    st.sampled_from([1, 2, 3, 4, 6, 7]),
    st.sampled_from(list(JobKind)),
    st.integers(0, 2),
    st.booleans(),
    st.booleans(),
)
step = st.one_of(
    submit,
    submit,
    submit,
    st.tuples(st.just("fail"), st.sampled_from(NODES)),
    st.tuples(st.just("repair"), st.integers(0, 50)),
    st.tuples(st.just("finish"), st.integers(0, 50), st.sampled_from(["complete", "cancel"])),
    st.tuples(st.just("finish"), st.integers(0, 50), st.just("complete")),
    st.tuples(st.just("rack"), st.sampled_from(RACKS), st.sampled_from(list(RackHealth))),
    st.tuples(st.just("wait"), st.integers(1, 120)),
)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(step, min_size=10, max_size=60),
    name=st.sampled_from(["tas+spares+defrag+ntp", "tas+spares+defrag", "tas"]),
    borrow=st.booleans(),
)
def test_invariants_hold_under_the_full_policy_stack(steps, name, borrow) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    policies, chosen = preset(name, PolicySettings(spares_per_rack=1, borrow_spares=borrow))
    log = []
    engine = Engine(CLUSTER, clock=clock, policies=policies, sinks=[log.append])

    def check_each(event):  # type: ignore[no-untyped-def]
        # Sinks run right after each event is folded: check the state event by event.
        check_invariants(engine.state, [event])
        if isinstance(event, JobPlaced):
            on_degraded = {r for sl in event.slices for r in sl.racks} & {
                r for r, rs in engine.state.racks.items() if rs.degraded
            }
            # the scheduler says why it used a degraded rack; defrag never moves work there
            if on_degraded and event.actor == "policy:tas":
                assert "degraded rack" in event.explanation, event.explanation
            assert not (on_degraded and "re-placed after defrag" in event.explanation)

    engine.sinks.append(check_each)
    engine.handle(cmd(RegisterTopology, topology=topology(*RACKS), settings=chosen))
    for i, s in enumerate(steps):
        state = engine.state
        match s:
            case ("submit", n, size, kind, prio, floor, short):
                spec = job(
                    f"j{i}",
                    n,
                    slice_size=size,
                    kind=kind,
                    priority=prio,
                    min_nodes_per_slice=max(1, size - 1) if floor else None,
                    checkpoint_interval=timedelta(minutes=15),
                    expected_duration=timedelta(minutes=30 if short else 600),
                )
                command = cmd(SubmitJob, job=spec)
            case ("fail", node):
                command = cmd(ReportNodeHealth, node=node, health=Health.FAILED, cause="XID 79")
            case ("repair", k):
                failed = sorted(n for n, ns in state.nodes.items() if ns.health is Health.FAILED)
                if not failed:
                    continue
                command = cmd(RepairNode, node=failed[k % len(failed)])
            case ("finish", k, how):
                live = sorted(j for j in state.jobs if state.jobs[j].status.holds_nodes)
                if not live:
                    continue
                target = live[k % len(live)]
                if how == "complete":
                    if state.jobs[target].status.value == "placed":
                        engine.handle(cmd(StartJob, job=target))
                    command = cmd(CompleteJob, job=target)
                else:
                    command = cmd(CancelJob, job=target)
            case ("rack", r, health):
                command = cmd(ReportRackHealth, rack=r.id, health=health)
            case ("wait", minutes):
                clock.now += timedelta(minutes=minutes)
                continue
        events = engine.handle(command)
        check_blocked_reasons(engine.state, events)
        clock.now += timedelta(minutes=1)
    assert fold(initial_state(CLUSTER), log) == engine.state
