"""What a simulation reports: metrics per policy, side by side for one scenario and seed.

Definitions (per policy, over the measured period: the `days` after `runtime.warmup_days`;
job counts, waits and rack-locality of jobs cover the jobs that arrived in it, GPU-hours and
events everything that happened in it):

- `jobs_rack_local_fraction`: multi-node jobs placed at least once whose every slice stayed
  inside one rack through every placement, migration and swap, over multi-node jobs placed.
- `slices_rack_local_fraction`: slices of more than one node, as placed or migrated, that lie
  in one rack, over all such slices.
- `usable_nodes_mean`: the capacity model of `rackplane capacity` applied to the live cluster,
  sampled every `runtime.sample_minutes`: per healthy rack, s * floor(min(k, N - spares) / s)
  for k healthy nodes and the default slice size s; without rack-local slices (`naive`),
  min(k, N - spares).
- `fragmented_free_nodes_mean`: free nodes (beyond the spares) that cannot form a rack-local
  slice of the default size: per rack, u - s * floor(u / s).
- `gpu_utilisation`: GPU-hours allocated to jobs over the cluster's GPU-hours.
- `queue_wait_hours`: per job class, from submission to first placement (jobs still waiting at
  the end count with the time they have waited so far).
- `gpu_hours_lost_*`: the controller's own accounting (`lost_gpu_hours` of `JobPreempted` and
  `SliceMigrated`): work since the last checkpoint plus the restart overhead. `failures`:
  jobs re-queued because a failure left them no nodes; `migrations`: slices moved off a failed
  node or rack; `preemptions`: defrag, evictions, operators. `cross_rack`: allocated GPU-hours
  lost to slower steps of slices that span racks (`comm`). `swaps` and `degrades`: the
  runtime's accounting of a node failure a job rides out in place (`recovery`): the job's GPUs
  x (work since its last checkpoint + the stall while it restarts), and for a degrade also the
  job's GPUs x the pace it loses while a slice runs on fewer nodes.
- `goodput`: GPU-hours of kept progress over GPU-hours allocated (`_runtime`): every loss
  above, cross-rack steps, swaps and degrades included, lowers it.
- `iteration_penalty_mean`/`max`: the step-time penalty of cross-rack slices (`comm`),
  GPU-time weighted over multi-node jobs, and the worst seen.
- `cost_usd_*`: at `cost.gpu_hour_usd`: the cluster for the period, the allocated GPU-hours
  that produced nothing kept, and the price of one useful GPU-hour (the cluster's cost over
  its useful GPU-hours; on a cluster with idle GPUs the idle ones dominate it, and policies
  differ by tenths of a cent: `cost_usd_lost` separates them).
- `queues` (a shared cluster: `policy.queues` set), per leaf queue: its nominal quota; the
  nodes it held on average (time-weighted, exact between commands), over its nominal and over
  the cluster's nodes; the share of the time it held more than its nominal (borrowing); its
  jobs submitted, placed at least once and finished; the wait from submission to first
  placement (mean and p95; a job still waiting counts with its wait so far); its jobs'
  preemptions by cause (`reclaim`, `priority`, `defrag`, ...).
- `jain_index`: Jain's fairness index over the leaf queues' x = mean nodes held / nominal,
  J = (sum x)^2 / (n * sum x^2): 1 when every queue used the same fraction of its quota,
  1/n when one queue had all the use; queues of nominal 0 are left out, and it is None when
  no queue held anything. It measures how evenly quotas were used, not unmet demand: read it
  with the waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict


class WaitStats(BaseModel):
    """Queueing delay of one job class."""

    model_config = ConfigDict(frozen=True)

    jobs: int
    waiting_at_end: int
    mean_hours: float
    p50_hours: float
    p99_hours: float


class QueueMetrics(BaseModel):
    """What one leaf queue got in a run (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    queue: str
    parent: str | None
    nominal_nodes: int
    held_nodes_mean: float
    quota_utilisation: float | None
    """Mean nodes held over the nominal (None for a nominal of 0); above 1: it borrowed."""
    cluster_share: float
    """Mean nodes held over the cluster's nodes."""
    borrowing_fraction: float
    """Share of the measured time it held more than its nominal."""
    jobs_submitted: int
    jobs_placed: int
    jobs_finished: int
    wait_hours_mean: float | None
    wait_hours_p95: float | None
    preemptions: dict[str, int]
    """Preemptions its jobs suffered, by cause."""


def jain_index(xs: Sequence[float]) -> float | None:
    """Jain's fairness index of `xs`: (sum x)^2 / (n * sum x^2), in [1/n, 1]; None for no
    values or all zero. 1 when all are equal; 1/n when one has everything."""
    square = sum(x * x for x in xs)
    if not xs or square == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * square)


class PolicyMetrics(BaseModel):
    """Everything one run of one policy measured (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    policy: str
    days: float
    racks: int
    nodes: int
    gpus: int
    jobs_submitted: int
    jobs_placed: int
    jobs_completed: int
    jobs_waiting_at_end: int
    jobs_rack_local_fraction: float | None
    slices_rack_local_fraction: float | None
    usable_nodes_mean: float
    fragmented_free_nodes_mean: float
    failed_nodes_mean: float
    gpu_utilisation: float
    queue_wait_hours: dict[str, WaitStats]
    hero_wait_hours_mean: float | None
    hero_wait_hours_max: float | None
    gpu_hours_allocated: float
    gpu_hours_useful: float
    goodput: float | None
    gpu_hours_lost_failures: float
    gpu_hours_lost_migrations: float
    gpu_hours_lost_preemptions: float
    gpu_hours_lost_cross_rack: float
    gpu_hours_lost_swaps: float = 0.0
    gpu_hours_lost_degrades: float = 0.0
    iteration_penalty_mean: float
    iteration_penalty_max: float
    gpu_hour_usd: float
    cost_usd_cluster: float
    cost_usd_lost: float
    cost_usd_per_useful_gpu_hour: float | None
    node_failures: int
    rack_failures: int
    swaps: int
    migrations: int
    degrades: int
    preemptions: dict[str, int]
    defrag_plans: int
    blocked_topology: int
    blocked_capacity: int
    stale_proposals: int
    """Policy proposals the controller rejected as stale (the policy then looked again)."""
    runtime_rejections: int
    """Commands of the simulated runtime that were rejected (0 unless something is wrong)."""
    events: int
    commands: int
    queues: tuple[QueueMetrics, ...] = ()
    """Per leaf queue, in tree order; empty without queues."""
    jain_index: float | None = None
    """Jain's fairness index over the queues' mean held / nominal (module docstring)."""


class SimReport(BaseModel):
    """One scenario, one seed, several policies."""

    model_config = ConfigDict(frozen=True)

    scenario: str
    seed: int
    days: float
    racks: int
    nodes: int
    expected_node_unavailability: float
    policies: tuple[PolicyMetrics, ...]

    def to_json(self) -> dict[str, Any]:
        """The `--json` shape: scenario, seed and one object of metrics per policy."""
        return self.model_dump(mode="json")


COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("jobs_rack_local_fraction", "jobs rack-local", "pct"),
    ("slices_rack_local_fraction", "slices rack-local", "pct"),
    ("usable_nodes_mean", "usable nodes (mean)", "num"),
    ("fragmented_free_nodes_mean", "fragmented free nodes (mean)", "num"),
    ("gpu_utilisation", "GPU utilisation", "pct"),
    ("goodput", "goodput", "pct"),
    ("hero_wait_hours_mean", "hero wait, mean (h)", "num"),
    ("hero_wait_hours_max", "hero wait, max (h)", "num"),
    ("gpu_hours_lost_failures", "GPU-h lost: failures, re-queued", "num"),
    ("gpu_hours_lost_swaps", "GPU-h lost: swaps", "num"),
    ("gpu_hours_lost_degrades", "GPU-h lost: degrades (NTP)", "num"),
    ("gpu_hours_lost_migrations", "GPU-h lost: migrations", "num"),
    ("gpu_hours_lost_preemptions", "GPU-h lost: preemptions", "num"),
    ("gpu_hours_lost_cross_rack", "GPU-h lost: cross-rack steps", "num"),
    ("iteration_penalty_mean", "iteration penalty (mean)", "pct"),
    ("iteration_penalty_max", "iteration penalty (max)", "pct"),
    ("cost_usd_lost", "cost of lost GPU-h ($)", "num"),
    ("cost_usd_per_useful_gpu_hour", "$ per useful GPU-h", "money"),
    ("jobs_completed", "jobs completed", "int"),
    ("jobs_waiting_at_end", "jobs waiting at end", "int"),
    ("swaps", "swaps", "int"),
    ("migrations", "migrations", "int"),
    ("degrades", "degrades (NTP)", "int"),
    ("defrag_plans", "defrag plans", "int"),
)
"""Rows of the side-by-side table: metric key, label, format."""


def format_value(value: object, kind: str) -> str:
    """A metric as a table cell."""
    if value is None:
        return "-"
    if kind == "pct" and isinstance(value, int | float):
        return f"{100 * value:.1f}%"
    if kind == "money" and isinstance(value, int | float):
        return f"{value:,.3f}"  # policies differ by tenths of a cent on an idle-heavy cluster
    if kind == "int" and isinstance(value, int | float):
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)
