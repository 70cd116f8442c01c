"""evolve builds job records field by field (positionally, for speed): a field added to
`JobState` must be added there too, or replays would silently drop it."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta

import pytest

from rackplane.models import (
    CompleteJob,
    CordonNode,
    JobSpec,
    JobStatus,
    JobSubmitted,
    PlaceJob,
    RackHealth,
    ReportRackHealth,
    SliceAssignment,
    StartJob,
    SubmitJob,
    UncordonNode,
)
from rackplane.projections import evolve, fold, initial_state
from rackplane.projections.evolve import _job_with
from rackplane.projections.state import BlockInfo, ClusterState, JobState, SliceState, built_state
from tests.builders import CLUSTER, Harness, cmd, job, node, nodes, rack, register

AT = datetime(2026, 1, 1, tzinfo=UTC)

# Every field away from its default, so a field dropped by a copy shows.
JOB = JobState(
    spec=JobSpec(id="j1", nodes=4, slice_size=4, expected_duration=timedelta(hours=1)),
    status=JobStatus.RUNNING,
    order=7,
    submitted_at=AT,
    slices=(SliceState(index=0, size=4, nodes=("n1", "n2", "n3", "n4"), racks=("r1",)),),
    placed_at=AT + timedelta(minutes=1),
    started_at=AT + timedelta(minutes=2),
    run_since=AT + timedelta(minutes=3),
    blocked=BlockInfo("topology", AT, 3, 0, "why"),
    borrowing=True,
    front=True,
    preemptions=1,
    migrations=2,
    swaps=3,
    protected_by="PodDisruptionBudget ns/pdb",
)


def test_the_positional_constructors_know_every_field_of_a_job_in_order() -> None:
    # evolve's hot handlers and `_job_with` pass JobState's fields in this order
    assert list(JobState._fields) == [
        "spec", "status", "order", "submitted_at", "slices", "placed_at", "started_at",
        "run_since", "blocked", "borrowing", "front", "preemptions", "migrations", "swaps",
        "protected_by",
    ]  # fmt: skip
    assert all(getattr(JOB, f) != d for f, d in JobState._field_defaults.items())


def test_job_with_copies_every_field_and_changes_only_those_given() -> None:
    assert _job_with(JOB) == JOB
    changes = {"status": JobStatus.QUEUED, "front": False, "swaps": 9, "blocked": None}
    assert _job_with(JOB, **changes) == JOB._replace(**changes)


def test_a_submitted_job_gets_the_defaults_of_every_later_field() -> None:
    submitted = JobSubmitted(id="c/1", cluster="c", seq=1, at=AT, actor="user", job=JOB.spec)
    state = evolve(ClusterState(cluster="c"), submitted)
    assert state.jobs["j1"] == JobState(JOB.spec, JobStatus.QUEUED, 1, AT)
    assert type(state.jobs["j1"]) is JobState


def test_a_node_back_in_service_is_freed_by_a_later_release_in_the_same_run() -> None:
    # One run of `fold`: the rack's never-free nodes are looked up by the first release
    # (j1), then a node is cordoned and uncordoned, served by j2 and released with it:
    # it must be free at the end, as it is when the events are applied one by one.
    h = Harness().given(register(rack("r01", 6), spares_per_rack=0))
    for job_id, command in (("j1", None), ("j2", CordonNode)):
        h.given(cmd(SubmitJob, job=job(job_id, 2, slice_size=2)))
        if command is not None:
            h.given(cmd(command, node=node("r01", 1)), cmd(UncordonNode, node=node("r01", 1)))
        h.given(
            cmd(PlaceJob, job=job_id, slices=(SliceAssignment(nodes=nodes("r01", 1, 2)),)),
            cmd(CompleteJob, job=job_id),
        )
    replayed = fold(initial_state(CLUSTER), h.log)
    assert replayed == h.state
    assert replayed.racks["r01"].free == frozenset(nodes("r01", 1, 6))


def test_built_state_sets_every_field_as_the_constructor_does() -> None:
    names = [f.name for f in fields(ClusterState)]
    # A distinct object per field: a slot set out of order, or not at all, shows.
    marks = [object() for _ in names]
    built, made = built_state(*marks), ClusterState(*marks)  # type: ignore[arg-type]
    assert type(built) is ClusterState
    assert all(
        getattr(built, n) is m and getattr(made, n) is m for n, m in zip(names, marks, strict=True)
    )
    state = fold(initial_state(CLUSTER), Harness().given(register(rack("r01", 2))).log)
    values = [getattr(state, n) for n in names]
    assert built_state(*values) == state
    with pytest.raises(ValueError, match="shorter"):
        built_state(*values[:-1])


def test_an_event_that_writes_no_node_or_rack_keeps_those_maps_and_a_write_makes_new_ones() -> None:
    # Tables derived from `nodes` and `racks` (placement's room, the queue) are kept per map
    # object: a map no event wrote stays the same object; one that was written is a new one.
    h = Harness().given(register(rack("r01", 4), spares_per_rack=0))
    before = h.state
    h.given(cmd(SubmitJob, job=job("j1", 2, slice_size=2)))
    assert (h.state.nodes, h.state.racks) == (before.nodes, before.racks)
    assert h.state.nodes is before.nodes and h.state.racks is before.racks
    submitted = h.state
    h.given(cmd(PlaceJob, job="j1", slices=(SliceAssignment(nodes=nodes("r01", 1, 2)),)))
    assert h.state.nodes is not submitted.nodes and h.state.racks is not submitted.racks
    assert h.state.racks["r01"].free == frozenset(nodes("r01", 3, 4))
    placed = h.state
    h.given(cmd(StartJob, job="j1"))
    assert h.state.nodes is placed.nodes and h.state.racks is placed.racks
    started = h.state
    h.given(cmd(CordonNode, node=node("r01", 4)))  # a node record, and the rack's free index
    assert h.state.nodes is not started.nodes and h.state.racks is not started.racks
    cordoned = h.state
    h.given(cmd(ReportRackHealth, rack="r01", health=RackHealth.DEGRADED, cause="tray"))
    assert h.state.nodes is cordoned.nodes and h.state.racks is not cordoned.racks
    assert h.state.racks["r01"].health is RackHealth.DEGRADED
    assert fold(initial_state(CLUSTER), h.log) == h.state
