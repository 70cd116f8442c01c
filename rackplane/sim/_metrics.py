"""Counting what a run did, from its events and regular samples; the final metrics.

The collector reads events (what the controller decided) and the state (sampled every
`runtime.sample_minutes`, O(racks changed since the last sample: `_rack_sums`) per sample: it
reads `RackState.free`, not the nodes), plus
the runtime's per-job accounts at the end. It never reaches into a policy.

GPU-hours lost come from two places: the events' own `lost_gpu_hours` (re-queues after a
failure, migrations, preemptions: the controller's accounting), and the runtime's accounts for
what the events carry no cost for: swaps and degrades (`recovery`: the rollback, the stall and a
degraded slice's slower pace).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime

from rackplane.models import (
    CommandRejected,
    DefragPlanned,
    Event,
    JobBlocked,
    JobPlaced,
    JobPreempted,
    NodeFailed,
    NodeSwapped,
    RackFailed,
    RackId,
    SliceDegraded,
    SliceMigrated,
)
from rackplane.projections import ClusterState
from rackplane.sim._rack_sums import RackSums
from rackplane.sim._runtime import JobRun
from rackplane.sim.report import PolicyMetrics, WaitStats

_HOUR = 3600.0


class Collector:
    """Counts events and samples capacity for one run of one policy."""

    def __init__(self, policy: str, state: ClusterState) -> None:
        assert state.index is not None
        self.policy = policy
        self.settings = state.settings
        self.rack_ids: tuple[RackId, ...] = tuple(r.id for r in state.index.racks)
        self.counts: Counter[str] = Counter()
        self.preemptions: Counter[str] = Counter()
        self.lost = {"failures": 0.0, "migrations": 0.0, "preemptions": 0.0}
        self.slices = 0
        self.slices_local = 0
        self.samples = 0
        self.usable_sum = 0.0
        self.fragmented_sum = 0.0
        self.failed_sum = 0.0
        self.commands = 0
        self.active = False
        self.rack_sums = RackSums()

    def measure(self, now: datetime, runs: Mapping[str, JobRun]) -> None:
        """Start measuring: events and samples count from `now`; job accounts restart."""
        self.active = True
        for run in runs.values():
            run.measure(now)

    def observe(self, events: Iterable[Event], *, runtime_actors: frozenset[str]) -> None:
        """Count what a command's cascade caused (once measuring has started)."""
        if not self.active:
            return
        self.commands += 1
        for e in events:
            self.counts["events"] += 1
            match e:
                case JobPlaced():
                    for s in e.slices:
                        if len(s.nodes) > 1:
                            self.slices += 1
                            self.slices_local += s.rack_local
                case SliceMigrated():
                    self.counts["migrations"] += 1
                    self.lost["migrations"] += e.lost_gpu_hours
                    if len(e.new_nodes) > 1:
                        self.slices += 1
                        self.slices_local += e.to_rack is not None
                case JobPreempted():
                    self.preemptions[e.cause] += 1
                    key = "failures" if e.cause == "failure" else "preemptions"
                    self.lost[key] += e.lost_gpu_hours
                case NodeSwapped():
                    self.counts["swaps"] += 1
                case SliceDegraded():
                    self.counts["degrades"] += 1
                case DefragPlanned():
                    self.counts["defrag_plans"] += 1
                case JobBlocked():
                    self.counts[f"blocked_{e.reason}"] += 1
                case NodeFailed():
                    self.counts["node_failures"] += 1
                case RackFailed():
                    self.counts["rack_failures"] += 1
                case CommandRejected():
                    who = "runtime_rejections" if e.actor in runtime_actors else "stale_proposals"
                    self.counts[who] += 1
                case _:
                    pass

    def sample(self, state: ClusterState, down: Mapping[RackId, int]) -> None:
        """One capacity sample: usable nodes (the capacity model), fragmentation, failures."""
        if not self.active:
            return
        usable, fragmented = self.rack_sums.sums(state, down)  # patched (`_rack_sums`)
        self.samples += 1
        self.usable_sum += usable
        self.fragmented_sum += fragmented
        self.failed_sum += sum(down.values())

    def finish(
        self,
        state: ClusterState,
        runs: Mapping[str, JobRun],
        *,
        start: datetime,
        end: datetime,
        gpu_hour_usd: float,
    ) -> PolicyMetrics:
        """The metrics of the run, with every job's account closed at `end`. Jobs are counted
        when they arrived at or after `start` (the end of the warm-up); GPU-hours of every job
        count from `start` on."""
        assert state.index is not None
        topology = state.index.topology
        hours = (end - start).total_seconds() / _HOUR
        cluster_gpu_h = topology.gpu_count * hours
        for run in runs.values():
            run.close(end)
        allocated = sum(r.allocated_gpu_s for r in runs.values()) / _HOUR
        useful = sum(r.useful_gpu_s for r in runs.values()) / _HOUR
        multi_alloc = sum(r.allocated_gpu_s for r in runs.values() if r.arrival.spec.nodes > 1)
        penalty = sum(r.penalty_gpu_s for r in runs.values() if r.arrival.spec.nodes > 1)
        cross_rack = sum(r.cross_rack_gpu_s for r in runs.values()) / _HOUR
        swaps_lost = sum(r.lost_gpu_s.get("swap", 0.0) for r in runs.values()) / _HOUR
        degrades_lost = sum(r.lost_gpu_s.get("degrade", 0.0) for r in runs.values()) / _HOUR
        worst = max((r.worst_penalty for r in runs.values()), default=0.0)
        runs = {k: r for k, r in runs.items() if r.arrival.at >= start}
        multi = [r for r in runs.values() if r.arrival.spec.nodes > 1]
        placed_multi = [r for r in multi if r.first_placed_at is not None]
        waits = _waits(runs.values(), end)
        hero = [wait_hours(r, end) for r in runs.values() if r.arrival.hero]
        n = max(self.samples, 1)
        c = self.counts
        return PolicyMetrics(
            policy=self.policy,
            days=hours / 24.0,
            racks=len(topology.racks),
            nodes=topology.node_count,
            gpus=topology.gpu_count,
            jobs_submitted=len(runs),
            jobs_placed=sum(1 for r in runs.values() if r.first_placed_at is not None),
            jobs_completed=sum(1 for r in runs.values() if r.finished_at is not None),
            jobs_waiting_at_end=sum(1 for r in runs.values() if r.first_placed_at is None),
            jobs_rack_local_fraction=(
                sum(1 for r in placed_multi if not r.ever_cross_rack) / len(placed_multi)
                if placed_multi
                else None
            ),
            slices_rack_local_fraction=self.slices_local / self.slices if self.slices else None,
            usable_nodes_mean=self.usable_sum / n,
            fragmented_free_nodes_mean=self.fragmented_sum / n,
            failed_nodes_mean=self.failed_sum / n,
            gpu_utilisation=allocated / cluster_gpu_h if cluster_gpu_h else 0.0,
            queue_wait_hours=waits,
            hero_wait_hours_mean=sum(hero) / len(hero) if hero else None,
            hero_wait_hours_max=max(hero) if hero else None,
            gpu_hours_allocated=allocated,
            gpu_hours_useful=useful,
            goodput=useful / allocated if allocated else None,
            gpu_hours_lost_failures=self.lost["failures"],
            gpu_hours_lost_migrations=self.lost["migrations"],
            gpu_hours_lost_preemptions=self.lost["preemptions"],
            gpu_hours_lost_cross_rack=cross_rack,
            gpu_hours_lost_swaps=swaps_lost,
            gpu_hours_lost_degrades=degrades_lost,
            iteration_penalty_mean=penalty / multi_alloc if multi_alloc else 0.0,
            iteration_penalty_max=worst,
            gpu_hour_usd=gpu_hour_usd,
            cost_usd_cluster=cluster_gpu_h * gpu_hour_usd,
            cost_usd_lost=(allocated - useful) * gpu_hour_usd,
            cost_usd_per_useful_gpu_hour=cluster_gpu_h * gpu_hour_usd / useful if useful else None,
            node_failures=c["node_failures"],
            rack_failures=c["rack_failures"],
            swaps=c["swaps"],
            migrations=c["migrations"],
            degrades=c["degrades"],
            preemptions=dict(sorted(self.preemptions.items())),
            defrag_plans=c["defrag_plans"],
            blocked_topology=c["blocked_topology"],
            blocked_capacity=c["blocked_capacity"],
            stale_proposals=c["stale_proposals"],
            runtime_rejections=c["runtime_rejections"],
            events=c["events"],
            commands=self.commands,
        )


def wait_hours(run: JobRun, end: datetime) -> float:
    """Hours from submission to first placement (to `end` for a job still waiting)."""
    return ((run.first_placed_at or end) - run.arrival.at).total_seconds() / _HOUR


def _waits(runs: Iterable[JobRun], end: datetime) -> dict[str, WaitStats]:
    by_class: dict[str, list[tuple[float, bool]]] = {}
    for r in runs:
        by_class.setdefault(r.arrival.job_class, []).append(
            (wait_hours(r, end), r.first_placed_at is None)
        )
    out = {}
    for name in sorted(by_class):
        rows = by_class[name]
        xs = sorted(w for w, _ in rows)
        out[name] = WaitStats(
            jobs=len(rows),
            waiting_at_end=sum(1 for _, still in rows if still),
            mean_hours=sum(xs) / len(xs),
            p50_hours=quantile(xs, 0.50),
            p99_hours=quantile(xs, 0.99),
        )
    return out


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile of sorted `xs` (nearest rank); 0 for an empty list."""
    if not xs:
        return 0.0
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]
