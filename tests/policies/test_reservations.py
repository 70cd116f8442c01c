"""Reservations: an admin holds racks or nodes from a time to a time.

Two racks of 18 nodes, 2 spares each; jobs of one slice of 8 unless said otherwise. r02 is
reserved from T0 + 4 h to T0 + 6 h (maintenance).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from rackplane.engine import Engine
from rackplane.models import (
    CancelReservation,
    CommandRejected,
    JobKind,
    JobPlaced,
    JobPreempted,
    NodeCordoned,
    PlaceJob,
    PolicySettings,
    RegisterTopology,
    ReservationStarted,
    Reserve,
    SliceAssignment,
    StartJob,
    SubmitJob,
)
from rackplane.policies import preset
from rackplane.projections.snapshot import decode_state, encode_state
from tests.builders import CLUSTER, T0, Clock, cmd, job, nodes, rack, topology
from tests.invariants import check_invariants

START, END = T0 + timedelta(hours=4), T0 + timedelta(hours=6)


def cluster(**settings: object) -> tuple[Engine, Clock]:
    clock = Clock()
    policies, chosen = preset("tas+spares+defrag", PolicySettings(slice_size=8, **settings))  # type: ignore[arg-type]
    engine = Engine(CLUSTER, clock=clock, policies=policies)
    engine.handle(cmd(RegisterTopology, topology=topology(rack("r01"), rack("r02")),
                      settings=chosen))  # fmt: skip
    return engine, clock


def reserved() -> tuple[Engine, Clock]:
    engine, clock = cluster()
    events = engine.handle(cmd(Reserve, reservation="maint", racks=("r02",), start=START,
                               end=END, reason="NVSwitch firmware"))  # fmt: skip
    assert [e.type for e in events] == ["ReservationMade"]
    return engine, clock


def fill_r01(engine: Engine) -> None:
    """A job without a time limit on all of r01 (r02 is kept from it)."""
    engine.handle(cmd(SubmitJob, job=job("fill", 16, slice_size=16)))
    assert engine.state.jobs["fill"].slices[0].racks == ("r01",)


def test_work_that_could_run_past_the_start_is_not_placed_on_reserved_nodes() -> None:
    engine, _ = reserved()
    for j, limit in (("a", None), ("b", None), ("c", None)):
        engine.handle(cmd(SubmitJob, job=job(j, 8, time_limit=limit)))
    # r01 takes two jobs of 8 (16 outside its spares); the third has no time limit: it
    # waits rather than take r02, which it could hold past the start.
    assert {engine.state.jobs[j].slices[0].racks[0] for j in ("a", "b")} == {"r01"}
    assert engine.state.jobs["c"].status.value == "queued"
    events = engine.handle(cmd(SubmitJob, job=job("short", 8, time_limit=timedelta(hours=3))))
    (placed,) = [e for e in events if isinstance(e, JobPlaced)]
    assert placed.slices[0].racks == ("r02",)  # ends before the start: it may
    long = engine.handle(cmd(SubmitJob, job=job("long", 8, time_limit=timedelta(hours=5))))
    assert not [e for e in long if isinstance(e, JobPlaced)]
    check_invariants(engine.state, events)


def test_the_controller_refuses_a_placement_a_reservation_keeps_out() -> None:
    engine, _ = reserved()
    engine.handle(cmd(SubmitJob, job=job("x", 8, slice_size=8)))  # placed on r01 by tas
    engine.handle(cmd(SubmitJob, job=job("y", 8)))
    engine.handle(cmd(SubmitJob, job=job("z", 8)))  # waits
    on_r02 = (SliceAssignment(nodes=nodes("r02", 1, 8)),)
    (rejected,) = engine.handle(cmd(PlaceJob, job="z", actor="policy:tas", slices=on_r02))
    assert isinstance(rejected, CommandRejected) and rejected.code == "reserved"
    assert "is reserved (maint)" in rejected.reason and "has no time limit" in rejected.reason


@pytest.mark.parametrize(
    ("kind", "preempted"),
    [(JobKind.MANAGED, True), (JobKind.INFERENCE, False)],
)
def test_at_the_start_the_nodes_are_cordoned_and_restartable_work_is_drained(
    kind: JobKind, preempted: bool
) -> None:
    engine, clock = cluster()
    fill_r01(engine)
    engine.handle(cmd(SubmitJob, job=job("there", 8, kind=kind)))  # on r02 before any reserve
    engine.handle(cmd(StartJob, job="there"))
    assert engine.state.jobs["there"].slices[0].racks == ("r02",)
    engine.handle(cmd(Reserve, reservation="maint", racks=("r02",), start=START, end=END))
    clock.now = START
    events = engine.wake()
    (started,) = [e for e in events if isinstance(e, ReservationStarted)]
    assert len([e for e in events if isinstance(e, NodeCordoned)]) == 18
    assert all(engine.state.nodes[n].cordoned for n in engine.state.windows["maint"].nodes)
    drained = [e for e in events if isinstance(e, JobPreempted)]
    assert [(e.job, e.cause) for e in drained] == ([("there", "reservation")] if preempted else [])
    assert started.staying == (() if preempted else ("there",))
    clock.now = END
    events = engine.wake()
    assert [e.type for e in events][:1] == ["ReservationEnded"]
    assert not any(engine.state.nodes[n].cordoned for n in nodes("r02", 1, 18))
    assert "maint" not in engine.state.windows


def test_a_node_cordoned_before_the_start_stays_cordoned_after_the_end() -> None:
    from rackplane.models import CordonNode

    engine, clock = reserved()
    engine.handle(cmd(CordonNode, node="r02-n03", reason="bad fan"))
    clock.now = START
    (started, *_) = engine.wake()
    assert isinstance(started, ReservationStarted) and "r02-n03" not in started.cordoned
    clock.now = END
    engine.wake()
    assert engine.state.nodes["r02-n03"].cordoned


def test_a_cancelled_reservation_lifts_its_cordons_and_frees_the_nodes_for_any_work() -> None:
    engine, clock = reserved()
    fill_r01(engine)
    clock.now = START
    engine.wake()
    engine.handle(cmd(SubmitJob, job=job("j", 16, slice_size=16)))
    assert engine.state.jobs["j"].status.value == "queued"  # r01 holds 16: j needs r02
    events = engine.handle(cmd(CancelReservation, reservation="maint", reason="done early"))
    assert [e.type for e in events][:1] == ["ReservationEnded"]
    assert engine.state.jobs["j"].slices[0].racks == ("r02",)


@pytest.mark.parametrize(
    ("fields", "code", "why"),
    [
        ({"racks": ("r09",)}, "unknown_rack", "rack r09"),
        ({"nodes": ("r01-n99",)}, "unknown_node", "r01-n99"),
        ({"racks": ()}, "invalid_state", "names no rack and no node"),
        ({"end": START - timedelta(hours=1)}, "invalid_state", "ends before it starts"),
        ({"start": T0 - timedelta(hours=3), "end": T0 - timedelta(hours=1)}, "invalid_state",
         "over already"),
    ],
)  # fmt: skip
def test_a_reservation_that_cannot_be_is_refused_with_the_reason(
    fields: dict[str, object], code: str, why: str
) -> None:
    engine, _ = cluster()
    args: dict[str, object] = {"reservation": "r", "racks": ("r02",), "start": START, "end": END}
    (rejected,) = engine.handle(cmd(Reserve, **(args | fields)))
    assert isinstance(rejected, CommandRejected) and rejected.code == code
    assert why in rejected.reason


def test_only_an_admin_reserves() -> None:
    engine, _ = cluster(admins=("operator:root",))
    (rejected,) = engine.handle(cmd(Reserve, reservation="r", racks=("r02",), start=START,
                                    end=END, actor="operator:bob"))  # fmt: skip
    assert isinstance(rejected, CommandRejected) and rejected.code == "not_authorized"


def test_a_reservation_survives_a_snapshot() -> None:
    engine, clock = reserved()
    clock.now = START
    engine.wake()
    state = engine.state
    assert decode_state(encode_state(state)) == state


def test_overlapping_reservations_keep_the_nodes_cordoned_until_the_last_one_ends() -> None:
    engine, clock = reserved()  # maint: START .. END on r02
    later = END + timedelta(hours=2)
    engine.handle(cmd(Reserve, reservation="hero", racks=("r02",), start=START + timedelta(hours=1),
                      end=later))  # fmt: skip
    clock.now = START + timedelta(hours=1)
    engine.wake()  # both started: maint cordoned the nodes, hero found them cordoned
    clock.now = END
    events = engine.wake()
    assert [e.type for e in events] == ["ReservationEnded"]  # no uncordon: hero holds them
    assert all(engine.state.nodes[n].cordoned for n in nodes("r02", 1, 18))
    assert engine.state.windows["hero"].cordoned == frozenset(nodes("r02", 1, 18))
    clock.now = later
    engine.wake()
    assert not any(engine.state.nodes[n].cordoned for n in nodes("r02", 1, 18))
