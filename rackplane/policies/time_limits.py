"""`time_limits`: ends a running job that passed its time limit (`JobSpec.time_limit`).

A limit counts from the job's start (`JobStarted`; a preempted job starts over). The policy
proposes `ExpireJob` for each running job whose start + limit is past; the controller checks
the time again and ends it (`JobFailed`, reason `time_limit: ...`), freeing its nodes.

No event happens when a limit passes, so the policy says when it next has something to do
(`due`): the engine (`Engine.wake`) and the streaming shell's policy runner (`tick`) offer
it the state again, with no events, once that time comes.
Cost: O(jobs changed since the last look) to keep the table of ends (patched per jobs map,
`projections._changes`; rebuilt over the running jobs when the map has no logged path), and
O(running jobs with a limit) only when one has passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from immutables import Map

from rackplane.models import Command, Event, ExpireJob, JobId, JobStatus
from rackplane.policies._proposals import Proposals
from rackplane.projections import _changes
from rackplane.projections.state import ClusterState, JobState

TRIGGERS = frozenset({"JobStarted", "PolicyConfigured"})


@dataclass(frozen=True)
class TimeLimits:
    """Proposes `ExpireJob` for running jobs past their time limit."""

    name: str = "time_limits"

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        """An `ExpireJob` per running job whose limit has passed at `now`."""
        if state.index is None:
            return []
        ends = _ends(state)
        if ends.earliest is None or ends.earliest > now:
            return []  # nothing passed: the common case, O(1)
        out = Proposals(self.name, state)
        for job_id, end in sorted(ends.table.items()):
            if end <= now:
                out.add(ExpireJob, job=job_id)
        return list(out.commands)

    def due(self, state: ClusterState) -> datetime | None:
        """When the next limit passes (None: no running job has one)."""
        return _ends(state).earliest


class _Ends:
    """Running jobs with a limit -> when the limit passes, for one jobs map; and the earliest.
    `table` must not be changed."""

    __slots__ = ("earliest", "jobs", "table")

    def __init__(self, jobs: Map[JobId, JobState], table: dict[JobId, datetime]) -> None:
        self.jobs = jobs
        self.table = table
        self.earliest = min(table.values(), default=None)

    def patched(self, jobs: Map[JobId, JobState], changed: Iterable[JobId]) -> _Ends:
        """The ends for `jobs`, which differs from this one's map at most at `changed`."""
        table = dict(self.table)
        earliest, stale = self.earliest, False
        for job_id in changed:
            old = table.pop(job_id, None)
            if old is not None and earliest is not None and old <= earliest:
                stale = True  # the earliest may have left: take the minimum again
            job = jobs.get(job_id)
            end = _end(job) if job is not None else None
            if end is not None:
                table[job_id] = end
                if earliest is not None and end < earliest:
                    earliest = end
        out = object.__new__(_Ends)
        out.jobs, out.table = jobs, table
        out.earliest = min(table.values(), default=None) if stale or earliest is None else earliest
        return out


def _end(job: JobState) -> datetime | None:
    limit, started = job.spec.time_limit, job.started_at
    if job.status is JobStatus.RUNNING and limit is not None and started is not None:
        return started + limit
    return None


_LAST: list[_Ends] = []
"""The last table of ends: the next look patches it for the jobs changed since."""


def _ends(state: ClusterState) -> _Ends:
    jobs = state.jobs
    last = _LAST[0] if _LAST else None
    if last is not None and last.jobs is jobs:
        return last
    path = _changes.since("jobs", jobs, lambda m: m is last.jobs) if last is not None else None
    if last is None or path is None:
        table = {j.id: e for j in jobs.values() if (e := _end(j)) is not None}
        ends = _Ends(jobs, table)
    else:
        ends = last.patched(jobs, path[1])  # type: ignore[arg-type]
    _LAST[:] = [ends]
    return ends
