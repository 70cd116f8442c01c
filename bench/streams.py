"""Throughput and latency of the streaming pipeline, in one run on one broker.

1. raw: a plain aiokafka consumer reading N pre-produced telemetry records (the ceiling).
2. telemetry: a worker running only the GPU Manager (and the controller), ready and idle, is
   sent N samples (the cluster registered beforehand); the clock runs from the first sample
   sent to the `NodeFailed` caused by the last two (fatal XID).
3. commands: a worker running only the controller decides N pre-produced commands
   (cordon/uncordon pairs); the clock stops at the N-th command's event.
4. latency: the same controller, fed 500 commands/s for `seconds`; each command's latency is
   send -> its event read back by a consumer polling every 5 ms.
Worker start-up (about 5 s, consumer-group joins) is not counted: the worker reports its
partitions assigned before the clock starts.

The broker, the worker and this client share the machine's cores, so the telemetry and
command stages also report the worker's own CPU time over the clocked span (Linux: from
/proc): `per_worker_cpu_s`, what one core given to the worker alone would sustain.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from bench._clusters import topology
from rackplane.keyfiles import KeyFile
from rackplane.models import (
    TELEMETRY,
    CordonNode,
    GpuSample,
    NodeTelemetry,
    PolicySettings,
    RegisterTopology,
    Role,
    Topology,
    UncordonNode,
)
from rackplane.streams.client import Client
from rackplane.streams.codec import decode_event
from rackplane.streams.config import StreamConfig
from rackplane.streams.process import WorkerProcess
from rackplane.streams.topics import ensure_topics

Progress = Callable[[str], None]


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far; None where /proc is missing."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds_of(pid: int) -> float:
    """`_cpu_seconds` of a process that must be running (raises ProcessLookupError if not)."""
    cpu = _cpu_seconds(pid)
    if cpu is None:
        raise ProcessLookupError(f"no process {pid}")
    return cpu


def _rate(
    stage: str, n: int, dt: float, cpu: tuple[float | None, float | None] = (None, None)
) -> dict[str, Any]:
    """A stage's row: messages per second of wall time and, given the worker's CPU time at
    both ends, per second of its CPU."""
    row: dict[str, Any] = {"stage": stage, "messages": n, "seconds": dt, "per_second": n / dt}
    if cpu[0] is not None and cpu[1] is not None:
        row["worker_cpu_s"] = cpu[1] - cpu[0]
        row["per_worker_cpu_s"] = n / (cpu[1] - cpu[0])
    return row


def _config(url: str, **kw: Any) -> StreamConfig:
    name = f"bench{uuid.uuid4().hex[:6]}"
    return StreamConfig(broker=url, prefix=name, app_id=name, partitions=1, **kw)


def _sample(cluster: str, node: str, xid: int | None = None) -> NodeTelemetry:
    return NodeTelemetry(
        cluster=cluster,
        node=node,
        at=datetime.now(UTC),
        gpus=tuple(
            GpuSample(index=i, temperature_c=55.0, power_w=690.0, ecc_uncorrected=0,
                      xid=xid if i == 0 else None, nvlink_down=0)
            for i in range(4)
        ),
    )  # fmt: skip


async def _produce(client: Client, topic: str, values: list[tuple[bytes, bytes]]) -> None:
    """Send (key, value) pairs in full record batches (aiokafka's batch API: less than half
    the producer CPU of a `send` per record, which the worker under test would share the
    cores with). The benchmark's topics have one partition."""
    assert client.config.partitions == 1, "the benchmark's topics have one partition"
    producer, name = client.producer, client.config.topic(topic)
    pending = []
    batch = producer.create_batch()
    for key, value in values:
        if batch.append(key=key, value=value, timestamp=None) is None:  # full
            pending.append(await producer.send_batch(batch, name, partition=0))
            batch = producer.create_batch()
            batch.append(key=key, value=value, timestamp=None)
    pending.append(await producer.send_batch(batch, name, partition=0))
    await asyncio.gather(*pending)


async def _register(client: Client, cluster: str, racks: int) -> None:
    t = topology(racks)
    await client.send(
        RegisterTopology(id=f"reg-{cluster}", cluster=t.cluster, actor="bench", topology=t,
                         settings=PolicySettings())
    )  # fmt: skip


async def _wait_event(config: StreamConfig, cluster: str, pred: Callable[[Any], bool]) -> float:
    consumer = AIOKafkaConsumer(
        config.topic("events"), bootstrap_servers=config.bootstrap, group_id=None,
        auto_offset_reset="earliest", fetch_max_wait_ms=5,
    )  # fmt: skip
    await consumer.start()
    try:
        async for record in consumer:
            if record.value and record.key == cluster.encode() and pred(decode_event(record.value)):
                return time.monotonic()
    finally:
        await consumer.stop()
    raise AssertionError("unreachable")


Sampler = Callable[[str, str, int | None], NodeTelemetry]
"""(cluster, node, fatal xid or None) -> a sample."""


async def raw_consumer(url: str, n: int, sampler: Sampler | None = None) -> dict[str, Any]:
    config = _config(url)
    await ensure_topics(config)
    cluster = topology(8).cluster
    value = TELEMETRY.dump_json((sampler or _sample)(cluster, "r0000n00", None), exclude_none=True)
    async with Client(config, linger_ms=5) as client:
        await _produce(client, "telemetry", [(b"r0000n00", value)] * n)
    consumer = AIOKafkaConsumer(
        config.topic("telemetry"), bootstrap_servers=config.bootstrap, group_id=None,
        auto_offset_reset="earliest", fetch_max_wait_ms=5,
    )  # fmt: skip
    await consumer.start()
    t0 = time.monotonic()
    got = 0
    try:
        while got < n:
            batch = await consumer.getmany(timeout_ms=200, max_records=10_000)
            got += sum(len(v) for v in batch.values())
    finally:
        await consumer.stop()
    return _rate("raw aiokafka consumer", n, time.monotonic() - t0)


async def _registered(url: str, racks: int) -> tuple[StreamConfig, Topology]:
    """A cluster registered on fresh topics by a worker that then stopped: its telemetry group
    has committed nothing (samples of nodes the controller does not know are rejected)."""
    config = _config(url, policies=(), projections=False)
    await ensure_topics(config)
    t = topology(racks)
    worker = WorkerProcess(config)
    try:
        await asyncio.to_thread(worker.start)
        async with Client(config) as client:
            await _register(client, t.cluster, racks)
        await asyncio.wait_for(
            _wait_event(config, t.cluster, lambda e: e.type == "TopologyRegistered"), 60
        )
    finally:
        worker.stop()
    return config, t


def _samples(t: Topology, n: int, make: Sampler) -> tuple[list[tuple[bytes, bytes]], str]:
    """n samples of the cluster's nodes, the last two with a fatal XID (one reading is not
    enough), and the node they are of."""
    nodes = [node for r in t.racks for node in r.nodes]
    last = nodes[7]
    values = [
        (node.encode(), TELEMETRY.dump_json(make(t.cluster, node, None), exclude_none=True))
        for node in (nodes[i % len(nodes)] for i in range(n - 2))
    ]
    for _ in range(2):
        values.append(
            (last.encode(), TELEMETRY.dump_json(make(t.cluster, last, 79), exclude_none=True))
        )
    return values, last


async def backlog(url: str, n: int, racks: int, make: Sampler) -> tuple[StreamConfig, str, str]:
    """A registered cluster and n samples waiting on its telemetry topic: (config, cluster,
    the node whose last two samples carry XID 79)."""
    config, t = await _registered(url, racks)
    values, last = _samples(t, n, make)
    async with Client(config, linger_ms=5) as client:
        await _produce(client, "telemetry", values)
    return config, t.cluster, last


async def telemetry(
    url: str, n: int, racks: int = 128, sampler: Sampler | None = None, stage: str = ""
) -> dict[str, Any]:
    config, t = await _registered(url, racks)
    values, last = _samples(t, n, sampler or _sample)
    # A fresh worker, ready (its consumer groups joined, idle), then the samples: from the
    # first one sent to the last one's NodeFailed. The worker cannot run ahead of the
    # producer, which shares the cores with it: if anything, the rate is understated.
    worker = WorkerProcess(config)
    try:
        await asyncio.to_thread(worker.start)
        pid = worker.pid
        c0, t0 = _cpu_seconds(pid), time.monotonic()
        async with Client(config, linger_ms=5) as client:
            await _produce(client, "telemetry", values)
        t1 = await asyncio.wait_for(
            _wait_event(config, t.cluster, lambda e: e.type == "NodeFailed" and e.node == last),
            600,
        )
        c1 = _cpu_seconds(pid)
    finally:
        worker.stop()
    return _rate(stage or "telemetry through gpu_manager", n, t1 - t0, (c0, c1))


async def commands(
    url: str, n: int, racks: int = 128, *, signed_in: Path | None = None
) -> dict[str, Any]:
    """`signed_in`: a directory for key files; the cluster then trusts keys, every command is
    signed by an admin's key, and the worker signs every event with its own (issue 16)."""
    admin = worker_key = None
    kw: dict[str, Any] = {}
    if signed_in is not None:
        admin, worker_key = KeyFile.new("operator:bench"), KeyFile.new("worker:bench")
        path = signed_in / f"worker-{uuid.uuid4().hex[:8]}.key"
        worker_key.save(path)
        kw["worker_key_file"] = str(path)
    config = _config(url, policies=(), projections=False, gpu_manager=False, **kw)
    await ensure_topics(config)
    t = topology(racks)
    node = t.racks[0].nodes[0]
    actor = admin.actor if admin is not None else "bench"
    async with Client(config, linger_ms=5) as client:
        if admin is None or worker_key is None:
            await _register(client, t.cluster, racks)
        else:
            keys = (admin.trusted(Role.ADMIN), worker_key.trusted(Role.POLICY))
            reg = RegisterTopology(id=f"reg-{t.cluster}", cluster=t.cluster, actor=admin.actor,
                                   topology=t, settings=PolicySettings(keys=keys))  # fmt: skip
            await client.send(admin.sign(reg))
        values = []
        for i in range(n):
            kind = CordonNode if i % 2 == 0 else UncordonNode
            c: Any = kind(id=f"c{i}", cluster=t.cluster, actor=actor, node=node)
            if admin is not None:
                c = admin.sign(c)
            values.append((t.cluster.encode(), c.model_dump_json().encode()))
        await _produce(client, "commands", values)
    worker = WorkerProcess(config)
    try:
        await asyncio.to_thread(worker.start)
        pid = worker.pid
        c0, t0 = _cpu_seconds(pid), time.monotonic()
        t1 = await asyncio.wait_for(
            _wait_event(config, t.cluster, lambda e: e.causation_id == f"c{n - 1}"), 600
        )
        c1 = _cpu_seconds(pid)
    finally:
        worker.stop()
    stage = "commands through controller" + (", signed" if signed_in is not None else "")
    return _rate(stage, n, t1 - t0, (c0, c1))


async def latency(
    url: str,
    rate: float,
    seconds: float,
    racks: int = 128,
    fetch_wait_ms: int = StreamConfig.fetch_wait_ms,
) -> dict[str, Any]:
    config = _config(
        url, policies=(), projections=False, gpu_manager=False, fetch_wait_ms=fetch_wait_ms
    )
    await ensure_topics(config)
    t = topology(racks)
    node = t.racks[0].nodes[0]
    worker = WorkerProcess(config)
    sent: dict[str, float] = {}
    lat: list[float] = []
    try:
        await asyncio.to_thread(worker.start)
        async with Client(config) as client:
            await _register(client, t.cluster, racks)
            consumer = AIOKafkaConsumer(
                config.topic("events"), bootstrap_servers=config.bootstrap, group_id=None,
                auto_offset_reset="earliest", fetch_max_wait_ms=5,
            )  # fmt: skip
            await consumer.start()
            total = int(rate * seconds)

            async def read() -> None:
                while len(lat) < total:
                    batch = await consumer.getmany(timeout_ms=100)
                    now = time.monotonic()
                    for records in batch.values():
                        for r in records:
                            if not r.value:
                                continue
                            e = decode_event(r.value)
                            at = sent.pop(e.causation_id or "", None)
                            if at is not None:
                                lat.append((now - at) * 1000)

            reader = asyncio.create_task(read())
            await asyncio.sleep(1)
            t0 = time.monotonic()
            for i in range(total):
                kind = CordonNode if i % 2 == 0 else UncordonNode
                c = kind(id=f"l{i}", cluster=t.cluster, actor="bench", node=node)
                sent[c.id] = time.monotonic()
                await client.send(c, wait=False)
                delay = t0 + (i + 1) / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await asyncio.wait_for(reader, 60)
            await consumer.stop()
    finally:
        worker.stop()
    lat.sort()
    return {
        "stage": f"command -> event latency at {rate:.0f}/s",
        "messages": len(lat),
        "p50_ms": statistics.median(lat),
        "p99_ms": lat[int(0.99 * (len(lat) - 1))],
        "max_ms": lat[-1],
    }


async def run_all(url: str, progress: Progress, *, quick: bool = False) -> list[dict[str, Any]]:
    """Every stage on the broker at `url`; raw first (the ratios refer to it)."""
    n = 20_000 if quick else 100_000
    progress("streams: raw consumer")
    rows = [await raw_consumer(url, n)]
    progress("streams: telemetry through gpu_manager")
    rows.append(await telemetry(url, n))
    progress("streams: commands through controller")
    rows.append(await commands(url, n // 5))
    progress("streams: signed commands through controller, signed events")
    with tempfile.TemporaryDirectory() as keys:
        rows.append(await commands(url, n // 5, signed_in=Path(keys)))
    raw = rows[0]["per_second"]
    for r in rows:
        r["ratio_to_raw"] = r["per_second"] / raw
    progress("streams: latency at 500 commands/s")
    rows.append(await latency(url, 500, 10 if quick else 30))
    return rows


if __name__ == "__main__":
    import json
    import sys

    from rackplane.streams import EmbeddedBroker

    target = sys.argv[1] if len(sys.argv) > 1 else None
    if target is None:
        with EmbeddedBroker() as b:
            out = asyncio.run(run_all(b.url, print, quick="--quick" in sys.argv))
    else:
        out = asyncio.run(run_all(target, print, quick="--quick" in sys.argv))
    print(json.dumps(out, indent=2))
