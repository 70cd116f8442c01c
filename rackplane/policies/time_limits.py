"""`time_limits`: ends a running job that passed its time limit (`JobSpec.time_limit`).

A limit counts from the job's start (`JobStarted`; a preempted job starts over). The policy
proposes `ExpireJob` for each running job whose start + limit is past; the controller checks
the time again and ends it (`JobFailed`, reason `time_limit: ...`), freeing its nodes.

No event happens when a limit passes, so the policy says when it next has something to do
(`due`): the engine (`Engine.wake`) and the streaming shell's policy runner (`tick`) offer
it the state again, with no events, once that time comes.
Cost: O(jobs) per look, for the jobs that hold nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rackplane.models import Command, Event, ExpireJob, JobStatus
from rackplane.policies._proposals import Proposals
from rackplane.projections.state import ClusterState

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
        out = Proposals(self.name, state)
        for job_id, end in sorted(_ends(state).items()):
            if end <= now:
                out.add(ExpireJob, job=job_id)
        return list(out.commands)

    def due(self, state: ClusterState) -> datetime | None:
        """When the next limit passes (None: no running job has one)."""
        return min(_ends(state).values(), default=None)


def _ends(state: ClusterState) -> dict[str, datetime]:
    return {
        j.id: j.started_at + j.spec.time_limit
        for j in state.jobs.values()
        if j.status is JobStatus.RUNNING
        and j.spec.time_limit is not None
        and j.started_at is not None
    }
