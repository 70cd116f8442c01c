"""Placement latency and defrag planning time as clusters grow.

Placement: one scheduling decision for an arriving job = build the cycle's capacity from the
state, then `find_placement`. Defrag: `plan_defrag` for a 16-node job blocked by topology on a
fragmented cluster where every rack with room already took a 16-node job.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._clusters import blocked_by_topology, cluster
from rackplane.models import JobSpec
from rackplane.policies import Capacity, Placement, find_placement, plan_defrag
from rackplane.projections import ClusterState

Progress = Callable[[str], None]


def timings(fn: Callable[[], object], repeat: int) -> list[float]:
    """Milliseconds per call, after one warm-up call (fabric tables, node order caches)."""
    fn()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def timings_cpu(fn: Callable[[], object], repeat: int) -> tuple[list[float], list[float]]:
    """Milliseconds per call, wall and CPU (this process), after one warm-up call. CPU time
    is what to compare on a shared machine: it does not count time spent waiting for a core."""
    fn()
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        cpu.append((time.process_time() - c) * 1e3)
        wall.append((time.perf_counter() - t) * 1e3)
    return wall, cpu


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (nearest rank)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def placement_latency(
    racks: tuple[int, ...],
    fills: tuple[str, ...],
    sizes: tuple[int, ...],
    repeat: int,
    progress: Progress,
) -> list[dict[str, Any]]:
    """p50/p99 of one placement decision per (racks, fill, job size)."""
    rows = []
    for r in racks:
        for fill in fills:
            progress(f"placement: {fill} cluster of {r} racks")
            state = cluster(r, fill)
            for n in sizes:
                shape = JobSpec(id="probe", nodes=n, slice_size=16).slice_sizes
                last: list[object] = []

                def once(
                    s: ClusterState = state, z: tuple[int, ...] = shape, out: list[object] = last
                ) -> None:
                    out.append(find_placement(Capacity(s), z))

                ms = timings(once, repeat)
                rows.append(
                    {
                        "racks": r,
                        "fill": fill,
                        "job_nodes": n,
                        "placed": isinstance(last[-1], Placement),
                        "p50_ms": statistics.median(ms),
                        "p99_ms": pct(ms, 0.99),
                    }
                )
    return rows


def defrag_time(racks: tuple[int, ...], repeat: int, progress: Progress) -> list[dict[str, Any]]:
    """p50/p99 of `plan_defrag` for one blocked 16-node job per cluster size, wall and CPU,
    with the load average when the row was measured (wall times on a shared machine)."""
    rows = []
    for r in racks:
        progress(f"defrag: fragmented cluster of {r} racks")
        state = blocked_by_topology(r)
        plans: list[Any] = []

        def once(s: ClusterState = state, out: list[Any] = plans) -> None:
            assert s.at is not None
            out.append(plan_defrag(s, "blocked", now=s.at))

        ms, cpu = timings_cpu(once, repeat)
        plan = plans[-1]
        rows.append(
            {
                "racks": r,
                "jobs_running": sum(1 for j in state.jobs.values() if j.status.holds_nodes),
                "planned": plan is not None,
                "victims": len(plan.victims) if plan is not None else 0,
                "p50_ms": statistics.median(ms),
                "p99_ms": pct(ms, 0.99),
                "cpu_p50_ms": statistics.median(cpu),
                "cpu_p99_ms": pct(cpu, 0.99),
                "loadavg": float(Path("/proc/loadavg").read_text().split()[0])
                if Path("/proc/loadavg").exists()
                else None,
            }
        )
    return rows
