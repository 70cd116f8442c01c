"""Simulator throughput: wall time of simulated years, and simulated events per second.

The cluster is generated (racks of 18 nodes x 4 GPUs, 8 racks per IB pod); the workload is
`rackplane.sim.DEFAULT_CLASSES` (a training mix asking for ~60% of the nodes, rates per 1,000
nodes, so it scales with the cluster); failures are the default model (node MTBI 490 days,
Llama 3 root causes, a rack fault every 2 years per rack). One process, one core.

Run on its own: `python -m bench.sim` (`--quick` for a smoke run of a few days, `--json FILE`
for the raw rows, `--runs 128:365:tas+spares,1024:30:tas+spares` to choose). A policy with
`@shared` (`1024:365:tas+spares+defrag+ntp@shared`) runs the shared cluster of
examples/shared-cluster.yaml instead (queues, quotas, fair share, reclaim; its policy and
workload) sized to RACKS: quotas and arrival rates scaled by RACKS / 128. Each row says
what was simulated and how long it took; `year_s` extrapolates the wall time to a simulated
year when fewer days were run (linear in days: the load is stationary after the first days).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bench.__main__ import _markdown, machine
from rackplane.sim import GeneratedCluster, Scenario, ScenarioDoc, build_scenario, simulate

Progress = Callable[[str], None]

SHARED = Path(__file__).resolve().parent.parent / "examples" / "shared-cluster.yaml"
_QUOTAS = ("nominal_nodes", "borrowing_limit", "lending_limit")


def shared_doc(racks: int, days: float, seed: int) -> ScenarioDoc:
    """examples/shared-cluster.yaml (128 racks) on a generated cluster of `racks` racks: its
    queues' quotas and its classes' arrivals per day scaled by racks / 128 (so the quotas
    still sum to the nodes outside the spares), job sizes as they are."""
    raw = yaml.safe_load(SHARED.read_text())
    f = racks / 128
    queues = [
        {k: (round(v * f) if k in _QUOTAS and v is not None else v) for k, v in q.items()}
        for q in raw["policy"]["queues"]
    ]
    classes = [
        {**c, "arrivals_per_day": c["arrivals_per_day"] * f} for c in raw["workload"]["classes"]
    ]
    return ScenarioDoc.model_validate(
        {
            **raw,
            "name": f"shared-{racks}",
            "cluster": {"name": f"bench-{racks}", "racks": racks},
            "policy": {**raw["policy"], "queues": queues},
            "workload": {**raw["workload"], "classes": classes},
            "days": days,
            "seed": seed,
        }
    )


FULL_RUNS = (
    (128, 365.0, "tas+spares"),
    (128, 365.0, "tas+spares+defrag+ntp"),
    (1024, 365.0, "tas+spares"),
)
QUICK_RUNS = (
    (128, 14.0, "tas+spares"),
    (128, 14.0, "tas+spares+defrag+ntp"),
    (1024, 3.0, "tas+spares"),
)


def bench_scenario(racks: int, days: float, policy: str, seed: int = 1) -> tuple[Scenario, str]:
    """The scenario of one `RACKS:DAYS:POLICY` run and the preset name to simulate it with."""
    name, _, variant = policy.partition("@")
    if variant not in ("", "shared"):
        raise ValueError(f"unknown variant {variant!r} (only @shared)")
    doc = (
        shared_doc(racks, days, seed)
        if variant
        else ScenarioDoc(
            cluster=GeneratedCluster(name=f"bench-{racks}", racks=racks), days=days, seed=seed
        )
    )
    return build_scenario(doc.model_copy(update={"policies": (name,)})), name


def simulated_year(
    racks: int, days: float, policy: str, seed: int = 1, progress: Progress | None = None
) -> dict[str, Any]:
    """Simulate `days` of a generated cluster of `racks` racks under `policy`; time it."""
    scenario, name = bench_scenario(racks, days, policy, seed)
    last = [-1]

    def tick(done: float) -> None:
        pct = int(done * 100)
        if progress is not None and pct != last[0] and pct % 5 == 0:
            last[0] = pct
            progress(f"sim: {racks} racks, {days:g} days, {policy}: {pct}%")

    t = time.perf_counter()
    cpu = time.process_time()
    m = simulate(scenario, name, progress=tick)
    wall = time.perf_counter() - t
    cpu = time.process_time() - cpu
    return {
        "racks": racks,
        "nodes": m.nodes,
        "policy": policy,
        "days": days,
        "jobs": m.jobs_submitted,
        "commands": m.commands,
        "events": m.events,
        "wall_s": wall,
        "cpu_s": cpu,
        "load_avg_1m": os.getloadavg()[0],
        "events_per_s": m.events / wall,
        "sim_days_per_s": days / wall,
        "year_s": wall * 365.0 / days,
        "gpu_utilisation": m.gpu_utilisation,
        "defrag_plans": m.defrag_plans,
    }


def parse_runs(text: str) -> list[tuple[int, float, str]]:
    """`RACKS:DAYS:POLICY,...` -> runs."""
    out = []
    for part in text.split(","):
        racks, days, policy = part.split(":", 2)
        out.append((int(racks), float(days), policy))
    return out


def spec_args(prog: str, doc: str | None, argv: list[str] | None) -> list[tuple[int, float, str]]:
    """The runs of a `python -m bench.PROG RACKS:DAYS:POLICY[,...] ...` command line, in order
    (`bench.sim_digest`, `bench.sim_core`)."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{prog}", description=doc)
    parser.add_argument("runs", type=parse_runs, nargs="+", help="RACKS:DAYS:POLICY,...")
    return [run for runs in parser.parse_args(argv).runs for run in runs]


def main(argv: list[str] | None = None) -> int:
    """Run the simulator benchmarks and print a markdown table."""
    parser = argparse.ArgumentParser(prog="python -m bench.sim", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few simulated days only")
    parser.add_argument("--runs", type=parse_runs, help="RACKS:DAYS:POLICY,... to run")
    parser.add_argument("--json", type=Path, help="write the raw rows here")
    args = parser.parse_args(argv)
    runs = args.runs or (QUICK_RUNS if args.quick else FULL_RUNS)
    rows = []
    for racks, days, policy in runs:
        rows.append(
            simulated_year(racks, days, policy, progress=lambda s: print(s, file=sys.stderr))
        )
        print(json.dumps(rows[-1]), file=sys.stderr)
    print(f"{machine()} — {datetime.now(UTC).isoformat()}")
    print(_markdown(rows))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "sim": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
