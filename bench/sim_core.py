"""The core's share of a simulated run: how much of its CPU is `decide` and `evolve` alone.

`python -m bench.sim_core 1024:30:tas+spares [1024:6:tas+spares+defrag+ntp@shared ...]`
simulates each `RACKS:DAYS:POLICY` spec exactly as `python -m bench.sim` does
(`bench.sim.bench_scenario`), with every `decide` and every `evolve` the engine calls timed
(`time.process_time` around each call), and prints one JSON line per spec: the run's CPU
seconds, the seconds inside `decide` and inside `evolve`, the jobs submitted and the events
folded, and per job the run's and the core's microseconds.

Why: every runtime step of a simulated job (submitted, placed, started, completed) is a
command the controller decides and an event the state folds, as on the live system. Their
sum is what any simulated year costs before the scheduler, the other policies and the
simulator's own bookkeeping run; a target below it needs a faster core, not a faster
simulator. The timer adds two `process_time` calls per decision and per fold (its own
cost, measured here as `timer_s`, is left in the figures).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import rackplane.engine as engine
from bench.sim import bench_scenario, spec_args
from rackplane.policies.controller import decide
from rackplane.projections.evolve import evolve
from rackplane.sim import Simulation


@dataclass
class CoreTimes:
    """CPU seconds inside `decide` and `evolve`, and how often each ran."""

    decide_s: float = 0.0
    evolve_s: float = 0.0
    decisions: dict[str, int] = field(default_factory=dict)
    """Commands decided, by type."""
    folds: int = 0


@contextmanager
def timed_core() -> Iterator[CoreTimes]:
    """Time every `decide` and `evolve` the engine calls while the block runs (the engine's
    module names patched for the block: the engine itself is unchanged)."""
    times = CoreTimes()
    clock = time.process_time
    counts = times.decisions

    def timed_decide(state: Any, command: Any, **kw: Any) -> Any:
        t = clock()
        out = decide(state, command, **kw)
        times.decide_s += clock() - t
        name = type(command).__name__
        counts[name] = counts.get(name, 0) + 1
        return out

    def timed_evolve(state: Any, event: Any) -> Any:
        t = clock()
        out = evolve(state, event)
        times.evolve_s += clock() - t
        times.folds += 1
        return out

    with (
        mock.patch.object(engine, "decide", timed_decide),
        mock.patch.object(engine, "evolve", timed_evolve),
    ):
        yield times


def timer_cost(calls: int = 200_000) -> float:
    """CPU seconds of one timed call's two clock reads (the timer's own cost per call)."""
    clock = time.process_time
    t = clock()
    for _ in range(calls):
        a = clock()
        _ = clock() - a
    return (clock() - t) / calls


def core_share(
    racks: int,
    days: float,
    policy: str,
    seed: int = 1,
    *,
    tick: Callable[[float], None] | None = None,
) -> dict[str, object]:
    """Simulate one spec with the core timed; the figures of one JSON line."""
    scenario, name = bench_scenario(racks, days, policy, seed)
    with timed_core() as times:
        cpu = time.process_time()
        Simulation(scenario, name, progress=tick).run()
        cpu = time.process_time() - cpu
    jobs = times.decisions.get("SubmitJob", 0)
    core = times.decide_s + times.evolve_s
    per_call = timer_cost()
    calls = sum(times.decisions.values()) + times.folds
    return {
        "spec": f"{racks}:{days:g}:{policy}",
        "cpu_s": round(cpu, 2),
        "decide_s": round(times.decide_s, 2),
        "evolve_s": round(times.evolve_s, 2),
        "core_share": round(core / cpu, 3) if cpu else None,
        "timer_s": round(per_call * calls, 2),
        "jobs": jobs,
        "commands": sum(times.decisions.values()),
        "events": times.folds,
        "run_us_per_job": round(1e6 * cpu / jobs) if jobs else None,
        "core_us_per_job": round(1e6 * core / jobs) if jobs else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Print one JSON line per spec (progress on stderr)."""
    for racks, days, policy in spec_args("sim_core", __doc__, argv):
        tick = _progress(f"{racks}:{days:g}:{policy}")
        print(json.dumps(core_share(racks, days, policy, tick=tick)), flush=True)
    return 0


def _progress(spec: str) -> Callable[[float], None]:
    """A progress callback that prints every 10% of the simulated time on stderr."""
    last = [-1]

    def tick(done: float) -> None:
        pct = int(done * 100)
        if pct != last[0] and pct % 10 == 0:
            last[0] = pct
            print(f"{spec}: {pct}%", file=sys.stderr, flush=True)

    return tick


if __name__ == "__main__":
    sys.exit(main())
