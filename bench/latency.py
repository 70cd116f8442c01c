"""Issue 21: command -> event latency at 500 commands/s on the broker `rackplane up` starts,
the embedded Tansu or a local Apache Kafka 4.1.1 (`up --kafka`), back to back.

Each run starts a fresh broker (timed: start to ready), a worker with `up`'s settings
(`StreamConfig`'s defaults: 4 partitions, every agent, the 20 ms fetch wait), registers a
128-rack cluster and sends cordon/uncordon commands at `rate` for `seconds`; a consumer reads
the events back. A command's latency is split at its event's record timestamp (the worker's
producer stamps it when the event is appended; one clock, this machine's):
- to event: command sent -> its event appended (client produce, the worker's fetch, decide);
- read back: event appended -> read by the benchmark's consumer (the worker's produce, the
  reader's fetch).
The 1-minute load average is recorded before each run (the machine may be shared).

    python -m bench.latency [--brokers tansu,kafka] [--runs 3] [--seconds 30] [--rate 500]
        [--warmup S] [--controller-only] [--fetch-wait MS] [--reader-wait MS]
        [--reader-min-bytes N]

`--controller-only`: issue 4's worker (`bench.streams.latency`: the controller alone, one
partition). Figures: docs/BENCHMARKS.md, "Issue 21".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer

from bench._clusters import topology
from bench.streams import _cpu_seconds, _register
from rackplane.models import CordonNode, UncordonNode
from rackplane.streams import EmbeddedBroker
from rackplane.streams.client import Client
from rackplane.streams.codec import decode_event
from rackplane.streams.config import StreamConfig
from rackplane.streams.kafka_fetch import fetch_jars
from rackplane.streams.kafka_local import KafkaServer
from rackplane.streams.process import WorkerProcess
from rackplane.streams.topics import ensure_topics


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


async def latency(
    url: str,
    rate: float,
    seconds: float,
    *,
    racks: int = 128,
    reader_wait_ms: int = 5,
    reader_min_bytes: int = 1,
    broker_pid: int | None = None,
    warmup: float = 0.0,
    **config: Any,
) -> dict[str, Any]:
    """One run on the broker at `url`; `config`: StreamConfig fields over `up`'s. With
    `broker_pid`, the broker's and the worker's CPU time per command over the clocked span
    (from /proc: less sensitive to other tenants than wall time). `warmup`: seconds of
    commands at `rate` before the clocked ones (not counted: the JVM's compiler, first
    fetches), the log growing meanwhile as it would."""
    name = f"lat{uuid.uuid4().hex[:6]}"
    cfg = StreamConfig(broker=url, prefix=name, app_id=f"{name}-up", **config)
    await ensure_topics(cfg)
    t = topology(racks)
    node = t.racks[0].nodes[0]
    worker = WorkerProcess(cfg)
    sent: dict[str, tuple[float, float]] = {}  # id -> (monotonic, wall) at send
    total = int(rate * seconds)
    rows: list[tuple[float, float, float]] = []
    worst = (0.0, 0.0)  # (latency ms, seconds after the clocked span began when it was sent)
    try:
        await asyncio.to_thread(worker.start)
        async with Client(cfg) as client:
            await _register(client, t.cluster, racks)
            consumer = AIOKafkaConsumer(
                cfg.topic("events"), bootstrap_servers=cfg.bootstrap, group_id=None,
                auto_offset_reset="earliest", fetch_max_wait_ms=reader_wait_ms,
                fetch_min_bytes=reader_min_bytes,
            )  # fmt: skip
            await consumer.start()

            async def read() -> None:
                nonlocal worst
                while len(rows) < total:
                    batch = await consumer.getmany(timeout_ms=100)
                    now, wall = time.monotonic(), time.time()
                    for records in batch.values():
                        for r in records:
                            if not r.value:
                                continue
                            at = sent.pop(decode_event(r.value).causation_id or "", None)
                            if at is not None:
                                appended = r.timestamp / 1000
                                if (now - at[0]) * 1000 > worst[0]:
                                    worst = ((now - at[0]) * 1000, at[0] - t_clock)
                                rows.append(
                                    ((now - at[0]) * 1000, (appended - at[1]) * 1000,
                                     (wall - appended) * 1000)
                                )  # fmt: skip

            reader = asyncio.create_task(read())
            await asyncio.sleep(1)
            pids = (broker_pid, worker.pid)
            warm = int(rate * warmup)
            t0 = time.monotonic()
            for i in range(warm + total):
                if i == warm:
                    cpu0 = [_cpu_seconds(p) if p else None for p in pids]
                    t_clock = time.monotonic()
                kind = CordonNode if i % 2 == 0 else UncordonNode
                c = kind(id=f"l{i}", cluster=t.cluster, actor="bench", node=node)
                if i >= warm:
                    sent[c.id] = (time.monotonic(), time.time())
                await client.send(c, wait=False)
                delay = t0 + (i + 1) / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await asyncio.wait_for(reader, 60)
            cpu1 = [_cpu_seconds(p) if p else None for p in pids]
            await consumer.stop()
    finally:
        worker.stop()
    total_ms, to_event, read_back = (list(col) for col in zip(*rows, strict=True))
    cpu = {
        f"{who}_cpu_ms_per_command": (b - a) * 1000 / total
        for who, a, b in zip(("broker", "worker"), cpu0, cpu1, strict=True)
        if a is not None and b is not None
    }
    return {
        **cpu,
        "messages": len(rows),
        "p50_ms": statistics.median(total_ms),
        "p99_ms": _pct(total_ms, 0.99),
        "max_ms": max(total_ms),
        "max_sent_at_s": worst[1],
        "to_event_p50_ms": statistics.median(to_event),
        "to_event_p99_ms": _pct(to_event, 0.99),
        "read_back_p50_ms": statistics.median(read_back),
        "read_back_p99_ms": _pct(read_back, 0.99),
    }


@contextlib.contextmanager
def started(kind: str) -> Iterator[tuple[str, float, int | None]]:
    """A fresh broker of `kind` (`tansu` or `kafka`, as `up` starts it): (url, seconds from
    start to ready, its pid)."""
    t0 = time.monotonic()
    if kind == "tansu":
        with EmbeddedBroker() as tansu:
            yield tansu.url, time.monotonic() - t0, tansu.pid
    elif kind == "kafka":
        jars = fetch_jars()
        t0 = time.monotonic()
        with KafkaServer(jars, sasl=False) as kafka:
            yield kafka.url, time.monotonic() - t0, kafka.pid
    else:
        raise ValueError(f"unknown broker {kind!r} (tansu or kafka)")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run each broker `--runs` times, interleaved; print one JSON row per run."""
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__)
    parser.add_argument("--brokers", default="tansu,kafka")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--fetch-wait", type=int, default=None, help="the worker's (ms)")
    parser.add_argument("--reader-wait", type=int, default=5, help="the reader's (ms)")
    parser.add_argument("--reader-min-bytes", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=0.0, help="seconds not counted")
    parser.add_argument(
        "--controller-only",
        action="store_true",
        help="bench.streams' worker (issue 4's figures): the controller alone, 1 partition",
    )
    args = parser.parse_args(argv)
    config: dict[str, Any] = {} if args.fetch_wait is None else {"fetch_wait_ms": args.fetch_wait}
    if args.controller_only:
        config |= {"policies": (), "projections": False, "gpu_manager": False, "partitions": 1}
    out = []
    for run in range(1, args.runs + 1):
        for kind in args.brokers.split(","):
            load = os.getloadavg()[0]
            with started(kind) as (url, ready_s, pid):
                row = asyncio.run(
                    latency(url, args.rate, args.seconds, reader_wait_ms=args.reader_wait,
                            reader_min_bytes=args.reader_min_bytes, broker_pid=pid,
                            warmup=args.warmup, **config)
                )  # fmt: skip
            row = {"broker": kind, "run": run, "ready_s": round(ready_s, 1), "load_1m": load,
                   "fetch_wait_ms": config.get("fetch_wait_ms", StreamConfig.fetch_wait_ms),
                   "reader_wait_ms": args.reader_wait, "warmup_s": args.warmup,
                   "worker": "controller" if args.controller_only else "up's", **row}  # fmt: skip
            print(json.dumps({k: round(v, 1) if isinstance(v, float) else v
                              for k, v in row.items()}), flush=True)  # fmt: skip
            out.append(row)
    return out


if __name__ == "__main__":
    main()
