"""The GPU Manager's throughput: telemetry classified per second, beside the raw consumer.

In one run on one broker:
1. raw: a plain aiokafka consumer reading N pre-produced full NVML-shaped samples (the ceiling);
2. gpu_manager: a worker running the GPU Manager (XID table, incidents, hysteresis) and the
   controller drains a backlog of the same N samples; the clock stops at the last node's
   `NodeFailed` (its last two samples carry XID 79);
3. gpu_manager loop: the same path in process (consumer loop -> `GpuManager.on_telemetry`:
   decode, replica lookup, classification), timed from the first fetched batch, so worker
   start-up and the replica rebuild are not counted;
4. fold: the pure classifier alone, in process (no broker, no decode), on the same samples;
5. loop in process, no broker (`loop_in_process`): the worker's exact per-record path
   (`GpuManager.on_telemetry` on fetched-batch-sized lists of records holding the encoded
   bytes: decode, replica, fold, commands) timed in CPU seconds of this process, so the
   figure is per core and does not move with the other processes sharing the machine.
Samples are what the NVML exporter publishes for a 4-GPU node: every field set, a few nodes
throttled by the SW power cap and one node in ten with NVLink errors counted.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

from bench._clusters import cluster as cluster_state
from bench._clusters import topology
from bench.streams import backlog, raw_consumer, telemetry
from rackplane.models import TELEMETRY, GpuSample, NodeTelemetry
from rackplane.policies import GpuHealthRules
from rackplane.streams._heap import settle
from rackplane.streams.agents import GpuManager
from rackplane.streams.eventlog import EventLog
from rackplane.streams.replicas import Replicas

Progress = Callable[[str], None]
T0 = datetime(2026, 11, 30, tzinfo=UTC)


def nvml_sample(
    cluster: str, node: str, xid: int | None, at: datetime | None = None
) -> NodeTelemetry:
    """A full NVML exporter sample of a 4-GPU node at work."""
    h = zlib.crc32(node.encode()) % 10
    return NodeTelemetry(
        cluster=cluster, node=node, at=at or datetime.now(UTC),
        gpus=tuple(
            GpuSample(
                index=i, uuid=f"GPU-{node}-{i}", model="NVIDIA GB200", pci_bus_id=f"0000:0{i}:00.0",
                temperature_c=61.0 + i, memory_temperature_c=50.0, power_w=690.5,
                power_limit_w=700.0,
                sm_clock_mhz=1485.0, mem_clock_mhz=3201.0, clock_event_reasons=0x4 if h < 3 else 0,
                gpu_util_pct=100.0, mem_util_pct=25.0, ecc_corrected=0, ecc_uncorrected=0,
                ecc_corrected_aggregate=0, ecc_uncorrected_aggregate=0,
                remapped_rows_correctable=0, remapped_rows_uncorrectable=0, remap_pending=False,
                remap_failure=False, nvlink_up=18, nvlink_down=0, nvlink_errors=3 if h == 0 else 0,
                pcie_replay=6, xids=(xid,) if xid is not None and i == 0 else (),
            )
            for i in range(4)
        ),
    )  # fmt: skip


def fold(n: int, racks: int = 128) -> dict[str, Any]:
    t = topology(racks)
    nodes = [node for r in t.racks for node in r.nodes]
    samples = [
        nvml_sample(t.cluster, nodes[i % len(nodes)], None, T0 + timedelta(seconds=i // len(nodes)))
        for i in range(n)
    ]
    rules = GpuHealthRules()
    t0 = time.perf_counter()
    for s in samples:
        rules.classify(s)
    dt = time.perf_counter() - t0
    return {"stage": "fold only (in process)", "messages": n, "seconds": dt, "per_second": n / dt}


class _Sent:
    """A sender that keeps what the manager sends (the loop stage measures classification)."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    async def send(self, *, key: Any = None, value: Any = None) -> Any:
        self.values.append(value)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def manager_loop(url: str, n: int, racks: int = 128) -> dict[str, Any]:
    """The worker's telemetry path (consumer loop -> GpuManager.on_telemetry) in process, its
    replica built beforehand: the clock runs from the first fetched batch to the n-th sample."""
    config, cluster, last = await backlog(url, n, racks, nvml_sample)
    eventlog = EventLog(config.kafka_options(), config.topic("events"))
    replicas = Replicas(eventlog, partitions=config.partitions)
    await replicas.get(cluster)
    commands = _Sent()
    manager = GpuManager(
        GpuHealthRules(), replicas, commands, commands,
        topic=config.topic("telemetry"), limit=config.max_message_bytes,
    )  # fmt: skip
    consumer = AIOKafkaConsumer(
        config.topic("telemetry"), bootstrap_servers=config.bootstrap, group_id=None,
        auto_offset_reset="earliest", fetch_max_wait_ms=50, max_poll_records=5_000,
        max_partition_fetch_bytes=16 * 1024 * 1024,
    )  # fmt: skip
    await consumer.start()
    t0 = 0.0
    try:
        while manager.samples < n:
            batch = await consumer.getmany(timeout_ms=200, max_records=5_000)
            records = [r for rs in batch.values() for r in rs]
            if records and not t0:
                t0 = time.monotonic()
            await manager.on_telemetry(records)
    finally:
        await consumer.stop()
        await eventlog.stop()
    dt = time.monotonic() - t0
    assert any(last.encode() in v for v in commands.values), "the fatal XID was not reported"
    return {"stage": "gpu_manager loop (in process)", "messages": n, "seconds": dt,
            "per_second": n / dt}  # fmt: skip


def encoded(n: int, racks: int = 128) -> tuple[list[tuple[bytes, bytes]], str]:
    """n (key, value) pairs of full NVML samples, a sample per node every 5 s of sample time;
    the last two are XID 79 on one node. Returns them and that node."""
    t = topology(racks)
    nodes = [node for r in t.racks for node in r.nodes]
    last = nodes[7]
    out = []
    for i in range(n):
        node, xid = (nodes[i % len(nodes)], None) if i < n - 2 else (last, 79)
        at = T0 + timedelta(seconds=5 * (i // len(nodes)) + (i - n + 3 if xid else 0))
        sample = nvml_sample(t.cluster, node, xid, at)
        out.append((node.encode(), TELEMETRY.dump_json(sample, exclude_none=True)))
    return out, last


def fetched(values: list[tuple[bytes, bytes]], start: int) -> list[ConsumerRecord[bytes, bytes]]:
    """The records of `values` from offset `start` on, as the consumer hands them out."""
    return [
        ConsumerRecord(
            topic="bench.telemetry", partition=0, offset=start + i, timestamp=0, timestamp_type=0,
            key=key, value=value, checksum=None, serialized_key_size=len(key),
            serialized_value_size=len(value), headers=(),
        )
        for i, (key, value) in enumerate(values)
    ]  # fmt: skip


async def loop_in_process(n: int, racks: int = 128, batch: int = 5_000) -> dict[str, Any]:
    """`GpuManager.on_telemetry` over n pre-encoded full NVML samples, no broker: the CPU
    seconds of this process inside `on_telemetry` (its replica put in place and the heap
    settled beforehand, as the worker does after a rebuild; each batch of records is built
    outside the clock, as the consumer would; sends complete at once)."""
    values, last = encoded(n, racks)
    replicas = Replicas(None, partitions=1)  # type: ignore[arg-type]  # never read: put below
    replicas.put(cluster_state(racks, "empty"))
    replicas.ends[0] = 0  # the partition counts as loaded
    commands = _Sent()
    manager = GpuManager(
        GpuHealthRules(), replicas, commands, commands, topic="bench.telemetry", limit=1 << 20
    )
    settle(collect=True)

    dt = 0.0
    for start in range(0, n, batch):
        records = fetched(values[start : start + batch], start)
        c0 = time.process_time()
        await manager.on_telemetry(records)
        dt += time.process_time() - c0
    assert manager.samples == n, manager.samples
    assert any(last.encode() in v for v in commands.values), "the fatal XID was not reported"
    return {"stage": "gpu_manager loop (in process, no broker; CPU seconds)", "messages": n,
            "seconds": dt, "per_second": n / dt}  # fmt: skip


async def run_all(url: str, progress: Progress, *, quick: bool = False) -> list[dict[str, Any]]:
    """Raw consumer, the worker's GPU Manager and the pure fold, on the broker at `url`."""
    n = 5_000 if quick else 20_000  # 100k NVML-sized samples took Tansu 15+ min to take in
    progress("gpu: raw consumer")
    rows = [await raw_consumer(url, n, sampler=nvml_sample)]
    progress("gpu: telemetry through the gpu_manager worker")
    rows.append(await telemetry(url, n, sampler=nvml_sample, stage="gpu_manager worker"))
    progress("gpu: the gpu_manager loop in process")
    rows.append(await manager_loop(url, n))
    progress("gpu: the fold alone")
    rows.append(fold(n))
    progress("gpu: the gpu_manager loop in process, no broker")
    rows.append(await loop_in_process(n))
    raw = rows[0]["per_second"]
    for r in rows:
        r["ratio_to_raw"] = r["per_second"] / raw
    return rows


if __name__ == "__main__":
    import json
    import sys

    from rackplane.streams import EmbeddedBroker

    target = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else None
    quick = "--quick" in sys.argv
    if "--in-process" in sys.argv:  # `python -m bench.gpu --in-process [N]`: no broker
        args = sys.argv[sys.argv.index("--in-process") + 1 :]
        out = [asyncio.run(loop_in_process(int(args[0]) if args else 20_000))]
    elif target is None:
        with EmbeddedBroker() as b:
            out = asyncio.run(run_all(b.url, print, quick=quick))
    else:
        out = asyncio.run(run_all(target, print, quick=quick))
    print(json.dumps(out, indent=2))
