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
    Health,
    JobKind,
    JobPlaced,
    JobPreempted,
    MigrateSlice,
    NodeCordoned,
    NodeSwapped,
    PlaceJob,
    PolicySettings,
    RackHealth,
    RegisterTopology,
    ReportNodeHealth,
    ReportRackHealth,
    ReservationStarted,
    Reserve,
    SliceAssignment,
    SliceMigrated,
    StartJob,
    SubmitJob,
    SwapNode,
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


# Work already running that moves: a swap, a slice migration, a defrag's re-placements. Each
# takes reserved nodes only when its limit (counted from its start; from now for work placed
# again) ends by the reservation's start, and the controller refuses the rest.

HOURS = timedelta(hours=1)


def started(engine: Engine, job_id: str, nodes_: int, **fields: object) -> None:
    engine.handle(cmd(SubmitJob, job=job(job_id, nodes_, **fields)))
    engine.handle(cmd(StartJob, job=job_id))
    assert engine.state.jobs[job_id].status.value == "running"


@pytest.mark.parametrize(
    ("limit", "moved"),
    [(None, False), (3 * HOURS, True), (5 * HOURS, False)],
    ids=["no limit: re-queued", "ends by the start: migrates", "runs past it: re-queued"],
)
def test_a_slice_migrates_onto_reserved_nodes_only_if_its_job_ends_by_the_start(
    limit: timedelta | None, moved: bool
) -> None:
    engine, _ = reserved()  # r02 from T0 + 4 h
    started(engine, "a", 8, time_limit=limit)
    assert engine.state.jobs["a"].slices[0].racks == ("r01",)
    events = engine.handle(cmd(ReportRackHealth, rack="r01", health=RackHealth.FAILED))
    a = engine.state.jobs["a"]
    if moved:
        assert [e.type for e in events if isinstance(e, SliceMigrated)] == ["SliceMigrated"]
        assert a.slices[0].racks == ("r02",)
    else:
        assert not [e for e in events if isinstance(e, SliceMigrated)]
        assert [(e.job, e.cause) for e in events if isinstance(e, JobPreempted)] == [
            ("a", "failure")
        ]
        assert a.status.value == "queued"
    assert not [e for e in events if isinstance(e, CommandRejected)]
    check_invariants(engine.state, events)


@pytest.mark.parametrize(
    ("limit", "swapped"),
    [(None, False), (2 * HOURS, True)],
    ids=["no limit: not onto the reserved spares", "ends by the start: swapped"],
)
def test_a_swap_takes_a_reserved_spare_only_if_the_job_ends_by_the_start(
    limit: timedelta | None, swapped: bool
) -> None:
    engine, _ = cluster()
    started(engine, "a", 16, slice_size=16, time_limit=limit)
    assert engine.state.jobs["a"].slices[0].nodes == nodes("r01", 1, 16)
    spares = nodes("r01", 17, 18)  # r01's spares, reserved once the job runs
    engine.handle(cmd(Reserve, reservation="spares", nodes=spares, start=START, end=END))
    events = engine.handle(cmd(ReportNodeHealth, node="r01-n05", health=Health.FAILED))
    swaps = [e for e in events if isinstance(e, NodeSwapped)]
    a = engine.state.jobs["a"]
    if swapped:
        assert [(e.old_node, e.new_node) for e in swaps] == [("r01-n05", "r01-n18")]
    else:
        assert not swaps  # r01's only free nodes are reserved: the slice moves to r02
        assert a.slices[0].racks == ("r02",)
    assert not set(a.nodes) & set(spares) or swapped
    assert not [e for e in events if isinstance(e, CommandRejected)]
    check_invariants(engine.state, events)


def test_the_controller_refuses_a_swap_or_a_migration_onto_nodes_a_reservation_keeps() -> None:
    engine, _ = cluster()
    started(engine, "a", 16, slice_size=16)  # on r01, no time limit
    engine.handle(cmd(Reserve, reservation="r2", racks=("r02",), start=START, end=END))
    engine.handle(cmd(Reserve, reservation="sp", nodes=nodes("r01", 17, 18), start=START, end=END))
    (swap,) = engine.handle(
        cmd(SwapNode, job="a", slice=0, old_node="r01-n05", new_node="r01-n18",
            actor="policy:spare_swap")
    )  # fmt: skip
    assert isinstance(swap, CommandRejected) and swap.code == "reserved"
    assert "r01-n18 is reserved (sp)" in swap.reason
    (move,) = engine.handle(
        cmd(MigrateSlice, job="a", slice=0, nodes=nodes("r02", 1, 16), actor="policy:spare_swap")
    )
    assert isinstance(move, CommandRejected) and move.code == "reserved"
    assert "is reserved (r2)" in move.reason and "has no time limit" in move.reason


@pytest.mark.parametrize(
    ("limit", "planned"),
    [(None, False), (HOURS, True)],
    ids=["victim without a limit: no plan", "victim ends by the start: re-placed there"],
)
def test_defrag_re_places_a_victim_on_reserved_nodes_only_if_it_ends_by_the_start(
    limit: timedelta | None, planned: bool
) -> None:
    """Four racks: r01-r03 each run a slice of 10 (6 usable left each, 18 in all); r04 is
    reserved. A hero of 16 without a limit is blocked by topology; freeing a rack means
    moving its slice of 10, and only r04 has room for it."""
    clock = Clock()
    policies, chosen = preset("tas+spares+defrag", PolicySettings(slice_size=16))
    engine = Engine(CLUSTER, clock=clock, policies=policies)
    racks = [rack(f"r0{i}") for i in range(1, 5)]
    engine.handle(cmd(RegisterTopology, topology=topology(*racks), settings=chosen))
    for i in (1, 2, 3):
        started(engine, f"v{i}", 10, slice_size=10, time_limit=limit, priority=0)
    assert sorted(engine.state.jobs[f"v{i}"].slices[0].racks[0] for i in (1, 2, 3)) == [
        "r01", "r02", "r03"
    ]  # fmt: skip
    engine.handle(cmd(Reserve, reservation="maint", racks=("r04",), start=START, end=END))
    events = engine.handle(cmd(SubmitJob, job=job("hero", 16, slice_size=16, priority=5)))
    preempted = [e.job for e in events if isinstance(e, JobPreempted)]
    assert not [e for e in events if isinstance(e, CommandRejected)]
    if planned:
        (victim,) = preempted
        assert engine.state.jobs[victim].slices[0].racks == ("r04",)
        assert engine.state.jobs["hero"].status.value == "placed"
    else:
        assert preempted == []  # nothing to gain: no victim may go to r04
        assert engine.state.jobs["hero"].status.value == "queued"
    check_invariants(engine.state, events)
