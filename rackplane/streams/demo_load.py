"""The demo load `rackplane up` puts on a running pipeline, and what it measures.

Four tasks share one asyncio loop:
- follower: reads the event log, keeps a replica of the cluster, counts decisions, and
  measures command -> event latency for the commands this load sent;
- jobs: Poisson arrivals of hero runs, mid-size, small and interactive jobs;
- runtime: starts every placed job and completes it after its (compressed) duration;
- exporters: one telemetry sample per node per interval; injected failures show an XID in a
  node's samples (the GPU Manager turns that into `NodeFailed`), repaired after a while
  (the operator's `RepairNode`, and healthy samples again).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rackplane.models import (
    CompleteJob,
    Event,
    GpuSample,
    JobKind,
    JobPlaced,
    JobPreempted,
    JobSpec,
    JobSubmitted,
    NodeTelemetry,
    PolicySettings,
    RegisterTopology,
    RepairNode,
    StartJob,
    SubmitJob,
    Topology,
)
from rackplane.projections import ClusterState, cluster_summary, evolve, initial_state
from rackplane.streams.client import Client
from rackplane.streams.codec import decode_event
from rackplane.streams.config import StreamConfig
from rackplane.streams.eventlog import is_marker


@dataclass(frozen=True)
class LoadSettings:
    """How hard the demo pushes, in real seconds."""

    seed: int = 7
    jobs_per_minute: float = 240.0
    telemetry_interval: float = 5.0
    failure_every: float = 15.0
    """Mean seconds between injected node failures."""
    repair_after: float = 40.0
    time_scale: float = 1 / 60
    """Real seconds per simulated second of job duration (1 minute of work takes 1 s)."""


# (kind, share, nodes range, slice size, priority, minutes of work)
MIX = (
    ("hero", 0.03, (64, 256), 16, 10, (60, 180)),
    ("mid", 0.27, (16, 32), 16, 5, (20, 90)),
    ("small", 0.55, (1, 8), 8, 1, (5, 40)),
    ("dev", 0.15, (1, 4), 4, 3, (10, 60)),
)


@dataclass
class Stats:
    """What the live view and the summary show."""

    started: float = field(default_factory=time.monotonic)
    events: int = 0
    commands: int = 0
    rejected: int = 0
    types: Counter[str] = field(default_factory=Counter)
    jobs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """Per event type about a job, the jobs it was about (a job blocked, placed or preempted
    twice counts once)."""
    slices: int = 0
    slices_local: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    state: ClusterState | None = None

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        return {
            "seconds": round(time.monotonic() - self.started, 1),
            "events": self.events,
            "commands": self.commands,
            "rejected": self.rejected,
            "commands_rejected": self.types["CommandRejected"],
            "jobs_submitted": len(self.jobs["JobSubmitted"]),
            "jobs_placed": len(self.jobs["JobPlaced"]),
            "jobs_blocked": len(self.jobs["JobBlocked"]),
            "jobs_preempted": len(self.jobs["JobPreempted"]),
            "placements": self.types["JobPlaced"],
            "blocks": self.types["JobBlocked"],
            "preemptions": self.types["JobPreempted"],
            "swaps": self.types["NodeSwapped"],
            "migrations": self.types["SliceMigrated"],
            "degradations": self.types["SliceDegraded"],
            "defrags": self.types["DefragPlanned"],
            "node_failures": self.types["NodeFailed"],
            "slices_rack_local_fraction": (
                round(self.slices_local / self.slices, 4) if self.slices else None
            ),
            "command_to_event_ms_p50": round(statistics.median(lat), 1) if lat else None,
            "command_to_event_ms_p99": (
                round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1) if lat else None
            ),
        }

    def live(self) -> dict[str, Any]:
        s = self.summary()
        if self.state is not None and self.state.index is not None:
            c = cluster_summary(self.state)
            s.update(
                jobs_running=c.jobs_running,
                jobs_queued=c.jobs_queued,
                jobs_waiting_blocked=c.jobs_blocked,
                racks_full=c.racks_full,
                failed_nodes=c.failed,
            )
        return s


class DemoLoad:
    """Drives one cluster on a running pipeline until `stop` is set."""

    def __init__(
        self,
        config: StreamConfig,
        topology: Topology,
        policy: PolicySettings,
        settings: LoadSettings = LoadSettings(),
    ) -> None:
        self.config = config
        self.topology = topology
        self.policy = policy
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.stats = Stats()
        self.sent_at: dict[str, float] = {}
        self.durations: dict[str, float] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.broken: dict[str, float] = {}
        self.ids = itertools.count(1)
        self.cluster = topology.cluster
        self.spawned: set[asyncio.Task[None]] = set()
        self.stopping = False

    async def run(self, stop: asyncio.Event) -> Stats:
        """Register the cluster, then run every task until `stop` is set."""
        async with Client(self.config, linger_ms=2) as client:
            self.client = client
            await client.send(
                RegisterTopology(
                    id=self._id("register"), cluster=self.cluster, actor="operator:demo",
                    topology=self.topology, settings=self.policy,
                )
            )  # fmt: skip
            tasks = [
                asyncio.create_task(self._follow_events(stop)),
                asyncio.create_task(self._count("commands", stop)),
                asyncio.create_task(self._count("rejected", stop)),
            ]
            # The load starts once the cluster is registered: telemetry for nodes the
            # controller does not know yet would (rightly) be rejected.
            while (
                self.stats.state is None or not self.stats.state.registered
            ) and not stop.is_set():
                await asyncio.sleep(0.05)
            tasks += [
                asyncio.create_task(self._jobs(stop)),
                asyncio.create_task(self._exporters(stop)),
                asyncio.create_task(self._failures(stop)),
            ]
            await stop.wait()
            self.stopping = True
            for timer in self.timers.values():
                timer.cancel()
            for t in tasks + list(self.spawned):
                t.cancel()
            await asyncio.gather(*tasks, *self.spawned, return_exceptions=True)
        return self.stats

    def _id(self, kind: str) -> str:
        return f"demo-{kind}-{next(self.ids)}"

    def _spawn(self, coro: Any) -> None:
        if self.stopping:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self.spawned.add(task)
        task.add_done_callback(self.spawned.discard)

    async def _send(self, command: Any) -> None:
        if self.stopping:
            return
        self.sent_at[command.id] = time.monotonic()
        await self.client.send(command, wait=False)

    # -- follower -------------------------------------------------------------------------

    async def _follow_events(self, stop: asyncio.Event) -> None:
        state = initial_state(self.cluster)
        consumer = self.client.reader("events")
        await consumer.start()
        try:
            async for record in consumer:
                if (
                    is_marker(record.headers)
                    or not record.value
                    or record.key != self.cluster.encode()
                ):
                    continue
                event = decode_event(record.value)
                if event.seq != state.seq + 1:
                    continue
                state = evolve(state, event)
                self.stats.state = state
                self._observe(event)
        finally:
            await consumer.stop()

    def _observe(self, event: Event) -> None:
        s = self.stats
        s.events += 1
        s.types[event.type] += 1
        job = getattr(event, "job", None)
        if isinstance(job, str):
            s.jobs[event.type].add(job)
        elif isinstance(event, JobSubmitted):
            s.jobs[event.type].add(event.job.id)
        sent = self.sent_at.pop(event.causation_id or "", None)
        if sent is not None:
            s.latencies_ms.append((time.monotonic() - sent) * 1000)
        if isinstance(event, JobPlaced):
            s.slices += len(event.slices)
            s.slices_local += sum(1 for x in event.slices if x.rack_local)
            self._spawn(self._start(event.job))
        elif isinstance(event, JobPreempted):
            timer = self.timers.pop(event.job, None)
            if timer is not None:
                timer.cancel()

    async def _start(self, job: str) -> None:
        await self._send(
            StartJob(id=self._id("start"), cluster=self.cluster, actor="runtime", job=job)
        )
        seconds = self.durations.get(job, 30.0)
        self.timers[job] = asyncio.get_running_loop().call_later(
            seconds, lambda: self._spawn(self._complete(job))
        )

    async def _complete(self, job: str) -> None:
        self.timers.pop(job, None)
        await self._send(
            CompleteJob(id=self._id("done"), cluster=self.cluster, actor="runtime", job=job)
        )

    async def _count(self, topic: str, stop: asyncio.Event) -> None:
        consumer = self.client.reader(topic)
        await consumer.start()
        try:
            async for _ in consumer:
                if topic == "commands":
                    self.stats.commands += 1
                else:
                    self.stats.rejected += 1
        finally:
            await consumer.stop()

    # -- load -----------------------------------------------------------------------------

    async def _jobs(self, stop: asyncio.Event) -> None:
        rate = self.settings.jobs_per_minute / 60.0
        n = 0
        while not stop.is_set():
            await asyncio.sleep(self.rng.expovariate(rate))
            kind, spec, minutes = self._job(n)
            n += 1
            self.durations[spec.id] = minutes * 60 * self.settings.time_scale
            await self._send(
                SubmitJob(
                    id=self._id("submit"), cluster=self.cluster, actor=f"user:{kind}", job=spec
                )
            )

    def _job(self, n: int) -> tuple[str, JobSpec, float]:
        r = self.rng.random()
        pick = MIX[-1]
        for entry in MIX:
            if r < entry[1]:
                pick = entry
                break
            r -= entry[1]
        kind, _, (lo, hi), size, prio, (m_lo, m_hi) = pick
        spec = JobSpec(
            id=f"{kind}-{n:05d}",
            owner=f"team-{kind}",
            nodes=self.rng.randint(lo, hi),
            slice_size=size,
            kind=JobKind.INTERACTIVE if kind == "dev" else JobKind.MANAGED,
            priority=prio,
            checkpoint_interval=timedelta(minutes=30) if kind != "dev" else None,
        )
        return kind, spec, self.rng.uniform(m_lo, m_hi)

    async def _exporters(self, stop: asyncio.Event) -> None:
        # Exporters run independently on every node: spread one round of samples over the
        # interval (in 50 steps) instead of sending a burst of thousands at once.
        nodes = [n for r in self.topology.racks for n in r.nodes]
        steps = 50
        chunk = max(1, len(nodes) // steps)
        pause = self.settings.telemetry_interval / steps
        while not stop.is_set():
            for i in range(0, len(nodes), chunk):
                t0 = time.monotonic()
                now = datetime.now(UTC)
                pending = [
                    await self.client.send_telemetry(self._sample(node, now))
                    for node in nodes[i : i + chunk]
                ]
                await asyncio.gather(*pending)
                await asyncio.sleep(max(0.0, pause - (time.monotonic() - t0)))

    def _sample(self, node: str, now: datetime) -> NodeTelemetry:
        xid = 79 if node in self.broken else None
        return NodeTelemetry(
            cluster=self.cluster,
            node=node,
            at=now,
            gpus=tuple(
                GpuSample(
                    index=i,
                    temperature_c=round(self.rng.uniform(38, 72), 1),
                    power_w=700.0,
                    xid=xid if i == 1 else None,
                    ecc_uncorrected=0,
                )
                for i in range(4)
            ),
        )

    async def _failures(self, stop: asyncio.Event) -> None:
        nodes = [n for r in self.topology.racks for n in r.nodes]
        while not stop.is_set():
            await asyncio.sleep(self.rng.expovariate(1 / self.settings.failure_every))
            node = self.rng.choice(nodes)
            if node in self.broken:
                continue
            self.broken[node] = time.monotonic()
            asyncio.get_running_loop().call_later(
                self.settings.repair_after, self._later_repair, node
            )

    def _later_repair(self, node: str) -> None:
        self._spawn(self._repair(node))

    async def _repair(self, node: str) -> None:
        self.broken.pop(node, None)
        state = self.stats.state
        if state is None or state.nodes[node].health.value != "failed":
            return  # the GPU Manager never failed it (yet): nothing to repair
        await self._send(
            RepairNode(
                id=self._id("repair"),
                cluster=self.cluster,
                actor="operator:demo",
                node=node,
                note="GPU reseated",
            )
        )
