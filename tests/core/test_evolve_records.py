"""evolve builds job records field by field (positionally, for speed): a field added to
`JobState` must be added there too, or replays would silently drop it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rackplane.models import JobSpec, JobStatus
from rackplane.projections.evolve import _job_with
from rackplane.projections.state import BlockInfo, JobState, SliceState

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
)


def test_the_positional_constructors_know_every_field_of_a_job_in_order() -> None:
    # evolve's hot handlers and `_job_with` pass JobState's fields in this order
    assert list(JobState._fields) == [
        "spec", "status", "order", "submitted_at", "slices", "placed_at", "started_at",
        "run_since", "blocked", "borrowing", "front", "preemptions", "migrations", "swaps",
    ]  # fmt: skip
    assert all(getattr(JOB, f) != d for f, d in JobState._field_defaults.items())


def test_job_with_copies_every_field_and_changes_only_those_given() -> None:
    assert _job_with(JOB) == JOB
    changes = {"status": JobStatus.QUEUED, "front": False, "swaps": 9, "blocked": None}
    assert _job_with(JOB, **changes) == JOB._replace(**changes)
