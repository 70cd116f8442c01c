"""Stories of a degraded rack: an NVL72 rack that lost one NVSwitch tray of nine.

It keeps running what it runs, at about 8/9 of its NVLink bandwidth; new slices go there only
when no healthy rack fits them, and Auto Defrag does not move work onto it to free a healthy
rack. Racks are drawn with their nodes: letters are jobs, `.` free, `s` the spare reserve.
"""

from __future__ import annotations

from datetime import timedelta

from rackplane.models import Health, PolicySettings, RackHealth, SliceAssignment
from rackplane.models.commands import (
    PlaceJob,
    RegisterTopology,
    ReportNodeHealth,
    ReportRackHealth,
    StartJob,
    SubmitJob,
)
from rackplane.models.events import (
    DefragPlanned,
    JobBlocked,
    JobPlaced,
    JobPreempted,
    NodeSwapped,
    SliceMigrated,
)
from rackplane.policies import preset
from rackplane.timeline import describe
from tests.builders import CLUSTER, Harness, cmd, job, node, nodes, rack, topology
from tests.invariants import check_invariants
from tests.policies.test_stories import Clock, Engine, engine_for, run


def degrade(rack_id: str) -> ReportRackHealth:
    return cmd(
        ReportRackHealth, rack=rack_id, health=RackHealth.DEGRADED, cause="NVSwitch tray 4 lost"
    )


def placed(events: list) -> dict[str, JobPlaced]:  # type: ignore[type-arg]
    return {e.job: e for e in events if isinstance(e, JobPlaced)}


# A degraded rack that is the best fit is passed over while a healthy rack fits:
#
#     r01  [. . . . . s]   degraded (best fit: 5 usable)
#     r02  [. . . . . . . s]   healthy (7 usable)


def test_a_new_slice_goes_to_the_healthy_rack_though_the_degraded_one_fits_best() -> None:
    engine, clock = engine_for("tas+spares", rack("r01", 6), rack("r02", 8), spares_per_rack=1)
    run(engine, clock, degrade("r01"))
    events = run(engine, clock, cmd(SubmitJob, job=job("a", 4, slice_size=4)))
    assert placed(events)["a"].slices[0].racks == ("r02",)
    assert "degraded" not in placed(events)["a"].explanation


def test_without_the_degradation_the_same_job_takes_the_best_fit() -> None:
    engine, clock = engine_for("tas+spares", rack("r01", 6), rack("r02", 8), spares_per_rack=1)
    events = run(engine, clock, cmd(SubmitJob, job=job("a", 4, slice_size=4)))
    assert placed(events)["a"].slices[0].racks == ("r01",)


# When no healthy rack fits, the degraded rack takes the slice, and the placement says why
# (and a job that fits nowhere says which degraded racks it counted):
#
#     r01  [. . . . . s]   degraded
#     r02  [B B B B B B . s]   healthy, full for a slice of 4


def test_a_degraded_rack_is_used_when_no_healthy_rack_fits_and_the_placement_says_so() -> None:
    engine, clock = engine_for("tas+spares", rack("r01", 6), rack("r02", 8), spares_per_rack=1)
    run(engine, clock, degrade("r01"), cmd(SubmitJob, job=job("b", 6, slice_size=6)))
    assert engine.state.jobs["b"].slices[0].racks == ("r02",)
    events = run(engine, clock, cmd(SubmitJob, job=job("a", 4, slice_size=4)))
    got = placed(events)["a"]
    assert got.slices[0].racks == ("r01",)
    assert "degraded rack r01" in got.explanation
    assert "the healthy racks cannot hold it" in got.explanation


def test_a_blocked_job_says_which_degraded_racks_were_counted() -> None:
    engine, clock = engine_for("tas+spares", rack("r01", 6), rack("r02", 8), spares_per_rack=1)
    run(engine, clock, degrade("r01"), cmd(SubmitJob, job=job("b", 3, slice_size=3)))
    events = run(engine, clock, cmd(SubmitJob, job=job("big", 6, slice_size=6)))
    (blocked,) = [e for e in events if isinstance(e, JobBlocked)]
    assert blocked.reason == "topology"
    assert "counted degraded racks r01" in blocked.explanation


# Running work stays: a degraded rack is no failed rack.
#
#     r01  [A A A A . s]  <- one NVSwitch tray lost        r02  [. . . . . s]


def test_work_running_on_a_rack_that_degrades_stays_where_it_is() -> None:
    engine, clock = engine_for("tas+spares", rack("r01", 6), rack("r02", 6), spares_per_rack=1)
    run(engine, clock, cmd(SubmitJob, job=job("a", 4, slice_size=4)), cmd(StartJob, job="a"))
    assert engine.state.jobs["a"].slices[0].racks == ("r01",)
    events = run(engine, clock, degrade("r01"))
    assert [e.type for e in events] == ["RackDegraded"]
    (degraded,) = events
    assert degraded.jobs == ("a",)
    assert "jobs in it keep running: a" in describe(degraded)
    a = engine.state.jobs["a"]
    assert a.status.value == "running" and a.slices[0].racks == ("r01",)
    assert engine.state.racks["r01"].health is RackHealth.DEGRADED


def test_a_failed_node_of_a_degraded_rack_is_swapped_for_its_spare() -> None:
    engine, clock = engine_for("tas+spares", rack("r01", 6), rack("r02", 6), spares_per_rack=1)
    run(engine, clock, cmd(SubmitJob, job=job("a", 4, slice_size=4)), cmd(StartJob, job="a"))
    run(engine, clock, degrade("r01"))
    dead = engine.state.jobs["a"].slices[0].nodes[0]
    events = run(
        engine, clock, cmd(ReportNodeHealth, node=dead, health=Health.FAILED, cause="XID 79")
    )
    (swap,) = [e for e in events if isinstance(e, NodeSwapped)]
    assert swap.new_node == node("r01", 6)
    assert not [e for e in events if isinstance(e, SliceMigrated | JobPreempted)]


# A slice that must move prefers a healthy rack, even one further away in the fabric:
#
#     pod p1: r01 [A A A A . s] <- fails   r02 [. . . . . s] degraded
#     pod p2: r03 [. . . . . s]


def three_racks() -> tuple[Engine, Clock]:
    return engine_for(
        "tas+spares",
        rack("r01", 6),
        rack("r02", 6),
        rack("r03", 6, pod="p2"),
        spares_per_rack=1,
    )


def test_a_slice_leaving_a_failed_rack_goes_to_a_healthy_rack_before_a_nearer_degraded_one() -> (
    None
):
    engine, clock = three_racks()
    run(engine, clock, cmd(SubmitJob, job=job("a", 4, slice_size=4)), cmd(StartJob, job="a"))
    assert engine.state.jobs["a"].slices[0].racks == ("r01",)
    run(engine, clock, degrade("r02"))
    events = run(engine, clock, cmd(ReportRackHealth, rack="r01", health=RackHealth.FAILED))
    (moved,) = [e for e in events if isinstance(e, SliceMigrated)]
    assert moved.to_rack == "r03"


def test_a_slice_moves_to_a_degraded_rack_when_no_healthy_rack_has_room() -> None:
    engine, clock = three_racks()
    run(engine, clock, cmd(SubmitJob, job=job("a", 4, slice_size=4)), cmd(StartJob, job="a"))
    run(engine, clock, degrade("r02"), cmd(SubmitJob, job=job("c", 5, slice_size=5)))
    assert engine.state.jobs["c"].slices[0].racks == ("r03",)
    events = run(engine, clock, cmd(ReportRackHealth, rack="r01", health=RackHealth.FAILED))
    (moved,) = [e for e in events if isinstance(e, SliceMigrated)]
    assert moved.to_rack == "r02"
    assert "degraded, an NVSwitch tray lost: no healthy rack has room" in moved.explanation
    check_invariants(engine.state)


# Auto Defrag does not move work onto a degraded rack to free a healthy one:
#
#     r01  [A A A A A A A A . . . . . . . . s s]   a: managed, 8 (cheap to move)
#     r02  [B B B B B B B B C C C C C C C C s s]   b, c: 8 each
#     r03  [. . . . . . . . s s]                    room for a, if it were healthy
#
# The hero (16) fits no rack. Freeing r01 means putting a on r03: done while r03 is healthy,
# not while it is degraded.


def defrag_cluster(*, r03: RackHealth) -> tuple[Engine, Clock]:
    policies, settings = preset("tas+spares+defrag", PolicySettings())
    h = Harness().given(
        cmd(
            RegisterTopology,
            topology=topology(rack("r01"), rack("r02"), rack("r03", 10)),
            settings=settings,
        )
    )
    for j, r, first in (("a", "r01", 1), ("b", "r02", 1), ("c", "r02", 9)):
        spec = job(j, 8, slice_size=8, checkpoint_interval=timedelta(minutes=30))
        h.given(
            cmd(SubmitJob, job=spec),
            cmd(PlaceJob, job=j, slices=(SliceAssignment(nodes=nodes(r, first, first + 7)),)),
            cmd(StartJob, job=j),
        )
    if r03 is not RackHealth.HEALTHY:
        h.given(cmd(ReportRackHealth, rack="r03", health=r03))
    clock = Clock()
    clock.now = h.now + timedelta(minutes=4)
    return Engine(CLUSTER, clock=clock, policies=policies, state=h.state), clock


def test_defrag_frees_a_rack_by_moving_work_onto_a_healthy_rack() -> None:
    engine, clock = defrag_cluster(r03=RackHealth.HEALTHY)
    events = run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    (plan,) = [e for e in events if isinstance(e, DefragPlanned)]
    assert plan.victims == ("a",) and plan.target_racks == ("r01",)
    assert engine.state.jobs["a"].slices[0].racks == ("r03",)


def test_defrag_does_not_move_work_onto_a_degraded_rack_to_free_a_healthy_one() -> None:
    engine, clock = defrag_cluster(r03=RackHealth.DEGRADED)
    events = run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    assert not [e for e in events if isinstance(e, DefragPlanned | JobPreempted)]
    (blocked,) = [e for e in events if isinstance(e, JobBlocked)]
    assert blocked.reason == "topology" and "counted degraded racks r03" in blocked.explanation
    assert engine.state.jobs["a"].slices[0].racks == ("r01",)
