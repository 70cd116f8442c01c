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
    JobSpec,
    MigrateSlice,
    NodeCordoned,
    NodeSwapped,
    PlaceJob,
    PolicySettings,
    QueueSpec,
    RackHealth,
    RegisterTopology,
    ReportNodeHealth,
    ReportRackHealth,
    ReservationStarted,
    Reserve,
    SliceAssignment,
    SliceMigrated,
    StartJob,
    StartReservation,
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


# Dedicated reservations: a hero run's room. r02 is reserved for alice (and queue pretrain
# where queues are set) from T0 + 4 h to T0 + 6 h; a job that names it runs only there, only
# then; everyone else is kept off from the start.
#
#   r01 [..................]   anyone
#   r02 [..................]   hero: alice / pretrain, T0+4h .. T0+6h


def hero_room(**settings: object) -> tuple[Engine, Clock]:
    engine, clock = cluster(**settings)
    queues = ("pretrain",) if settings.get("queues") else ()
    events = engine.handle(cmd(Reserve, reservation="hero", racks=("r02",), start=START, end=END,
                               users=("alice",), queues=queues, reason="70B run"))  # fmt: skip
    assert [e.type for e in events] == ["ReservationMade"]
    return engine, clock


def hero_job(job_id: str = "h", **fields: object) -> JobSpec:
    fields.setdefault("owner", "alice")
    return job(job_id, 16, slice_size=16, reservation="hero", **fields)


def test_a_hero_run_waits_for_its_reservation_then_lands_inside_it() -> None:
    engine, clock = hero_room()
    events = engine.handle(cmd(SubmitJob, job=hero_job()))
    h = engine.state.jobs["h"]
    assert h.status.value == "queued"  # r01 is empty, but the run is r02's
    assert h.blocked is not None and h.blocked.reason == "reservation"
    assert "reservation hero starts at" in h.blocked.explanation
    assert f"{START:%Y-%m-%d %H:%M}" in h.blocked.explanation
    clock.now = START
    events = engine.wake()
    (started,) = [e for e in events if isinstance(e, ReservationStarted)]
    assert started.cordoned == ()  # its members must land there
    (placed,) = [e for e in events if isinstance(e, JobPlaced)]
    assert placed.job == "h" and placed.slices[0].nodes == nodes("r02", 1, 16)
    assert "in reservation hero" in placed.explanation
    engine.handle(cmd(StartJob, job="h"))
    clock.now = END
    events = engine.wake()
    assert [e.type for e in events] == ["ReservationEnded"]  # nothing to uncordon
    assert engine.state.jobs["h"].status.value == "running"  # it keeps running after the end
    check_invariants(engine.state, events)


def test_a_non_members_work_is_preempted_at_the_start_and_kept_off_while_a_members_stays() -> None:
    engine, clock = cluster()
    fill_r01(engine)
    engine.handle(cmd(SubmitJob, job=job("bobs", 8, owner="bob")))
    engine.handle(cmd(SubmitJob, job=job("alices", 8, owner="alice")))
    for j in ("bobs", "alices"):
        engine.handle(cmd(StartJob, job=j))
        assert engine.state.jobs[j].slices[0].racks == ("r02",)
    engine.handle(cmd(Reserve, reservation="hero", racks=("r02",), start=START, end=END,
                      users=("alice",)))  # fmt: skip
    clock.now = START
    events = engine.wake()
    (started,) = [e for e in events if isinstance(e, ReservationStarted)]
    assert started.staying == ("alices",)  # a member's job: never preempted by it
    assert not [e for e in events if isinstance(e, NodeCordoned)]
    assert [(e.job, e.cause) for e in events if isinstance(e, JobPreempted)] == [
        ("bobs", "reservation")
    ]
    assert engine.state.jobs["bobs"].status.value == "queued"  # r02 is alice's now
    short = engine.handle(cmd(SubmitJob, job=job("quick", 8, owner="bob", time_limit=HOURS)))
    assert not [e for e in short if isinstance(e, JobPlaced)]  # even short work stays off
    assert not [e for e in short if isinstance(e, CommandRejected)]
    assert engine.state.jobs["alices"].status.value == "running"
    clock.now = END
    events = engine.wake()
    assert not [e for e in events if e.type == "NodeUncordoned"]
    placed = {e.job for e in events if isinstance(e, JobPlaced)}
    assert "bobs" in placed  # the end frees r02 for everyone
    assert engine.state.jobs["alices"].status.value == "running"
    check_invariants(engine.state, events)


def test_a_job_waiting_for_a_cancelled_reservation_is_blocked_saying_so() -> None:
    engine, _ = hero_room()
    engine.handle(cmd(SubmitJob, job=hero_job()))
    events = engine.handle(cmd(CancelReservation, reservation="hero", reason="postponed"))
    assert [e.type for e in events] == ["ReservationEnded", "JobBlocked"]
    blocked = engine.state.jobs["h"].blocked
    assert blocked is not None and blocked.reason == "reservation"
    assert "reservation hero is over" in blocked.explanation
    assert "cancel the job or resubmit it" in blocked.explanation
    assert engine.state.jobs["h"].status.value == "queued"  # never placed elsewhere


QUEUES = (
    QueueSpec(name="research"),
    QueueSpec(name="pretrain", parent="research"),
    QueueSpec(name="eval", parent="research"),
)


@pytest.mark.parametrize(
    ("spec", "code", "why"),
    [
        (job("x", 8, owner="alice", reservation="nope", queue="pretrain"), "unknown_reservation",
         "no reservation nope"),
        (job("x", 8, owner="alice", reservation="maint", queue="pretrain"), "not_in_reservation",
         "is for maintenance"),
        (job("x", 8, owner="bob", reservation="hero", queue="eval"), "not_in_reservation",
         "is for user alice, queue pretrain; job x (owner bob, queue eval) is neither"),
        (job("x", 8, owner="bob", reservation="hero", queue="pretrain"), None, ""),
        (job("x", 8, owner="alice", reservation="hero", queue="eval"), None, ""),
    ],
    ids=["no such reservation", "a maintenance one", "neither owner nor queue",
         "its queue is a member", "its owner is a member"],
)  # fmt: skip
def test_submitting_into_a_reservation_is_refused_unless_the_job_is_a_members(
    spec: JobSpec, code: str | None, why: str
) -> None:
    engine, _ = hero_room(queues=QUEUES)
    engine.handle(cmd(Reserve, reservation="maint", racks=("r01",), start=START, end=END))
    events = engine.handle(cmd(SubmitJob, job=spec))
    if code is None:
        assert [e.type for e in events] == ["JobSubmitted", "JobBlocked"]
        return
    (rejected,) = events
    assert isinstance(rejected, CommandRejected) and rejected.code == code
    assert why in rejected.reason


@pytest.mark.parametrize(
    ("queue", "why"),
    [("nope", "'nope' is not a queue"), ("research", "'research' has child queues")],
)
def test_a_reservation_for_an_unknown_or_parent_queue_is_refused(queue: str, why: str) -> None:
    engine, _ = cluster(queues=QUEUES)
    (rejected,) = engine.handle(cmd(Reserve, reservation="r", racks=("r02",), start=START,
                                    end=END, queues=(queue,)))  # fmt: skip
    assert isinstance(rejected, CommandRejected) and rejected.code == "unknown_queue"
    assert why in rejected.reason


@pytest.mark.parametrize(
    ("started", "where", "why"),
    [
        (False, ("r02", 1, 16), "reservation hero starts at"),
        (True, ("r01", 1, 16), "node r01-n01 is not in reservation hero"),
        (True, ("r02", 1, 16), None),
    ],
    ids=["too early", "outside its nodes", "inside, once started"],
)
def test_the_controller_places_a_reservations_job_only_inside_it_once_started(
    started: bool, where: tuple[str, int, int], why: str | None
) -> None:
    clock = Clock()
    engine = Engine(CLUSTER, clock=clock, policies=[])  # no scheduler: the test places
    engine.handle(cmd(RegisterTopology, topology=topology(rack("r01"), rack("r02")),
                      settings=PolicySettings(slice_size=8)))  # fmt: skip
    engine.handle(cmd(Reserve, reservation="hero", racks=("r02",), start=START, end=END,
                      users=("alice",)))  # fmt: skip
    engine.handle(cmd(SubmitJob, job=hero_job()))
    if started:
        clock.now = START
        engine.handle(cmd(StartReservation, reservation="hero", actor="policy:reservations"))
    slices = (SliceAssignment(nodes=nodes(*where)),)
    events = engine.handle(cmd(PlaceJob, job="h", actor="policy:tas", slices=slices))
    if why is None:
        assert [e.type for e in events] == ["JobPlaced"]
        return
    (rejected,) = events
    assert isinstance(rejected, CommandRejected) and rejected.code == "reserved"
    assert why in rejected.reason


def test_a_maintenance_reservation_still_cordons_and_keeps_everyone_off() -> None:
    engine, clock = reserved()
    clock.now = START
    events = engine.wake()
    (started,) = [e for e in events if isinstance(e, ReservationStarted)]
    assert len(started.cordoned) == 18
    assert not engine.state.windows["maint"].dedicated


def test_a_dedicated_reservation_survives_a_snapshot() -> None:
    engine, clock = hero_room(queues=QUEUES)
    engine.handle(cmd(SubmitJob, job=hero_job(queue="pretrain")))
    clock.now = START
    engine.wake()
    state = engine.state
    assert state.windows["hero"].users == ("alice",)
    assert state.windows["hero"].queues == ("pretrain",)
    assert decode_state(encode_state(state)) == state


def test_the_timeline_says_who_a_reservation_is_for_and_which_job_runs_in_it() -> None:
    from rackplane.timeline import describe

    engine, _ = cluster(queues=QUEUES)
    (made,) = engine.handle(cmd(Reserve, reservation="hero", racks=("r02",), start=START,
                                end=END, users=("alice",), queues=("pretrain",)))  # fmt: skip
    assert describe(made) == (
        f"reservation hero: 18 nodes from {START:%Y-%m-%d %H:%M} to {END:%Y-%m-%d %H:%M} "
        "for alice, queue pretrain"
    )
    submitted, _ = engine.handle(cmd(SubmitJob, job=hero_job(queue="pretrain")))
    assert describe(submitted).endswith(", queue pretrain, in reservation hero")
    (maint,) = engine.handle(cmd(Reserve, reservation="m", racks=("r01",), start=START, end=END))
    assert " for " not in describe(maint)


def test_defrag_does_not_move_a_job_out_of_its_reservation() -> None:
    """Alice's job of 8 runs in her reservation on r02, bob's of 8 on r01; after the end,
    bob's job of 16 is blocked by topology. Defrag moves bob's job, never alice's (though
    its lower priority makes it the cheaper victim): a re-placement could take it out of its
    room."""

    engine, clock = hero_room()
    clock.now = START
    engine.wake()
    engine.handle(cmd(SubmitJob, job=job("hers", 8, slice_size=8, owner="alice",
                                         reservation="hero", priority=-1)))  # fmt: skip
    engine.handle(cmd(StartJob, job="hers"))
    assert engine.state.jobs["hers"].slices[0].racks == ("r02",)
    engine.handle(cmd(SubmitJob, job=job("his", 8, slice_size=8, owner="bob")))
    engine.handle(cmd(StartJob, job="his"))
    assert engine.state.jobs["his"].slices[0].racks == ("r01",)
    clock.now = END
    engine.wake()
    events = engine.handle(cmd(SubmitJob, job=job("big", 16, slice_size=16, owner="bob")))
    assert [(e.job, e.cause) for e in events if isinstance(e, JobPreempted)] == [("his", "defrag")]
    assert engine.state.jobs["hers"].slices[0].racks == ("r02",)
    assert engine.state.jobs["big"].status.value == "placed"
    assert not [e for e in events if isinstance(e, CommandRejected)]
    check_invariants(engine.state, events)


@pytest.mark.parametrize(
    ("owner", "reservation", "moved"),
    [("bob", None, False), ("alice", "hero", True)],
    ids=["a non-member's slice is not moved in", "a member's job moves within the rules"],
)
def test_a_started_hero_room_takes_no_non_members_slice_when_its_rack_fails(
    owner: str, reservation: str | None, moved: bool
) -> None:
    """r02 is alice's from START, when a job of 8 starts and then its rack fails: bob's, on
    r01, is not migrated into alice's room (it is re-queued); alice's, in her room, migrates
    to r01 like any job (moves of a running job follow the usual rules)."""
    engine, clock = hero_room()
    clock.now = START
    engine.wake()
    started(engine, "a", 8, owner=owner, reservation=reservation, time_limit=HOURS)
    rack_of = engine.state.jobs["a"].slices[0].racks[0]
    assert rack_of == ("r02" if reservation else "r01")
    other = "r01" if reservation else "r02"
    events = engine.handle(cmd(ReportRackHealth, rack=rack_of, health=RackHealth.FAILED))
    a = engine.state.jobs["a"]
    if moved:  # its own reservation never keeps it out; r01 is anyone's
        assert a.slices[0].racks == (other,)
    else:
        assert a.status.value == "queued"  # r02 is alice's: not moved there
    assert not [e for e in events if isinstance(e, CommandRejected)]
    check_invariants(engine.state, events)


def test_a_cycle_never_offers_a_node_twice_around_a_reservation() -> None:
    """r02 is reserved from START. In one cycle: big (no limit) goes around r02 and does not
    fit; short (ends by START) is placed on r01 by the main path; long (no limit) goes around
    r02 again and must not be offered short's nodes."""
    from rackplane.policies import schedule

    engine = Engine(CLUSTER, clock=Clock(), policies=[])  # the test runs the cycle
    engine.handle(cmd(RegisterTopology, topology=topology(rack("r01"), rack("r02")),
                      settings=PolicySettings(slice_size=8)))  # fmt: skip
    engine.handle(cmd(Reserve, reservation="maint", racks=("r02",), start=START, end=END))
    engine.handle(cmd(SubmitJob, job=job("big", 32, slice_size=16)))
    engine.handle(cmd(SubmitJob, job=job("short", 8, time_limit=HOURS)))
    engine.handle(cmd(SubmitJob, job=job("long", 8)))
    placed = {c.job: [n for s in c.slices for n in s.nodes]
              for c in schedule(engine.state) if isinstance(c, PlaceJob)}  # fmt: skip
    assert set(placed) == {"short", "long"}
    assert not set(placed["short"]) & set(placed["long"])


def test_work_kept_from_reserved_nodes_does_not_take_the_racks_the_head_holds() -> None:
    """r02 is reserved from START; r01 runs `r` (8 of its 16) and r02 `x`. In one cycle: wide
    (two racks, no limit) goes around r02 first, which makes that capacity's copy; head
    (ends by START) does not fit and holds r01, whose 8 nodes free when `r` ends; late (no
    limit) goes around r02 on the same copy and must not take r01's nodes from the head."""
    from rackplane.policies import schedule

    engine = Engine(CLUSTER, clock=Clock(), policies=[])  # the test runs the cycle
    engine.handle(cmd(RegisterTopology, topology=topology(rack("r01"), rack("r02")),
                      settings=PolicySettings(slice_size=8)))  # fmt: skip
    engine.handle(cmd(SubmitJob, job=job("r", 8, time_limit=HOURS)))
    engine.handle(cmd(SubmitJob, job=job("x", 16, slice_size=16)))
    for c in schedule(engine.state):
        engine.handle(c)
    assert [engine.state.jobs[j].slices[0].racks for j in ("r", "x")] == [("r01",), ("r02",)]
    engine.handle(cmd(Reserve, reservation="maint", racks=("r02",), start=START, end=END))
    engine.handle(cmd(SubmitJob, job=job("wide", 32, slice_size=16, priority=2)))
    engine.handle(cmd(SubmitJob, job=job("head", 16, slice_size=16, priority=1, time_limit=HOURS)))
    engine.handle(cmd(SubmitJob, job=job("late", 8)))
    proposed = schedule(engine.state)
    assert proposed == schedule(engine.state, pass_over=False)
    assert not [c for c in proposed if isinstance(c, PlaceJob)]
    assert {c.job for c in proposed} == {"wide", "head", "late"}  # each blocked, saying why
