"""The figures `/metrics` shows of each cluster a worker projects, and how they are kept.

Theory of operation
-------------------
1. Gauges are not kept as mutable Prometheus gauges (which keep whatever was last set, for
   ever): each time the projections agent folds new events of a cluster, or loads the cluster
   after an assignment, it computes the cluster's `Figures` from the state (`figures_of`),
   once, and the collector writes the latest figures of every cluster at each scrape. A
   cluster with no new events keeps its figures; a cluster whose partition the worker no
   longer holds is dropped (`Metrics.keep`), so its series disappear instead of going stale.
2. Counters (`LiveCounts`) count the events the projections applied as they arrived on the
   stream, by type, and what they say: rejected commands by code and command type, health
   changes by node (a flapping node). Events are applied once per replica (by seq), so a
   count never drifts with redeliveries; the counts of a cluster start at zero when the
   worker takes its partition (a start, a join, a rebalance) and go with it, which
   Prometheus reads as a counter reset. Every node has a health-change series from zero.
3. Rejected input (`rackplane.rejected`) is counted where the worker sends it
   (`CountingSender`), by agent, source topic and a bounded reason class (`reason_class`):
   the reasons themselves name clusters and offsets, which would make a series per record.
4. Every cluster once (issue 20). A worker shows the clusters of the events partitions it
   holds, as of its latest assignment, and only those: a partition it does not get at an
   assignment leaves at once, the new owner shows it once it loaded it (at its assignment,
   idle clusters too). Through a rebalance a worker keeps what it showed (every controller
   is fenced from revocation to assignment, so the log does not move). Each worker says
   which partitions it shows (`rackplane_events_partition_shown{partition}`), how many it
   holds and how many the topic has: a partition shown by no worker, or by two, is visible
   (`HoldingCollector`).
5. The fragmentation index of a pod (and of the cluster) is the share of its free nodes that
   cannot be part of a full default-size slice: `1 - sum(floor(free_r / s) * s) / sum(free_r)`
   over its racks, where `free_r` is a rack's free nodes beyond its spares (healthy,
   uncordoned, unallocated: what placement may use) and `s` the cluster's `slice_size`
   (0 when nothing is free). 0: every free node can serve a full slice; 1: no rack can hold
   one, however many nodes are free in total.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from rackplane.models import (
    CommandRejected,
    Event,
    JobStatus,
    NodeDegraded,
    NodeFailed,
    NodeRecovered,
    NodeRepaired,
    RackHealth,
)
from rackplane.projections import ClusterState, RackOccupancy, cluster_summary

ROLES = ("allocated", "free", "spare", "failed", "unavailable")
JOB_STATUSES = ("queued", "placed", "running")
BLOCK_REASONS = ("capacity", "topology")


def fragmentation(free: Iterable[int], slice_size: int) -> tuple[float, int]:
    """The fragmentation index of racks with `free` nodes each, and the full slices of
    `slice_size` nodes they can hold (see the module docstring).

    >>> fragmentation([16, 8, 4], 8)
    (0.14285714285714285, 3)
    """
    frees = list(free)
    total = sum(frees)
    slices = sum(f // slice_size for f in frees)
    return (0.0 if total == 0 else (total - slices * slice_size) / total), slices


@dataclass(frozen=True, slots=True)
class Figures:
    """What `/metrics` shows of one cluster at one seq (gauges only)."""

    seq: int
    nodes: dict[str, int]
    jobs: dict[str, int]
    blocked: dict[str, int]
    racks_full: int
    racks: tuple[RackOccupancy, ...]
    racks_degraded: int
    pods: dict[str, tuple[float, int]]
    """Pod -> (fragmentation index, full default slices its free nodes hold)."""
    cluster_fragmentation: float
    waiting: tuple[tuple[str, str, float, int], ...]
    """Blocked queued jobs: (job, reason, blocked since as Unix time, nodes asked for)."""
    node_ids: tuple[str, ...] = ()
    """Every node: each has a health-change counter from zero, so that `increase()` counts
    a node's first change too (a series that appears at 1 hides it)."""


def figures_of(state: ClusterState, rows: Sequence[RackOccupancy]) -> Figures:
    """The cluster's figures, from its state and its rack rows (`rack_occupancy(state)`)."""
    s = cluster_summary(state, list(rows))
    statuses = Counter(j.status.value for j in state.jobs.values())
    blocked: Counter[str] = Counter(
        j.blocked.reason for j in state.jobs.values() if j.blocked is not None
    )
    size = state.settings.slice_size
    by_pod: dict[str, list[int]] = {}
    for r in rows:
        by_pod.setdefault(r.pod, []).append(r.free)
    waiting = tuple(
        (j.id, j.blocked.reason, j.blocked.since.timestamp(), j.spec.nodes)
        for j in state.jobs.values()
        if j.blocked is not None and j.status is JobStatus.QUEUED
    )
    return Figures(
        seq=state.seq,
        nodes={role: getattr(s, role) for role in ROLES},
        jobs={status: statuses[status] for status in JOB_STATUSES},
        blocked={reason: blocked[reason] for reason in BLOCK_REASONS},
        racks_full=s.racks_full,
        racks=tuple(rows),
        racks_degraded=sum(r.health is RackHealth.DEGRADED for r in rows),
        pods={pod: fragmentation(frees, size) for pod, frees in by_pod.items()},
        cluster_fragmentation=fragmentation((r.free for r in rows), size)[0],
        waiting=waiting,
        node_ids=tuple(state.nodes),
    )


@dataclass
class LiveCounts:
    """Counters of one cluster's events, as the projections applied them (see 2. above)."""

    events: Counter[str]
    rejected: Counter[tuple[str, str]]
    """(code, command type) -> rejected commands."""
    health: Counter[str]
    """Node -> health changes."""

    @classmethod
    def empty(cls) -> LiveCounts:
        return cls(Counter(), Counter(), Counter())

    def add(self, events: Iterable[Event]) -> None:
        for e in events:
            self.events[e.type] += 1
            if isinstance(e, CommandRejected):
                self.rejected[(e.code, e.command_type)] += 1
            elif isinstance(e, NodeFailed | NodeDegraded | NodeRecovered | NodeRepaired):
                self.health[e.node] += 1


_REASON_CLASSES = (
    ("-byte limit", "too_large"),
    ("not by its cluster", "wrong_key"),
    ("is not the command's cluster", "wrong_key"),
    ("lives in partition", "wrong_partition"),
    ("is not in cluster", "unknown_node"),
    ("does not exist", "unknown_cluster"),
    ("out of sequence", "out_of_sequence"),
    ("is not registered", "not_registered"),
    (": not decided", "broken_log"),
)


def reason_class(reason: str) -> str:
    """A bounded class for the free-text reason of a rejected record: `too_large`,
    `wrong_key`, `wrong_partition`, `unknown_node`, `unknown_cluster`, `out_of_sequence`,
    `not_registered`, `broken_log`, else `invalid` (it did not decode or validate)."""
    for text, name in _REASON_CLASSES:
        if text in reason:
            return name
    return "invalid"


class CountingSender:
    """A `rejected.Sender` for `rackplane.rejected` that counts each record once the broker
    acknowledged it, by (agent, source topic, reason class)."""

    def __init__(self, inner: Any, counts: Counter[tuple[str, str, str]]) -> None:
        self.inner = inner
        self.counts = counts

    async def send(self, *, key: Any = None, value: Any = None) -> Any:
        pending = await self.inner.send(key=key, value=value)
        try:
            record = json.loads(value)
            labels = (
                str(record.get("agent")),
                str(record.get("source_topic")),
                reason_class(str(record.get("reason", ""))),
            )
        except (TypeError, ValueError, AttributeError):
            labels = ("unknown", "unknown", "invalid")
        return asyncio.ensure_future(self._acked(pending, labels))

    async def _acked(self, pending: Awaitable[Any], labels: tuple[str, str, str]) -> Any:
        result = await pending
        self.counts[labels] += 1
        return result


@dataclass(frozen=True, slots=True)
class Holding:
    """The events partitions of one worker, for `/metrics`."""

    held: int
    """Assigned to this worker now (0 during a rebalance)."""
    shown: frozenset[int]
    """Those whose clusters' series this worker's `/metrics` carries."""
    of: int
    """The events topic's partitions."""


class HoldingCollector:
    """Writes a worker's `Holding` at each scrape (see 4. above)."""

    def __init__(self, holding: Callable[[], Holding]) -> None:
        self.holding = holding

    def describe(self) -> list[Any]:
        return []  # read at collect time only (no pre-registration check)

    def collect(self) -> Iterator[Metric]:
        h = self.holding()
        yield GaugeMetricFamily(
            "rackplane_events_partitions_held",
            "Events partitions assigned to this worker now (0 during a rebalance)",
            value=h.held,
        )
        yield GaugeMetricFamily(
            "rackplane_events_partitions", "Partitions of the events topic", value=h.of
        )
        shown = _family(
            "rackplane_events_partition_shown",
            "1 for each events partition whose clusters this worker's per-cluster series cover",
            ["partition"],
        )
        for p in sorted(h.shown):
            shown.add_metric([str(p)], 1)
        yield shown


class ClusterCollector:
    """Writes every held cluster's figures and counts at each scrape (a prometheus_client
    custom collector)."""

    def __init__(
        self,
        figures: Callable[[], dict[str, Figures]],
        counts: Callable[[], dict[str, LiveCounts]],
        rejected_input: Counter[tuple[str, str, str]],
    ) -> None:
        self.figures = figures
        self.counts = counts
        self.rejected_input = rejected_input

    def describe(self) -> list[Any]:
        return []  # read at collect time only (no pre-registration check)

    def collect(self) -> Iterator[Metric]:
        shown = sorted(self.figures().items())
        yield from _cluster_gauges(shown)
        yield from _rack_gauges(shown)
        yield from _waiting_gauges(shown)
        yield from _counters(shown, self.counts())
        rejected = CounterMetricFamily(
            "rackplane_rejected_input",
            "Records this worker sent to rackplane.rejected, by agent, source topic and reason "
            "class",
            labels=["agent", "source", "reason"],
        )
        for labels, n in sorted(self.rejected_input.items()):
            rejected.add_metric(list(labels), n)
        yield rejected


def _family(name: str, text: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, labels=labels)


def _cluster_gauges(shown: list[tuple[str, Figures]]) -> Iterator[Metric]:
    nodes = _family("rackplane_nodes", "Nodes by role", ["cluster", "role"])
    jobs = _family("rackplane_jobs", "Unfinished jobs by status", ["cluster", "status"])
    blocked = _family(
        "rackplane_jobs_blocked", "Queued jobs blocked, by reason", ["cluster", "reason"]
    )
    full = _family("rackplane_racks_full", "Racks with no free node above spares", ["cluster"])
    degraded = _family(
        "rackplane_racks_degraded",
        "Racks degraded (an NVSwitch tray lost): they run work, new slices only when no healthy "
        "rack fits",
        ["cluster"],
    )
    seq = _family("rackplane_event_seq", "Last event applied", ["cluster"])
    frag = _family(
        "rackplane_cluster_fragmentation_ratio",
        "Share of the cluster's free nodes that cannot serve a full default-size slice",
        ["cluster"],
    )
    for c, f in shown:
        for role, n in f.nodes.items():
            nodes.add_metric([c, role], n)
        for status, n in f.jobs.items():
            jobs.add_metric([c, status], n)
        for reason, n in f.blocked.items():
            blocked.add_metric([c, reason], n)
        full.add_metric([c], f.racks_full)
        degraded.add_metric([c], f.racks_degraded)
        seq.add_metric([c], f.seq)
        frag.add_metric([c], f.cluster_fragmentation)
    yield from (nodes, jobs, blocked, full, degraded, seq, frag)


def _rack_gauges(shown: list[tuple[str, Figures]]) -> Iterator[Metric]:
    where = ["cluster", "pod", "rack"]
    nodes = _family("rackplane_rack_nodes", "Nodes of a rack by role", [*where, "role"])
    healthy = _family(
        "rackplane_rack_healthy", "1 while the rack has no rack-level fault (degraded: 0)", where
    )
    degraded = _family(
        "rackplane_rack_degraded", "1 while the rack is degraded (an NVSwitch tray lost)", where
    )
    pod_frag = _family(
        "rackplane_pod_fragmentation_ratio",
        "Share of the pod's free nodes that cannot serve a full default-size slice",
        ["cluster", "pod"],
    )
    slices = _family(
        "rackplane_pod_placeable_slices",
        "Full default-size slices the pod's free nodes can hold",
        ["cluster", "pod"],
    )
    for c, f in shown:
        for r in f.racks:
            for role in ROLES:
                nodes.add_metric([c, r.pod, r.rack, role], getattr(r, role))
            healthy.add_metric([c, r.pod, r.rack], 1.0 if r.healthy else 0.0)
            degraded.add_metric([c, r.pod, r.rack], 1.0 if r.health is RackHealth.DEGRADED else 0.0)
        for pod, (index, n) in sorted(f.pods.items()):
            pod_frag.add_metric([c, pod], index)
            slices.add_metric([c, pod], n)
    yield from (nodes, healthy, degraded, pod_frag, slices)


def _waiting_gauges(shown: list[tuple[str, Figures]]) -> Iterator[Metric]:
    labels = ["cluster", "job", "reason"]
    since = _family(
        "rackplane_blocked_job_since_timestamp_seconds",
        "When a queued job was first blocked (Unix time, event time), by reason",
        labels,
    )
    nodes = _family("rackplane_blocked_job_nodes", "Nodes a blocked queued job asks for", labels)
    for c, f in shown:
        for job, reason, at, n in f.waiting:
            since.add_metric([c, job, reason], at)
            nodes.add_metric([c, job, reason], n)
    yield from (since, nodes)


def _counters(shown: list[tuple[str, Figures]], counted: dict[str, LiveCounts]) -> Iterator[Metric]:
    events = CounterMetricFamily(
        "rackplane_events",
        "Events (decisions) applied by this worker's projections since it took the cluster, "
        "by type",
        labels=["cluster", "type"],
    )
    rejected = CounterMetricFamily(
        "rackplane_commands_rejected",
        "CommandRejected events by rejection code and command type",
        labels=["cluster", "code", "command"],
    )
    health = CounterMetricFamily(
        "rackplane_node_health_changes",
        "Health changes of a node (failed, degraded, recovered, repaired)",
        labels=["cluster", "node"],
    )
    none = LiveCounts.empty()
    for c, f in shown:
        counts = counted.get(c, none)
        for kind, n in sorted(counts.events.items()):
            events.add_metric([c, kind], n)
        for (code, command), n in sorted(counts.rejected.items()):
            rejected.add_metric([c, code, command], n)
        for node in f.node_ids:
            health.add_metric([c, node], counts.health.get(node, 0))
    yield from (events, rejected, health)
