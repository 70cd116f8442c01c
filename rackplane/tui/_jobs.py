"""Rows of the jobs view: running, placed, queued and blocked jobs with the numbers behind them.

Goodput here is per job and approximate: of the GPU-hours the job has held since it first
started (its GPUs now x time since start), the share not lost: GPU-hours lost to preemptions
and migrations (recorded in the events) and the work at risk since its last checkpoint are
subtracted. `-` for a job that has not started.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from rackplane.models import Event, JobStatus
from rackplane.projections import ClusterState, JobState, job_gpus

COLUMNS = ("job", "status", "kind", "prio", "nodes", "gpus", "slices", "racks", "waiting",
           "waited", "goodput", "since ckpt")  # fmt: skip


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job, as shown and as sorted (`key` per column)."""

    job: str
    cells: tuple[str, ...]
    keys: tuple[object, ...]

    def matches(self, words: Sequence[str]) -> bool:
        """Every word of the filter appears in some cell (case-insensitive)."""
        text = " ".join(self.cells).lower()
        return all(w in text for w in words)


def lost_gpu_hours(events: Sequence[Event]) -> dict[str, float]:
    """GPU-hours each job lost to preemptions and migrations, from the events."""
    lost: dict[str, float] = defaultdict(float)
    for e in events:
        if e.type in ("JobPreempted", "SliceMigrated"):
            lost[e.job] += e.lost_gpu_hours
    return lost


def _minutes(d: timedelta | None) -> str:
    if d is None:
        return "-"
    m = d.total_seconds() / 60
    return f"{m:.0f}m" if m < 120 else f"{m / 60:.1f}h"


def _status(job: JobState) -> str:
    if job.status is JobStatus.QUEUED and job.blocked is not None:
        return "blocked"
    return job.status.value


def _racks(job: JobState) -> str:
    racks = list(dict.fromkeys(r for s in job.slices for r in s.racks))
    text = ",".join(racks[:4])
    return text + (f" +{len(racks) - 4}" if len(racks) > 4 else "")


def job_rows(state: ClusterState, lost: dict[str, float]) -> list[JobRow]:
    """One row per unfinished job, in queue order for queued jobs, then by id."""
    now = state.at
    rows = []
    for job in state.jobs.values():
        gpus = job_gpus(state, job)
        b = job.blocked
        waiting = (
            f"{b.reason}: {b.allocatable_nodes} nodes free, "
            f"{b.placeable_slices}/{len(job.spec.slice_sizes)} slices fit"
            if b is not None and job.status is JobStatus.QUEUED
            else ""
        )
        waited = now - b.since if b is not None and now and job.status is JobStatus.QUEUED else None
        goodput: float | None = None
        keeps = job.spec.keeps_progress
        at_risk = job.at_risk(now) if now and not keeps else None
        if job.started_at is not None and now is not None and gpus:
            held = gpus * (now - job.started_at).total_seconds() / 3600
            risk = gpus * (at_risk or timedelta(0)).total_seconds() / 3600
            if held > 0:
                goodput = max(0.0, held - lost.get(job.id, 0.0) - risk) / held
        running = job.status is JobStatus.RUNNING
        cells = (
            job.id,
            _status(job),
            job.spec.kind.value,
            str(job.spec.priority),
            str(job.spec.nodes),
            str(gpus),
            str(len(job.slices)) if job.slices else f"0/{len(job.spec.slice_sizes)}",
            _racks(job),
            waiting,
            _minutes(waited) if waited is not None else "",
            f"{100 * goodput:.0f}%" if goodput is not None else "-",
            _minutes(at_risk) if running and at_risk is not None else "-",
        )
        keys = (
            job.id,
            _status(job),
            job.spec.kind.value,
            -job.spec.priority,
            -job.spec.nodes,
            -gpus,
            -len(job.slices),
            _racks(job),
            waiting,
            -(waited.total_seconds() if waited else 0),
            goodput if goodput is not None else 2.0,
            -(at_risk.total_seconds() if running and at_risk else 0),
        )
        rows.append(JobRow(job.id, cells, keys))
    return rows
