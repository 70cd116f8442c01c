"""The load the faults happen under, and the record of everything it sent.

Theory of operation
-------------------
1. One plain aiokafka producer (acks=all; not idempotent, as Tansu has none) sends every
   record. Each send is a task of its own, so a broker that does not answer stalls no other
   send: the generator holds its rate through a fault, and a send that fails is recorded as
   not acknowledged and the generator goes on.
2. Every record sent is a `Sent`: what it was (topic, key, command id and cluster when it is
   a command), what the suite expects of it (`expect`: decided, rejected, either, or nothing
   at all), and what the broker said (acknowledged with its partition and offset, or the
   error). `_check` holds the log against these records.
3. `Load.run` holds `rate` commands/s over the clusters (submit, start, complete, fail,
   cancel, cordon, uncordon, health reports, repairs; jobs bounded per cluster so the queue
   stays small) plus healthy telemetry for every node, until told to stop. Nodes in
   `reserved` are left alone (a case uses them for its own story).
4. `Follower` reads the events and rejected topics from the start for the whole case: when
   each command was first decided or rejected (the latency of valid commands) and when the
   log last moved (the case waits until it is quiet).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pydantic import ValidationError

from rackplane.models import (
    REJECTIONS,
    TELEMETRY,
    CancelJob,
    Command,
    CompleteJob,
    CordonNode,
    FailJob,
    GpuSample,
    Health,
    JobSpec,
    NodeTelemetry,
    PolicySettings,
    RegisterTopology,
    RepairNode,
    ReportNodeHealth,
    StartJob,
    SubmitJob,
    UncordonNode,
)
from rackplane.streams.client import telemetry_key
from rackplane.streams.codec import decode_event, encode_command
from rackplane.streams.config import StreamConfig
from rackplane.streams.eventlog import is_marker
from tests.streams.conftest import small_topology

Expect = Literal["decide", "reject", "either", "none"]
"""decide: events caused by it exist, one run; reject: a record of `rejected` names its offset
and nothing decided it; either: exactly one of the two; none: only that nothing broke."""

MAX_REQUEST = 4 * 1024 * 1024
JOBS_PER_CLUSTER = 8


@dataclass
class Sent:
    """One record the suite sent, and what the broker answered."""

    topic: str
    """Short name: commands, telemetry, events, rejected."""
    key: bytes | None
    size: int
    expect: Expect
    kind: str
    """What it is: a command type, `sample`, or the hostile category."""
    command_id: str | None = None
    cluster: str | None = None
    sent_at: float = field(default_factory=time.monotonic)
    acked: bool | None = None
    """None while the send is pending; then True (the broker acknowledged) or False."""
    partition: int | None = None
    offset: int | None = None
    error: str | None = None


class Sender:
    """The producer every record goes through, and the `Sent` record of each."""

    def __init__(self, config: StreamConfig) -> None:
        self.config = config
        self.producer = AIOKafkaProducer(
            **config.kafka_options(),
            acks="all",
            enable_idempotence=False,
            linger_ms=5,
            max_request_size=MAX_REQUEST,
        )
        self.sent: list[Sent] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Sender:
        await self.producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.drain()
        await self.producer.stop()

    def command(
        self, command: Command, *, key: bytes | None = None, expect: Expect = "decide"
    ) -> Sent:
        """Send a command (keyed by its cluster unless `key` says otherwise)."""
        return self.raw(
            "commands",
            encode_command(command),
            key=command.cluster.encode() if key is None else key,
            expect=expect,
            kind=command.type,
            command_id=command.id,
            cluster=command.cluster,
        )

    def sample(self, sample: NodeTelemetry) -> Sent:
        """Send a telemetry sample keyed as the client keys it (by its cluster)."""
        value = TELEMETRY.dump_json(sample, exclude_none=True)
        key = telemetry_key(sample)
        return self.raw("telemetry", value, key=key, expect="none", kind="sample")

    def raw(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None,
        expect: Expect,
        kind: str,
        command_id: str | None = None,
        cluster: str | None = None,
    ) -> Sent:
        """Send bytes as they are; returns the record at once (its ack comes later)."""
        sent = Sent(topic, key, len(value), expect, kind, command_id, cluster)
        self.sent.append(sent)
        task = asyncio.get_running_loop().create_task(self._send(sent, value))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return sent

    async def _send(self, sent: Sent, value: bytes) -> None:
        try:
            fut = await self.producer.send(self.config.topic(sent.topic), value, key=sent.key)
            meta = await fut
        except Exception as err:  # any failure: not acknowledged
            sent.acked, sent.error = False, f"{type(err).__name__}: {err}"[:200]
            return
        sent.acked, sent.partition, sent.offset = True, meta.partition, meta.offset

    async def drain(self, timeout: float = 90.0) -> None:
        """Wait until every send has an answer (acknowledged or failed)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    async def acked(self, sent: Sent, timeout: float = 60.0) -> Sent:
        """Wait for one record's answer."""
        deadline = time.monotonic() + timeout
        while sent.acked is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return sent


def healthy_sample(
    cluster: str, node: str, at: datetime | None = None, **gpu1: Any
) -> NodeTelemetry:
    """A 4-GPU node sample; `gpu1` overrides GPU 1's readings (`xid=48` makes it fail)."""
    base: dict[str, Any] = {"temperature_c": 60.0, "ecc_uncorrected": 0, "nvlink_down": 0}
    gpus = tuple(GpuSample(index=i, **(base | gpu1 if i == 1 else base)) for i in range(4))
    return NodeTelemetry(cluster=cluster, node=node, at=at or datetime.now(UTC), gpus=gpus)


def nodes_of(cluster: str) -> list[str]:
    return [n for r in small_topology(cluster).racks for n in r.nodes]


class Load:
    """~`rate` commands/s over `clusters`, plus a healthy sample per node every
    `sample_interval` seconds, until `stop` is set."""

    def __init__(
        self,
        sender: Sender,
        clusters: list[str],
        *,
        rate: float = 40.0,
        sample_interval: float = 5.0,
        seed: int = 15,
        reserved: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.sender = sender
        self.clusters = clusters
        self.rate = rate
        self.sample_interval = sample_interval
        self.rng = random.Random(seed)
        self.reserved = set(reserved)
        self.ids = itertools.count(1)
        self.jobs: dict[str, list[str]] = {c: [] for c in clusters}
        self.commands = 0
        self.samples = 0
        self.tag = f"{seed}-{self.rng.randrange(16**6):06x}"

    def command_id(self, prefix: str) -> str:
        return f"{prefix}-{self.tag}-{next(self.ids)}"

    def register(self) -> list[Sent]:
        """Register every cluster (4 racks x 6 nodes, one spare per rack)."""
        return [
            self.sender.command(
                RegisterTopology(
                    id=self.command_id("reg"),
                    cluster=c,
                    actor="operator:faults",
                    topology=small_topology(c),
                    settings=PolicySettings(spares_per_rack=1, slice_size=2),
                )
            )
            for c in self.clusters
        ]

    async def run(self, stop: asyncio.Event) -> None:
        """Send until `stop` is set, on a fixed schedule (a slow send delays nothing)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        nodes = [(c, n) for c in self.clusters for n in nodes_of(c) if (c, n) not in self.reserved]
        sample_every = self.sample_interval / max(1, len(nodes))
        next_command, next_sample = start, start
        samples = itertools.cycle(nodes)
        while not stop.is_set():
            now = loop.time()
            while next_command <= now:
                self.sender.command(self.next_command())
                self.commands += 1
                next_command += 1.0 / self.rate
            while next_sample <= now:
                self.sender.sample(healthy_sample(*next(samples)))
                self.samples += 1
                next_sample += sample_every
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, min(next_command, next_sample) - now))

    def next_command(self) -> Command:
        """One command of the mix, for a random cluster."""
        c = self.rng.choice(self.clusters)
        jobs = self.jobs[c]
        nodes = [n for n in nodes_of(c) if (c, n) not in self.reserved]
        roll = self.rng.random()
        who = {"cluster": c, "actor": "operator:faults"}
        if (roll < 0.30 and len(jobs) < JOBS_PER_CLUSTER) or not jobs:
            job = f"j{next(self.ids)}"
            jobs.append(job)
            spec = JobSpec(id=job, nodes=self.rng.choice((1, 2, 2, 4)), owner="operator:faults")
            return SubmitJob(id=self.command_id("submit"), job=spec, **who)
        if roll < 0.45:
            return StartJob(id=self.command_id("start"), job=self.rng.choice(jobs), **who)
        if roll < 0.70:
            job = jobs.pop(self.rng.randrange(len(jobs)))
            end = self.rng.choice((CompleteJob, CompleteJob, FailJob, CancelJob))
            return end(id=self.command_id("end"), job=job, **who)
        node = self.rng.choice(nodes)
        if roll < 0.80:
            return CordonNode(id=self.command_id("cordon"), node=node, reason="faults", **who)
        if roll < 0.90:
            return UncordonNode(id=self.command_id("uncordon"), node=node, **who)
        if roll < 0.96:
            health = self.rng.choice((Health.DEGRADED, Health.HEALTHY))
            return ReportNodeHealth(
                id=self.command_id("health"), node=node, health=health, cause="faults", **who
            )
        return RepairNode(id=self.command_id("repair"), node=node, **who)

    def probes(self) -> list[Sent]:
        """One last command per cluster, so that every worker holds every cluster's state
        when the views are compared (a restarted controller rebuilds on first use)."""
        return [
            self.sender.command(
                CordonNode(
                    id=self.command_id("probe"),
                    cluster=c,
                    actor="operator:faults",
                    node=nodes_of(c)[0],
                    reason="probe",
                )
            )
            for c in self.clusters
        ]


class Follower:
    """Reads events and rejections from the start while the case runs."""

    def __init__(self, config: StreamConfig) -> None:
        self.config = config
        self.decided_at: dict[tuple[str, str], float] = {}
        """(cluster, command id) -> when its first event was read."""
        self.rejected_at: dict[tuple[str, int, int], float] = {}
        """(source topic, partition, offset) -> when its rejection was read."""
        self.node_events: list[tuple[str, str, str]] = []
        """(cluster, event type, node) of every event about a node."""
        self.last_moved = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        events, rejected = self.config.topic("events"), self.config.topic("rejected")
        consumer = AIOKafkaConsumer(
            events,
            rejected,
            **self.config.kafka_options(),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=MAX_REQUEST,
        )
        await consumer.start()
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=200)
                now = time.monotonic()
                for records in batch.values():
                    for r in records:
                        if is_marker(r.headers) or not r.value:
                            continue
                        self.last_moved = now
                        if r.topic == events:
                            self._event(r.value, now)
                        else:
                            self._rejection(r.value, now)
        finally:
            await consumer.stop()

    def _event(self, value: bytes, now: float) -> None:
        try:
            event = decode_event(value)
        except ValidationError:
            return
        if event.causation_id is not None:
            self.decided_at.setdefault((event.cluster, event.causation_id), now)
        node = getattr(event, "node", None)
        if isinstance(node, str):
            self.node_events.append((event.cluster, event.type, node))

    def _rejection(self, value: bytes, now: float) -> None:
        try:
            r = REJECTIONS.validate_json(value)
        except ValidationError:
            return
        if r.partition is not None and r.offset is not None:
            short = r.source_topic.removeprefix(f"{self.config.prefix}.")
            self.rejected_at.setdefault((short, r.partition, r.offset), now)

    def answered(self, sent: Sent) -> bool:
        """Has the record been decided or rejected (as far as read)?"""
        if sent.command_id is not None and self.decided(sent) is not None:
            return True
        where = (sent.topic, sent.partition, sent.offset)
        return sent.offset is not None and where in self.rejected_at

    def decided(self, sent: Sent) -> float | None:
        """When the command `sent` was first seen decided (None: not yet)."""
        return self.decided_at.get((sent.cluster or "", sent.command_id or ""))

    async def settle(
        self,
        sent: list[Sent],
        *,
        quiet: float = 3.0,
        stall: float = 25.0,
        timeout: float = 90.0,
    ) -> dict[str, Any]:
        """Wait until every acknowledged record that expects an answer has one and the log
        has been quiet for `quiet` s; give up when nothing moved for `stall` s (the rest is
        lost, which the check reports) or after `timeout` s."""
        started = time.monotonic()
        waiting = [s for s in sent if s.acked and s.expect != "none"]
        while True:
            await asyncio.sleep(0.2)
            now = time.monotonic()
            waiting = [s for s in waiting if not self.answered(s)]
            idle = now - self.last_moved
            if not waiting and idle >= quiet:
                outcome = "settled"
                break
            if idle >= stall:
                outcome = f"stalled ({len(waiting)} unanswered, nothing new for {stall:.0f} s)"
                break
            if now - started > timeout:
                outcome = f"timed out ({len(waiting)} unanswered after {timeout:.0f} s)"
                break
        return {"settle": outcome, "settle_s": round(time.monotonic() - started, 1)}
