"""What each decision costs as clusters grow: 128, 512, 1,024 and 4,096 racks, and a plot.

`python -m bench.scaling [--plot docs/scaling.png] [--json FILE] [--racks 128,512,...]`
(also `python -m bench --only scaling`). Each decision is timed in CPU time of this process
(`time.process_time`: on a shared machine the other processes lengthen wall time, not this),
p50 and p99 over repeated calls after a warm-up, on the benchmark clusters of
`bench._clusters` (racks of 18 nodes, 2 spares, 8 racks per IB pod):

- `placement 16` / `placement 512`: one scheduling decision for an arriving job of 16 / 512
  nodes on the fragmented cluster: the cycle's `Capacity` and `find_placement`;
- `decide+evolve PlaceJob`: the controller validates a 16-node placement and the state folds
  its events (what every decision pays after a policy proposed it);
- `spare swap`: `spare_swap` proposes the swap after a node of a running job failed;
- `defrag plan`: `plan_defrag` for a 16-node job blocked by topology;
- `scheduling cycle`: `schedule` with 1,000 waiting jobs in 50 queues, all blocked already
  (`bench.queues`, the steady cycle).

The plot draws each decision's p99 against racks on log-log axes, with the growth a cost
O(racks) would have drawn from the 128-rack figure, for comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench._clusters import Folder, blocked_by_topology, cluster
from bench.placement import Progress, pct
from rackplane.models import Health, JobSpec, PlaceJob, ReportNodeHealth, SubmitJob
from rackplane.policies import (
    Capacity,
    Placement,
    Unplaceable,
    decide,
    find_placement,
    plan_defrag,
    schedule,
)
from rackplane.policies.spare_swap import SpareSwap
from rackplane.projections import ClusterState, evolve

RACKS = (128, 512, 1024, 4096)


def cpu_ms(fn: Callable[[], object], repeat: int) -> tuple[list[float], object]:
    """CPU milliseconds per call, after one warm-up call; and what the last call returned."""
    last = fn()
    out = []
    for _ in range(repeat):
        t = time.process_time()
        last = fn()
        out.append((time.process_time() - t) * 1e3)
    return out, last


def outcome(result: object) -> str:
    """What a timed call decided, in a few words (a benchmark that decided nothing says so)."""
    if isinstance(result, Placement):
        return f"placed on {len(result.racks)} racks"
    if isinstance(result, Unplaceable):
        return f"unplaceable ({result.reason})"
    if isinstance(result, ClusterState):
        return f"seq {result.seq}"
    if isinstance(result, list):
        return ", ".join(sorted({type(c).__name__ for c in result})) or "no proposal"
    if result is None:
        return "no plan"
    victims = getattr(result, "victims", None)
    return f"plan: {len(victims)} victims" if victims is not None else type(result).__name__


def _placement(state: ClusterState, nodes: int) -> Callable[[], object]:
    sizes = JobSpec(id="probe", nodes=nodes, slice_size=16).slice_sizes
    return lambda: find_placement(Capacity(state), sizes)


def _decide_place(state: ClusterState) -> Callable[[], object]:
    f = Folder(state)
    f.send(SubmitJob, job=JobSpec(id="probe", nodes=16))
    command = next(c for c in schedule(f.state) if isinstance(c, PlaceJob) and c.job == "probe")
    submitted, now = f.state, f.now

    def once() -> object:
        s = submitted
        for e in decide(s, command, now=now):
            s = evolve(s, e)
        return s

    return once


def _swap(state: ClusterState) -> Callable[[], object]:
    f = Folder(state)
    f.send(SubmitJob, job=JobSpec(id="probe", nodes=16, checkpoint_interval=timedelta(minutes=30)))
    place = next(c for c in schedule(f.state) if isinstance(c, PlaceJob) and c.job == "probe")
    f.send(PlaceJob, job="probe", slices=place.slices)
    report = ReportNodeHealth(
        id="probe-failed",
        cluster=state.cluster,
        actor="bench",
        node=place.slices[0].nodes[0],
        health=Health.FAILED,
        cause="bench",
    )
    events = decide(f.state, report, now=f.now)
    failed = f.state
    for e in events:
        failed = evolve(failed, e)
    policy, now = SpareSwap(), f.now
    return lambda: policy.propose(failed, events, now=now)


def _defrag(state: ClusterState) -> Callable[[], object]:
    assert state.at is not None
    return lambda: plan_defrag(state, "blocked", now=state.at)  # type: ignore[arg-type]


def measure(
    racks: tuple[int, ...], progress: Progress, *, repeat: int = 20
) -> list[dict[str, Any]]:
    """One row per (decision, racks): CPU ms p50 and p99."""
    from bench.queues import shared_cluster

    rows = []
    for r in racks:
        progress(f"scaling: building the {r}-rack clusters")
        fragmented = cluster(r, "fragmented")
        cases: list[tuple[str, Callable[[], object], int]] = [
            ("placement 16", _placement(fragmented, 16), repeat * 5),
            ("placement 512", _placement(fragmented, 512), repeat * 5),
            ("decide+evolve PlaceJob", _decide_place(fragmented), repeat * 5),
            ("spare swap", _swap(fragmented), repeat * 5),
            ("defrag plan", _defrag(blocked_by_topology(r)), repeat),
            ("scheduling cycle", _cycle(shared_cluster(r, fill=0.97)[1]), repeat),
        ]
        for name, fn, n in cases:
            progress(f"scaling: {name} on {r} racks")
            ms, last = cpu_ms(fn, n)
            rows.append(
                {
                    "decision": name,
                    "racks": r,
                    "outcome": outcome(last),
                    "runs": n,
                    "p50_ms": statistics.median(ms),
                    "p99_ms": pct(ms, 0.99),
                }
            )
    return rows


def _cycle(state: ClusterState) -> Callable[[], object]:
    return lambda: schedule(state)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Each decision's p99 against racks, log-log, with O(racks) drawn from its first point
    that decided something (an unplaceable verdict, a hollow marker, is cheap and says
    nothing about the growth)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    names = list(dict.fromkeys(r["decision"] for r in rows))
    for i, name in enumerate(names):
        mine = sorted((r for r in rows if r["decision"] == name), key=lambda r: r["racks"])
        xs, ys = [r["racks"] for r in mine], [max(r["p99_ms"], 1e-3) for r in mine]
        (line,) = ax.plot(xs, ys, marker="o", label=name)
        for r, y in zip(mine, ys, strict=True):
            if r["outcome"].startswith("unplaceable"):
                ax.plot(r["racks"], y, marker="o", color="white", markeredgecolor=line.get_color())
        base = next(
            (k for k, r in enumerate(mine) if not r["outcome"].startswith("unplaceable")), 0
        )
        ax.plot(
            xs[base:],
            [ys[base] * x / xs[base] for x in xs[base:]],
            linestyle=":",
            color=line.get_color(),
            linewidth=1,
            label="dotted: O(racks) from its first point" if i == 0 else None,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted({r["racks"] for r in rows}))
    ax.set_xticklabels([f"{x:,}" for x in sorted({r["racks"] for r in rows})])
    ax.set_xlabel("racks (18 nodes, 72 GPUs each); hollow: an unplaceable verdict")
    ax.set_ylabel("p99 CPU ms per decision")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from bench.__main__ import machine

    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    parser.add_argument("--racks", default=",".join(map(str, RACKS)))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--plot", type=Path, help="write the PNG here")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--replot", type=Path, help="only plot the rows of this --json file")
    args = parser.parse_args(argv)
    if args.replot:
        saved = json.loads(args.replot.read_text())
        title = f"rackplane: cost of one decision as racks grow\n{saved['machine']}"
        plot(saved["rows"], args.plot or args.replot.with_suffix(".png"), title)
        return 0
    racks = tuple(int(x) for x in args.racks.split(","))
    rows = measure(racks, lambda text: print(text, file=sys.stderr), repeat=args.repeat)
    print("| decision | racks | outcome | runs | p50 CPU ms | p99 CPU ms |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['decision']} | {r['racks']:,} | {r['outcome']} | {r['runs']} "
            f"| {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |"
        )
    stamp = f"{machine()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    if args.json:
        args.json.write_text(json.dumps({"machine": stamp, "rows": rows}, indent=2))
    if args.plot:
        plot(rows, args.plot, f"rackplane: cost of one decision as racks grow\n{stamp}")
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
