"""The in-process engine runs a command and every policy reaction until the cluster is quiet."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from rackplane.engine import Engine, PolicyLoop
from rackplane.models import (
    Command,
    CordonNode,
    Event,
    JobCompleted,
    JobSubmitted,
    PlaceJob,
    SliceAssignment,
    SubmitJob,
)
from rackplane.projections import ClusterState, fold, initial_state
from tests.builders import CLUSTER, T0, cmd, job, rack, register
from tests.invariants import check_invariants


class FirstFit:
    """A toy placement policy: each queued job's slices on the first racks with room."""

    name = "first_fit"

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        if not any(isinstance(e, JobSubmitted | JobCompleted) for e in events):
            return []
        out: list[Command] = []
        taken: set[str] = set()
        for j in state.queued():
            slices = []
            for size in j.spec.slice_sizes:
                for r in state.racks.values():
                    free = sorted(r.available - taken)
                    if len(free) - size >= state.settings.spares_per_rack:
                        slices.append(SliceAssignment(nodes=tuple(free[:size])))
                        taken.update(free[:size])
                        break
            if len(slices) == len(j.spec.slice_sizes):
                out.append(
                    PlaceJob(
                        id=f"first_fit:{state.seq}:{j.id}",
                        cluster=state.cluster,
                        actor="policy:first_fit",
                        job=j.id,
                        slices=tuple(slices),
                    )
                )
        return out


class Chatty:
    """A broken policy: reacts to its own reactions forever."""

    name = "chatty"

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        node = f"r01-n0{1 + state.seq % 2}"
        return [cmd(CordonNode, node=node, id=f"chatty:{state.seq}")]


class VirtualClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def test_a_submission_is_placed_by_the_policy_before_handle_returns() -> None:
    clock = VirtualClock()
    engine = Engine(CLUSTER, clock=clock, policies=[FirstFit()])
    engine.handle(register(rack("r01", 6), rack("r02", 6), spares_per_rack=1))
    events = engine.handle(cmd(SubmitJob, job=job("j1", 8, slice_size=4)))
    assert [e.type for e in events] == ["JobSubmitted", "JobPlaced"]
    assert engine.state.jobs["j1"].status.value == "placed"
    check_invariants(engine.state, events)


def test_events_carry_the_injected_time() -> None:
    clock = VirtualClock()
    engine = Engine(CLUSTER, clock=clock)
    engine.handle(register(rack("r01", 6)))
    clock.now = T0 + timedelta(hours=3)
    (event,) = engine.handle(cmd(SubmitJob, job=job("j1", 2)))
    assert event.at == T0 + timedelta(hours=3)


def test_sinks_see_every_event_in_order_and_the_log_replays_to_the_same_state() -> None:
    log: list[Event] = []
    engine = Engine(CLUSTER, clock=VirtualClock(), policies=[FirstFit()], sinks=[log.append])
    engine.run(
        [
            register(rack("r01", 6), rack("r02", 6), spares_per_rack=1),
            cmd(SubmitJob, job=job("j1", 4, slice_size=4)),
            cmd(SubmitJob, job=job("j2", 4, slice_size=4)),
            cmd(SubmitJob, job=job("j3", 4, slice_size=4)),
        ]
    )
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert fold(initial_state(CLUSTER), log) == engine.state
    assert [j.id for j in engine.state.queued()] == ["j3"]  # no room left above the spares


def test_a_policy_that_never_settles_is_stopped() -> None:
    engine = Engine(CLUSTER, clock=VirtualClock(), policies=[Chatty()], max_cascade=50)
    with pytest.raises(PolicyLoop, match="more than 50 commands"):
        engine.handle(register(rack("r01", 6)))
