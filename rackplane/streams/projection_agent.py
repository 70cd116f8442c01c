"""The projections agent: rack occupancy and job status as Faust tables, web views, metrics.

Tables are written inside stream iteration only, idempotent by seq (an event at or below the
cluster's applied seq changes nothing): `occupancy[cluster]` holds the rack rows and the seq
they reflect, `jobs["cluster/job"]` one row per unfinished job (deleted when it finishes).
Reads (web views, `/metrics`) come from the agent's in-memory replica, which the tables mirror.
After an assignment the worker loads the replicas of the partitions it holds at once (`hold`,
`show`), so the views and `/metrics` show every held cluster, idle ones too, without waiting
for an event, and drop the figures of clusters it no longer holds (`_metrics`). A revocation
(`revoke`) leaves nothing held until the next assignment; the figures stay until then (no
controller writes during a rebalance, so they stay true), and the views answer from the log
(`_views`) for every cluster of a partition that is not both held and loaded (`live`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from rackplane.models import Event, Rejection
from rackplane.projections import (
    ClusterState,
    RackOccupancy,
    cluster_summary,
    job_row,
    rack_occupancy,
)
from rackplane.streams._inbound import decode
from rackplane.streams._metrics import (
    ClusterCollector,
    CountingSender,
    Figures,
    Holding,
    HoldingCollector,
    LiveCounts,
    figures_of,
)
from rackplane.streams.codec import decode_event
from rackplane.streams.eventlog import opens_a_log
from rackplane.streams.rejected import Sender, reject_all, rejection_of
from rackplane.streams.replicas import Replicas

log = logging.getLogger("rackplane.projections")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds: from a few ms (an idle controller) to the outage retries' range."""


class Metrics:
    """Prometheus figures of the clusters this worker projects (see `_metrics`), with the
    controller's counters and its command->event latency."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.figures: dict[str, Figures] = {}
        self.counts: dict[str, LiveCounts] = {}
        self.rejected_input: Counter[tuple[str, str, str]] = Counter()
        self.registry.register(
            ClusterCollector(lambda: self.figures, lambda: self.counts, self.rejected_input)
        )
        self.latency = Histogram(
            "rackplane_command_latency_seconds",
            "From a command's record timestamp to the append of its first event (controller)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def holding(self, partitions: Callable[[], Holding]) -> None:
        """Also serve which events partitions this worker holds and shows (read when
        scraped): Prometheus sees a gap or an overlap between workers there."""
        self.registry.register(HoldingCollector(partitions))

    def update(self, state: ClusterState, rows: list[RackOccupancy]) -> None:
        """Show the cluster as of `state` (its rack rows: `rack_occupancy(state)`)."""
        self.figures[state.cluster] = figures_of(state, rows)

    def count(self, cluster: str, events: Sequence[Event]) -> None:
        """Count events of `cluster` just applied from the stream."""
        if events:
            self.counts.setdefault(cluster, LiveCounts.empty()).add(events)

    def keep(self, held: Callable[[str], bool]) -> None:
        """Drop the figures and counts of every cluster `held` says this worker no longer
        holds: its series leave `/metrics` rather than go stale."""
        for table in (self.figures, self.counts):
            for cluster in [c for c in table if not held(c)]:
                del table[cluster]

    def rejections(self, sender: Any) -> CountingSender:
        """`sender` (to `rackplane.rejected`), counting what it sends."""
        return CountingSender(sender, self.rejected_input)

    def watch(
        self, controller: ControllerCounters, followers: Sequence[FollowerCounters] = ()
    ) -> None:
        """Also serve the controller's and the events followers' counters (read when
        scraped)."""
        self.registry.register(_ControllerCollector(controller, followers))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class ControllerCounters(Protocol):
    """What /metrics reads of the controller (`agents.Controller`)."""

    applied: int
    undelivered: int
    checkpoints: int
    failing_since: float | None

    @property
    def forged(self) -> int: ...


class FollowerCounters(Protocol):
    """What /metrics reads of a follower of the events topic (`_following.Follower`)."""

    name: str
    read_back: int

    @property
    def forged(self) -> int: ...


class _ControllerCollector:
    """The controller's and the followers' counters as Prometheus metrics, read at each
    scrape."""

    def __init__(
        self, controller: ControllerCounters, followers: Sequence[FollowerCounters] = ()
    ) -> None:
        self.controller = controller
        self.followers = followers

    def describe(self) -> list[Any]:
        return []  # read at collect time only (no pre-registration check)

    def collect(self) -> Iterator[Any]:
        c = self.controller
        yield CounterMetricFamily(
            "rackplane_controller_decisions",
            "Commands decided into events by this worker's controller",
            value=c.applied,
        )
        yield CounterMetricFamily(
            "rackplane_controller_commands_read_back",
            "Commands the consumer skipped or never delivered, read from the topic and decided",
            value=c.undelivered,
        )
        yield CounterMetricFamily(
            "rackplane_controller_checkpoints",
            "Checkpoints (snapshots of an events partition) saved",
            value=c.checkpoints,
        )
        failing = c.failing_since
        yield GaugeMetricFamily(
            "rackplane_controller_appends_failing_seconds",
            "Seconds the controller's appends have been failing (0: they work)",
            value=0.0 if failing is None else max(0.0, time.monotonic() - failing),
        )
        read_back = CounterMetricFamily(
            "rackplane_follower_events_read_back",
            "Events the consumer skipped or never delivered to an agent, read from the topic",
            labels=["agent"],
        )
        for f in self.followers:
            read_back.add_metric([f.name], f.read_back)
        yield read_back
        forged = CounterMetricFamily(
            "rackplane_events_forged",
            "Events of the log not signed by a trusted key, passed over (the controller: in "
            "its rebuilds; an agent: in what it was delivered)",
            labels=["reader"],
        )
        forged.add_metric(["controller"], c.forged)
        for f in self.followers:
            forged.add_metric([f.name], f.forged)
        yield forged


class Projections:
    """Folds events into replicas and mirrors them into tables; serves reads."""

    name = "projections"

    def __init__(
        self,
        replicas: Replicas,
        occupancy: Any,
        jobs: Any,
        rejected: Sender,
        *,
        topic: str,
        limit: int,
        metrics: Metrics | None = None,
    ) -> None:
        self.replicas = replicas
        self.occupancy = occupancy
        self.jobs = jobs
        self.rejected = rejected
        self.topic = topic
        self.limit = limit
        self.metrics = metrics if metrics is not None else Metrics()
        self.held: set[int] | None = None
        """The events partitions this worker holds (None: not told yet; empty from a
        revocation to the next assignment)."""
        self.shown: set[int] = set()
        """The events partitions whose clusters' figures `/metrics` shows."""
        self._lock = asyncio.Lock()
        self.metrics.holding(self.holding)

    def hold(self, partitions: Iterable[int]) -> None:
        """An assignment: the worker now holds these events partitions. What `/metrics`
        shows of clusters elsewhere goes at once; `show` loads the held ones."""
        self.held = set(partitions)
        held = self.held
        self.shown &= held
        self.metrics.keep(lambda c: self.replicas.partition_of(c) in held)

    def revoke(self) -> None:
        """A rebalance began: nothing is held until the next assignment (`hold`). The
        figures stay: every controller is fenced until then, so the log does not move, and
        the next assignment drops those of partitions that went elsewhere."""
        self.held = set()

    def holds(self, partition: int) -> bool:
        """Whether this worker holds the events partition now."""
        return self.held is not None and partition in self.held

    def live(self, partition: int) -> bool:
        """Whether the partition's clusters are served from this worker's replicas: held,
        and loaded since the assignment."""
        return self.holds(partition) and self.replicas.loaded(partition)

    def states_of(self, partition: int) -> list[ClusterState]:
        """The registered clusters of a `live` partition, by id."""
        states = (self.replicas.states.get(c) for c in sorted(self.replicas.members(partition)))
        return [s for s in states if s is not None and s.registered]

    def holding(self) -> Holding:
        """What `/metrics` says of the partitions (`Metrics.holding`)."""
        held = self.held or set()
        return Holding(held=len(held), shown=frozenset(self.shown), of=self.replicas.partitions)

    async def show(self, partitions: Iterable[int]) -> None:
        """Load the held `partitions` into the replicas now, so that the views and
        `/metrics` show their clusters without waiting for their next event (an idle
        cluster has none coming). Between batches: a load never races a fold."""
        for p in sorted(set(partitions)):
            async with self._lock:
                if self.held is not None and p not in self.held:
                    continue  # revoked meanwhile
                try:
                    await self.replicas.load(p)
                except (KafkaError, OSError, TimeoutError) as err:
                    # Shown at its next event instead, which loads it (as before a join).
                    log.info("loading events partition %d for the views failed: %s", p, err)
                    continue
                if self.held is not None and p not in self.held:
                    self.replicas.forget([p])  # revoked during the read
                    continue
                self._show_partition(p)

    def _show_partition(self, p: int) -> None:
        """Figures for every cluster of the loaded partition `p`, idle ones too."""
        for state in self.states_of(p):
            self.metrics.update(state, rack_occupancy(state))
        self.shown.add(p)

    async def process(self, batch: Sequence[Any]) -> None:
        """Apply the batch; rewrite the table rows it changed."""
        async with self._lock:
            await self._process(batch)

    async def _process(self, batch: Sequence[Any]) -> None:
        by_cluster: dict[str, list[tuple[Event, Any]]] = {}
        rejections: list[Rejection] = []
        for ev in batch:
            d = decode(ev, decode_event, agent=self.name, topic=self.topic, limit=self.limit)
            if d is None:
                continue
            if d.rejected is not None:
                rejections.append(d.rejected)
                continue
            event = d.value
            assert event is not None
            message = getattr(ev, "message", ev)
            if message.key != event.cluster.encode():
                rejections.append(
                    self._refuse(
                        message, f"keyed {message.key!r}, not by its cluster: not an event"
                    )
                )
                continue
            by_cluster.setdefault(event.cluster, []).append((event, message))
        for cluster, items in by_cluster.items():
            p = self.replicas.partition_of(cluster)
            loading = not self.replicas.loaded(p)
            state, history = await self.replicas.follow(cluster)
            if loading and self.replicas.loaded(p) and self.holds(p):
                self._show_partition(p)  # loaded by this event (`show` failed or came later)
            known = cluster in self.replicas.states
            events = self._in_line(state, items, rejections)
            touched = {getattr(e, "job", None) for e in history}
            fresh = bool(history)
            state, applied = self.replicas.advance(state, events)
            for e in applied:
                touched.add(getattr(e, "job", None))
                touched.update(getattr(e, "victims", ()) or ())
                fresh = True
            self.metrics.count(cluster, applied)
            if known or state.seq > 0:  # no replica for a name that is no cluster
                self.replicas.put(state)
            if fresh:
                self._mirror(state, touched)
        await reject_all(self.rejected, rejections)

    def _in_line(
        self, state: ClusterState, items: list[tuple[Event, Any]], rejections: list[Rejection]
    ) -> list[Event]:
        """The events that may follow `state` (or are already in it); the others refused."""
        seq, registered, out = state.seq, state.registered, []
        for event, message in items:
            if event.seq <= seq:
                out.append(event)  # a redelivery: skipped by seq
                continue
            if event.seq > seq + 1:
                why = f"out of sequence: cluster {event.cluster!r} is at seq {seq}"
            elif not registered and not opens_a_log(event):
                why = f"cluster {event.cluster!r} is not registered: not one of its events"
            else:
                out.append(event)
                seq, registered = event.seq, registered or event.type == "TopologyRegistered"
                continue
            rejections.append(self._refuse(message, why))
        return out

    def _refuse(self, message: Any, reason: str) -> Rejection:
        return rejection_of(message, reason, agent=self.name, topic=self.topic)

    def _mirror(self, state: ClusterState, touched: set[Any]) -> None:
        c = state.cluster
        rows = rack_occupancy(state)
        self.occupancy[c] = {"seq": state.seq, "racks": [r.model_dump() for r in rows]}
        for job_id in touched:
            if not isinstance(job_id, str):
                continue
            row = job_row(state, job_id)
            key = f"{c}/{job_id}"
            if row is None:
                if key in self.jobs:
                    del self.jobs[key]
            else:
                self.jobs[key] = row
        self.metrics.update(state, rows)

    # -- reads (web views) --------------------------------------------------------------

    def clusters(self) -> list[dict[str, Any]]:
        return [
            cluster_summary(s).model_dump() for s in self.replicas.states.values() if s.registered
        ]

    def racks(self, cluster: str) -> list[dict[str, Any]] | None:
        state = self.replicas.states.get(cluster)
        return None if state is None else racks_of(state)

    def job_rows(self, cluster: str) -> list[dict[str, Any]] | None:
        state = self.replicas.states.get(cluster)
        return None if state is None else jobs_of(state)


def racks_of(state: ClusterState) -> list[dict[str, Any]]:
    """The cluster's rack rows as JSON-ready data (the racks view)."""
    return [r.model_dump() for r in rack_occupancy(state)]


def jobs_of(state: ClusterState) -> list[dict[str, Any]]:
    """The cluster's unfinished jobs in queue order as JSON-ready data (the jobs view)."""
    rows = (job_row(state, j) for j in sorted(state.jobs, key=lambda j: state.jobs[j].queue_key))
    return [r for r in rows if r is not None]
