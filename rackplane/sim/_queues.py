"""Per-queue figures of a run on a shared cluster (`report`: `queues`, `jain_index`).

Holdings are integrated exactly: the simulator calls `observe` after every command, and
between two commands no queue's holding (`ClusterState.queue_usage`, folded by `evolve`)
changes, so a queue's node-seconds grow by its holding x the time since the last command.
Preemptions are charged to the queue of the job preempted; jobs are counted under the queue
their spec names (the default queue otherwise), as the controller resolves them.
Cost: O(leaf queues) per command.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime

from rackplane.models import Event, JobPreempted, PolicySettings
from rackplane.projections import ClusterState
from rackplane.sim._metrics import quantile, wait_hours
from rackplane.sim._runtime import JobRun
from rackplane.sim.report import QueueMetrics, jain_index


class QueueCollector:
    """Counts, for one run, what each leaf queue held, waited and lost (module docstring)."""

    def __init__(self, settings: PolicySettings, nodes: int) -> None:
        children: dict[str | None, list[str]] = {}
        for q in settings.queues:
            children.setdefault(q.parent, []).append(q.name)
        self.parent = {q.name: q.parent for q in settings.queues}
        self.leaves = _leaves_in_tree_order(children)
        self.nominal = {q.name: q.nominal_nodes for q in settings.queues if q.name in self.leaves}
        self.default = settings.default_queue
        self.nodes = nodes
        self.held = dict.fromkeys(self.leaves, 0)
        self.node_s = dict.fromkeys(self.leaves, 0.0)
        self.over_s = dict.fromkeys(self.leaves, 0.0)
        self.preemptions: dict[str, Counter[str]] = {q: Counter() for q in self.leaves}
        self.mark: datetime | None = None

    def measure(self, now: datetime, state: ClusterState) -> None:
        """Start measuring at `now`, from what the queues hold in `state`."""
        self.mark = now
        self._read(state)

    def observe(self, now: datetime, state: ClusterState, events: Iterable[Event]) -> None:
        """After a command at `now`: count the time since the last one, then the new holdings
        and the preemptions of its cascade."""
        if self.mark is None:
            return
        self._advance(now)
        self._read(state)
        for e in events:
            if isinstance(e, JobPreempted):
                job = state.jobs.get(e.job)
                queue = job.spec.queue if job is not None else None
                if queue in self.preemptions:
                    self.preemptions[queue][e.cause] += 1

    def finish(
        self, runs: Mapping[str, JobRun], *, start: datetime, end: datetime
    ) -> tuple[tuple[QueueMetrics, ...], float | None]:
        """Every leaf's figures and Jain's index, the time integrated up to `end`; jobs
        counted when they arrived at or after `start`."""
        if self.mark is not None:
            self._advance(end)
        seconds = max((end - start).total_seconds(), 1e-9)
        jobs: dict[str, list[JobRun]] = {q: [] for q in self.leaves}
        for run in runs.values():
            queue = run.arrival.spec.queue or self.default
            if run.arrival.at >= start and queue in jobs:
                jobs[queue].append(run)
        out = []
        for q in self.leaves:
            held = self.node_s[q] / seconds
            waits = sorted(wait_hours(r, end) for r in jobs[q])
            nominal = self.nominal[q]
            out.append(
                QueueMetrics(
                    queue=q,
                    parent=self.parent[q],
                    nominal_nodes=nominal,
                    held_nodes_mean=held,
                    quota_utilisation=held / nominal if nominal else None,
                    cluster_share=held / self.nodes if self.nodes else 0.0,
                    borrowing_fraction=self.over_s[q] / seconds,
                    jobs_submitted=len(jobs[q]),
                    jobs_placed=sum(1 for r in jobs[q] if r.first_placed_at is not None),
                    jobs_finished=sum(1 for r in jobs[q] if r.finished_at is not None),
                    wait_hours_mean=sum(waits) / len(waits) if waits else None,
                    wait_hours_p95=quantile(waits, 0.95) if waits else None,
                    preemptions=dict(sorted(self.preemptions[q].items())),
                )
            )
        ratios = [m.quota_utilisation for m in out if m.quota_utilisation is not None]
        return tuple(out), jain_index(ratios)

    def _advance(self, now: datetime) -> None:
        assert self.mark is not None
        dt = (now - self.mark).total_seconds()
        if dt > 0:
            for q, held in self.held.items():
                self.node_s[q] += held * dt
                if held > self.nominal[q]:
                    self.over_s[q] += dt
        self.mark = max(self.mark, now)

    def _read(self, state: ClusterState) -> None:
        usage = state.queue_usage
        for q in self.leaves:
            u = usage.get(q)
            self.held[q] = u.nodes if u is not None else 0


def _leaves_in_tree_order(children: dict[str | None, list[str]]) -> list[str]:
    out: list[str] = []

    def visit(name: str) -> None:
        kids = children.get(name)
        if not kids:
            out.append(name)
        for k in kids or ():
            visit(k)

    for top in children.get(None, ()):
        visit(top)
    return out
