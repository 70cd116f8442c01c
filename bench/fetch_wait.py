"""The fetch wait's trade on Tansu: command -> event latency at 500 commands/s against the
idle CPU of a worker and the broker, per `fetch_wait_ms`.

- latency: `bench.streams.latency` (a controller-only worker, 500 commands/s for `seconds`,
  each command's event read back), twice per wait; the 1-minute load average is recorded
  with each run (the machine may be shared).
- idle: a worker with every agent (policies, projections, GPU Manager), ready and idle on a
  fresh broker, for `idle_seconds`: CPU time of the worker and of Tansu over that time, in %
  of one core (`/proc/PID/stat`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

from bench.streams import _config, _cpu_seconds, latency
from rackplane.streams import EmbeddedBroker
from rackplane.streams.process import WorkerProcess
from rackplane.streams.topics import ensure_topics

WAITS = (5, 10, 20, 50)


def _cpu(pid: int) -> float:
    cpu = _cpu_seconds(pid)
    if cpu is None:
        raise RuntimeError("the idle stage reads CPU time from /proc (Linux only)")
    return cpu


async def idle(broker: EmbeddedBroker, fetch_wait_ms: int, seconds: float) -> dict[str, Any]:
    config = _config(broker.url, fetch_wait_ms=fetch_wait_ms)
    await ensure_topics(config)
    worker = WorkerProcess(config)
    try:
        await asyncio.to_thread(worker.start)
        assert broker.pid is not None
        await asyncio.sleep(2)  # start-up's tail (recoveries, first rebuilds)
        pids = (worker.pid, broker.pid)
        before = [_cpu(p) for p in pids]
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        dt = time.monotonic() - t0
        after = [_cpu(p) for p in pids]
    finally:
        worker.stop()
    worker_pct, tansu_pct = (100 * (a - b) / dt for a, b in zip(after, before, strict=True))
    return {
        "stage": "idle worker + Tansu",
        "fetch_wait_ms": fetch_wait_ms,
        "worker_cpu_pct": worker_pct,
        "tansu_cpu_pct": tansu_pct,
    }


def run_all(
    progress: Callable[[str], None],
    *,
    quick: bool = False,
    waits: tuple[int, ...] = WAITS,
    seconds: float = 30,
    idle_seconds: float = 10,
) -> list[dict[str, Any]]:
    """Each wait: two latency runs, then the idle cost; one fresh broker per run (Tansu's fetch
    cost grows with what its partitions hold, see `rackplane.streams._fetch_wait`)."""
    seconds, idle_seconds = (10, 5) if quick else (seconds, idle_seconds)
    rows: list[dict[str, Any]] = []
    for wait in waits:
        for run in (1, 2):
            progress(f"fetch wait {wait} ms: latency at 500 commands/s, run {run}")
            with EmbeddedBroker() as broker:
                row = asyncio.run(latency(broker.url, 500, seconds, fetch_wait_ms=wait))
            rows.append({**row, "fetch_wait_ms": wait, "load_avg_1m": os.getloadavg()[0]})
        progress(f"fetch wait {wait} ms: idle CPU")
        with EmbeddedBroker() as broker:
            rows.append(asyncio.run(idle(broker, wait, idle_seconds)))
    return rows
