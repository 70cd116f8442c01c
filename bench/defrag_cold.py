"""Defrag plans that meet cold tables: a new head of a blocked line, and the first plan after
a worker's start (issue 21; docs/BENCHMARKS.md, "Plans for a blocked line").

    python -m bench.defrag_cold [--racks 1024,4096] [--heads 12] [--runs 8]

Per cluster size, on the fragmented cluster of `bench._clusters.blocked_by_topology` (every
rack with room took a 16-node job, then a 16-node job of priority 5 waits):

- *heads*: `--heads` more blocked 16-node jobs of the same priority, each submitted (one
  fold) and planned for at once: what a plan costs when the head of the line changes. The
  sha256 of the plans' reprs says whether two commits plan the same.
- *start*: `--runs` times, every table and memo of the plan cleared (what a fresh worker
  has), then either a plan at once (cold) or `Defrag().warm(state)` (what the worker does
  to a replica it has just rebuilt) and then the plan.

CPU milliseconds of this process (`time.process_time`), one JSON line per size and part.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from typing import Any

from bench._clusters import blocked_folder
from rackplane.models import JobSpec, SubmitJob
from rackplane.policies import _defrag_seeds, _defrag_victims, placement
from rackplane.policies.defrag import Defrag, plan_defrag
from rackplane.projections import ClusterState


def cleared() -> None:
    """Forget every table and memo a plan keeps between calls (a fresh worker's state)."""
    _defrag_victims._POOLS.clear()
    _defrag_victims._MEMO.clear()
    _defrag_victims._DOWN.clear()
    placement._LAST.clear()
    for f in vars(_defrag_seeds).values():
        if hasattr(f, "cache_clear"):
            f.cache_clear()


def plan(state: ClusterState, job: str) -> Any:
    """The plan for `job` at the state's time."""
    assert state.at is not None
    return plan_defrag(state, job, now=state.at)


def cpu_ms(fn: Any) -> tuple[float, Any]:
    t = time.process_time()
    out = fn()
    return (time.process_time() - t) * 1e3, out


def heads(racks: int, n: int) -> dict[str, Any]:
    cleared()
    f = blocked_folder(racks)
    first, _ = cpu_ms(lambda: plan(f.state, "blocked"))
    digest = hashlib.sha256()
    ms = []
    for i in range(n):
        f.send(SubmitJob, job=JobSpec(id=f"head{i}", nodes=16, priority=5))
        took, got = cpu_ms(lambda i=i: plan(f.state, f"head{i}"))
        ms.append(took)
        digest.update(repr(got).encode())
    return {
        "racks": racks,
        "part": "heads",
        "first_plan_ms": round(first, 1),
        "heads": n,
        "p50_ms": round(statistics.median(ms), 1),
        "max_ms": round(max(ms), 1),
        "plans_sha256": digest.hexdigest()[:16],
    }


def start(racks: int, runs: int) -> dict[str, Any]:
    state = blocked_folder(racks).state
    plan(state, "blocked")  # imports and first-use costs out of the way
    cold, warm, after = [], [], []
    for _ in range(runs):
        cleared()
        cold.append(cpu_ms(lambda: plan(state, "blocked"))[0])
        cleared()
        warm.append(cpu_ms(lambda: Defrag().warm(state))[0])
        after.append(cpu_ms(lambda: plan(state, "blocked"))[0])

    def stats(xs: list[float]) -> dict[str, float]:
        return {"p50_ms": round(statistics.median(xs), 1), "max_ms": round(max(xs), 1)}

    return {
        "racks": racks,
        "part": "start",
        "runs": runs,
        "cold_plan": stats(cold),
        "warm": stats(warm),
        "plan_after_warm": stats(after),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.defrag_cold", description=__doc__)
    parser.add_argument("--racks", default="1024,4096", help="cluster sizes, comma-separated")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--runs", type=int, default=8)
    args = parser.parse_args(argv)
    for racks in (int(r) for r in args.racks.split(",")):
        print(json.dumps(heads(racks, args.heads)), flush=True)
        print(json.dumps(start(racks, args.runs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
