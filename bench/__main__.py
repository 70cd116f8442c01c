"""`python -m bench` (or `make bench`): run the benchmarks, print tables and markdown.

Options: `--quick` (small sizes, for a smoke run), `--json FILE` (raw rows), `--only NAME`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
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


def _table(title: str, rows: list[dict[str, Any]]) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    for k in rows[0]:
        t.add_column(k, justify="right" if isinstance(rows[0][k], int | float) else "left")
    for r in rows:
        t.add_row(*(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r.values()))
    return t


def _markdown(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        cells = (f"{r[k]:.2f}" if isinstance(r[k], float) else str(r[k]) for k in keys)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--json", type=Path, help="write the raw rows here")
    parser.add_argument(
        "--only", choices=["placement", "defrag", "sim", "streams"], help="one benchmark"
    )
    args = parser.parse_args(argv)
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
            results["defrag"] = defrag_time(racks, 10, say)
    out.print(f"[bold]{results['machine']}[/] — {results['date']}")
    for name, title in (("placement", "Placement latency (ms)"), ("defrag", "Defrag plan (ms)")):
        if name in results:
            out.print(_table(title, results[name]))
            out.print(_markdown(results[name]), markup=False, highlight=False)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
