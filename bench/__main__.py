"""`python -m bench` (or `make bench`): run the benchmarks, print tables and markdown.

Placement, defrag, a shared cluster's scheduling cycle (`queues`), the streaming pipeline
(on an embedded Tansu), the console's cluster view
(`tui`), the history (DuckDB ingest and replay of 1M events), snapshots (encode, decode,
save and load of a cluster's state) and the rebuild of a partition after a restart (1M and
10M events, with a checkpoint and from offset 0), signed commands (the controller's
Ed25519 check per command) and whole CLI commands on a live `rackplane up` (`cli`: the read
commands and `submit`, each a process of its own) by default; the Kubernetes adapter on a
real kube-apiserver (`--only kube`, under `make bench-k8s`, which starts the test control
plane); Slurm alone against `rackplane slurm` on one job trace (`--only slurm`, under `make
bench-slurm`, which starts the Slurm test cluster); the simulator (`--only sim`, a simulated
year per row: minutes) and the cost of each decision at 128-4,096 racks (`--only scaling`,
`python -m bench.scaling --plot docs/scaling.png`) run on their own. Options: `--quick`
(small sizes, for a smoke run), `--json FILE` (raw rows), `--only NAME`, `--broker URL` (the
streaming and GPU Manager benchmarks on that broker; `make bench-kafka` runs the streaming
one on an Apache Kafka 4.x started for it, as `make test-kafka` does).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.placement import defrag_time, placement_latency

out = Console()
err = Console(stderr=True)


def machine() -> str:
    """A one-line description of where the numbers come from."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}"


def _keys(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for r in rows for k in r))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _table(title: str, rows: list[dict[str, Any]]) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    keys = _keys(rows)
    for k in keys:
        numeric = any(isinstance(r.get(k), int | float) for r in rows)
        t.add_column(k, justify="right" if numeric else "left")
    for r in rows:
        t.add_row(*(_cell(r.get(k)) for k in keys))
    return t


def _markdown(rows: list[dict[str, Any]]) -> str:
    keys = _keys(rows)
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r.get(k)) for k in keys) + " |")
    return "\n".join(lines)


def report(title: str, rows: list[dict[str, Any]], json_path: Path | None = None) -> None:
    """Print one benchmark's rows (machine line, table, markdown); write them as JSON if
    asked."""
    out.print(machine())
    out.print(_table(title, rows))
    out.print(_markdown(rows), markup=False, highlight=False)
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=2))


@contextlib.contextmanager
def _broker(url: str | None) -> Iterator[str]:
    """The broker the streaming benchmarks run on: `url`, or an embedded Tansu for the block."""
    if url is not None:
        yield url
        return
    from rackplane.streams import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--json", type=Path, help="write the raw rows here")
    parser.add_argument(
        "--broker",
        metavar="URL",
        help="run the streams, gpu and snapshots benchmarks on this broker (kafka://HOST:PORT; "
        "`make bench-kafka` starts an Apache Kafka for them) instead of an embedded Tansu",
    )
    parser.add_argument(
        "--up",
        choices=("tansu", "kafka"),
        default="tansu",
        help="the broker the cli benchmark's `rackplane up` starts (--tansu or --kafka)",
    )
    parser.add_argument(
        "--only",
        choices=[
            "placement",
            "defrag",
            "queues",
            "scaling",
            "sim",
            "streams",
            "fetchwait",
            "gpu",
            "tui",
            "history",
            "snapshots",
            "rebuild",
            "signatures",
            "kube",
            "slurm",
            "cli",
        ],
        help="one benchmark (kube, slurm: only this way, on the plane `make bench-k8s` or the "
        "cluster `make bench-slurm` starts)",
    )
    args = parser.parse_args(argv)
    if args.only == "scaling":  # minutes: the curve of docs/scaling.png
        from bench import scaling

        return scaling.main(["--racks", "128,512"] if args.quick else [])
    if args.only == "sim":
        from bench import sim

        return sim.main(["--quick"] if args.quick else [])
    racks = (128, 1024) if args.quick else (128, 1024, 4096)
    results: dict[str, Any] = {"machine": machine(), "date": datetime.now(UTC).isoformat()}
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err
    ) as progress:
        task = progress.add_task("starting", total=None)

        def say(text: str) -> None:
            progress.update(task, description=text)

        if args.only in (None, "placement"):
            results["placement"] = placement_latency(
                racks, ("empty", "half", "fragmented"), (16, 128, 512), 50, say
            )
        if args.only in (None, "defrag"):
            # 512 too: the cost per plan as racks grow (issue 21).
            defrag_racks = racks if args.quick else (128, 512, 1024, 4096)
            results["defrag"] = defrag_time(defrag_racks, 10, say)
        if args.only in (None, "queues"):
            from bench.queues import queue_cycle

            results["queues"] = queue_cycle(racks, 30, say)
        if args.only in (None, "streams"):
            import asyncio

            from bench.streams import run_all

            with _broker(args.broker) as url:
                results["streams"] = asyncio.run(run_all(url, say, quick=args.quick))
        if args.only == "fetchwait":  # minutes: only when asked for
            from bench import fetch_wait

            results["fetchwait"] = fetch_wait.run_all(say, quick=args.quick)
        if args.only in (None, "tui"):
            from bench.tui import refresh_after_event

            results["tui"] = refresh_after_event((128, 1024), 20 if args.quick else 100, say)
        if args.only in (None, "history"):
            from bench.history import BATCH
            from bench.history import run as history

            results["history"] = history(100_000 if args.quick else 1_000_000, BATCH, say)
        if args.only in (None, "snapshots"):
            import asyncio

            from bench import snapshots

            with _broker(args.broker) as url:
                results["snapshots"] = asyncio.run(snapshots.run_all(url, say, quick=args.quick))
        if args.only in (None, "rebuild"):
            import asyncio

            from bench import rebuild

            sizes = (100_000,) if args.quick else (1_000_000, 10_000_000)
            with _broker(args.broker) as url:
                results["rebuild"] = asyncio.run(rebuild.run_all(url, say, sizes=sizes))
        if args.only in (None, "signatures"):
            from bench import signatures

            results["signatures"] = signatures.run(2_000 if args.quick else 20_000, say)
            results["signed_log"] = signatures.log_run(2_000 if args.quick else 20_000, say)
        if args.only in (None, "cli"):  # starts its own `rackplane up` (`--up`)
            from bench import cli

            results["cli"] = cli.run_all(say, runs=2 if args.quick else 5, up=args.up)
        if args.only == "kube":  # needs the test control plane: `make bench-k8s`
            import asyncio

            from bench import kube

            kube_racks = 16 if args.quick else 128
            results["kube"] = asyncio.run(kube.run_all(say, racks=kube_racks))
            results["kube_plan"] = kube.plan_cost(racks, say)
        if args.only == "slurm":  # needs the Slurm test cluster: `make bench-slurm`
            from bench import slurm

            results["slurm"], results["slurm_failures"] = slurm.run_all(say, quick=args.quick)
        if args.only in (None, "gpu"):
            import asyncio

            from bench import gpu

            with _broker(args.broker) as url:
                results["gpu"] = asyncio.run(gpu.run_all(url, say, quick=args.quick))
    out.print(f"[bold]{results['machine']}[/] — {results['date']}")
    broker_name = args.broker or "embedded Tansu"
    for name, title in (
        ("placement", "Placement latency (ms)"),
        ("defrag", "Defrag plan (ms)"),
        ("queues", "Scheduling cycle, 1,000 waiting jobs in 50 queues (ms)"),
        ("streams", f"Streaming pipeline ({broker_name})"),
        ("fetchwait", "Fetch wait on Tansu: latency at 500 commands/s, idle CPU"),
        ("tui", "Console: cluster view refresh after one event (ms)"),
        ("history", "History: DuckDB ingest and replay"),
        ("gpu", f"GPU Manager: telemetry classified ({broker_name})"),
        ("snapshots", f"Snapshots: encode, decode, save and load ({broker_name})"),
        ("rebuild", f"Rebuild of a partition after a restart ({broker_name})"),
        ("signatures", "Signed commands: the controller's check, a sender's signing"),
        ("signed_log", "Signed log: signing each event, checking it, a rebuild's fold"),
        ("cli", f"CLI commands, whole processes, on a live 128-rack rackplane up --{args.up} (s)"),
        ("kube", "rackplane kube on a real kube-apiserver (kwok nodes)"),
        ("kube_plan", "rackplane kube: one plan of the pure cycle (no server)"),
        ("slurm", "Slurm 22.05 alone (--switches) and rackplane slurm: one job trace each"),
        ("slurm_failures", "Slurm and rackplane: the jobs a node failure hit"),
    ):
        if name in results:
            out.print(_table(title, results[name]))
            out.print(_markdown(results[name]), markup=False, highlight=False)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
