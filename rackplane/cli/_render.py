"""Rich rendering shared by commands: occupancy tables, errors, JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import TypeAdapter, ValidationError
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from rackplane.models import RackHealth, describe_error

if TYPE_CHECKING:  # the projections cost ~30 ms to import; a client command needs none
    from rackplane.projections import ClusterSummary, RackOccupancy

console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an error for the user (no traceback) and exit."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise SystemExit(code)


def message_of(err: Exception) -> str:
    """`err` for a user: a `ValidationError` as one line through `describe_error` (which
    names the culprit character), anything else as its text."""
    return describe_error(err) if isinstance(err, ValidationError) else str(err)


def checked(kind: Any, value: str, option: str) -> str:
    """`value` of a command-line option valid as `kind` (`NodeId`, `Actor`...), or a one-line
    error naming the option: "--node: contains a space (U+0020) at position 3 (...)"."""
    try:
        TypeAdapter(kind).validate_python(value)
    except ValidationError as err:
        fail(f"{option}: {describe_error(err).removeprefix('message: ')}")
    return value


def log_to_stderr(log_level: str) -> None:
    """An adapter's logging: `log_level` (debug, info, warning, error) to stderr, one line a
    record; a bad level is a one-line CLI error."""
    import logging

    level = logging.getLevelName(log_level.upper())
    if not isinstance(level, int):
        fail(f"--log-level: expected debug, info, warning or error, not {log_level!r}")
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s", force=True
    )


_RACK_MARK: dict[RackHealth, tuple[str, str] | None] = {
    RackHealth.HEALTHY: None,
    RackHealth.DEGRADED: (" (degraded)", "dark_orange"),
    RackHealth.FAILED: (" (rack fault)", "red"),
}
"""What follows a rack's id in the racks table."""


def print_json(data: Any) -> None:
    """JSON on stdout, nothing else (for scripts)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


LONG_LIST = 40
"""Rows beyond which `print_list` prints plain columns: Rich lays a table out at ~1.5-2 ms a
row of 8-10 columns (it measures, wraps and crops every cell: the 120 jobs of the 128-rack
demo took 190-225 ms of CPU, a read command's fifth), plain columns take ~0.03 ms a row."""

Cell = str | Text
"""A cell of `print_list`: plain text (never read as markup), or styled `Text`."""


def print_list(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    *,
    right: Collection[str] = (),
) -> None:
    """Print `rows` under `columns`, those in `right` aligned right: a Rich table, or plain
    aligned columns under the title and a header line (styles kept) when there are more
    than `LONG_LIST` rows."""
    if len(rows) <= LONG_LIST:
        t = Table(title=title, title_justify="left", header_style="bold")
        for name in columns:
            t.add_column(name, justify="right" if name in right else "left")
        for row in rows:
            t.add_row(*(escape(cell) if isinstance(cell, str) else cell for cell in row))
        console.print(t)
        return
    widths = [
        max(cell_len(name), *(_width(row[i]) for row in rows)) for i, name in enumerate(columns)
    ]
    if all(isinstance(cell, str) for row in rows for cell in row):
        # Plain strings, one str a line: ~5x cheaper than the styled lines below (7,000 rows
        # of 10 columns: 0.13 s of CPU against 0.59 s), for the longest lists (jobs).

        def line(cells: Sequence[Any]) -> str:
            padded = (
                " " * (w - cell_len(c)) + c if name in right else c + " " * (w - cell_len(c))
                for name, c, w in zip(columns, cells, widths, strict=True)
            )
            return "  ".join(padded).rstrip()

        console.out("\n".join([title, line(columns), *map(line, rows)]), highlight=False)
        return
    styled = [Text(title)]
    for cells in (columns, *rows):
        text = Text()
        for name, cell, w in zip(columns, cells, widths, strict=True):
            gap = " " * (w - _width(cell))
            for part in (gap, cell) if name in right else (cell, gap):
                text.append(part)
            text.append("  ")
        text.rstrip()
        styled.append(text)
    console.print(Text("\n").join(styled), soft_wrap=True, highlight=False)


def _width(cell: Cell) -> int:
    return cell_len(cell) if isinstance(cell, str) else cell.cell_len


OCCUPANCY_COLUMNS = ("rack", "pod", "alloc", "free", "spare", "failed", "unavail", "jobs")
OCCUPANCY_RIGHT = frozenset({"alloc", "free", "spare", "failed", "unavail"})


def occupancy_cells(r: RackOccupancy) -> list[Cell]:
    """One rack's row of the occupancy table (`OCCUPANCY_COLUMNS`): a rack fault named after
    its id, no spare left in yellow, a failed node in red."""
    jobs = ", ".join(r.jobs[:4]) + (f" +{len(r.jobs) - 4}" if len(r.jobs) > 4 else "")
    mark = _RACK_MARK[r.health]
    return [
        Text.assemble(r.rack, mark) if mark else r.rack,
        r.pod,
        str(r.allocated),
        str(r.free),
        _warn(r.spare, 0),
        _warn(r.failed, 1, bad=True),
        str(r.unavailable),
        jobs,
    ]


def occupancy_table(rows: list[RackOccupancy], title: str = "Rack occupancy") -> Table:
    """One row per rack: allocated / free / spare / failed / unavailable and its jobs."""
    t = Table(title=title, title_justify="left", header_style="bold")
    for name in OCCUPANCY_COLUMNS:
        t.add_column(name, justify="right" if name in OCCUPANCY_RIGHT else "left")
    for r in rows:
        t.add_row(*(escape(c) if isinstance(c, str) else c for c in occupancy_cells(r)))
    return t


def pod_table(rows: list[RackOccupancy]) -> Table:
    """Occupancy summed per IB pod."""
    t = Table(title="Occupancy by pod", title_justify="left", header_style="bold")
    for name in ("pod", "racks", "full", "empty", "alloc", "free", "spare", "failed"):
        t.add_column(name, justify="left" if name == "pod" else "right")
    pods: dict[str, list[RackOccupancy]] = {}
    for r in rows:
        pods.setdefault(r.pod, []).append(r)
    for pod, rs in pods.items():
        t.add_row(
            pod,
            str(len(rs)),
            str(sum(1 for r in rs if r.free == 0)),
            str(sum(1 for r in rs if r.allocated == 0)),
            str(sum(r.allocated for r in rs)),
            str(sum(r.free for r in rs)),
            str(sum(r.spare for r in rs)),
            str(sum(r.failed for r in rs)),
        )
    return t


def summary_table(s: ClusterSummary) -> Table:
    """The cluster's totals, two columns."""
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    rows = [
        ("racks", s.racks),
        ("nodes", s.nodes),
        ("GPUs", s.gpus),
        ("allocated nodes", s.allocated),
        ("free nodes", s.free),
        ("spare nodes", s.spare),
        ("failed nodes", s.failed),
        ("racks full / empty", f"{s.racks_full} / {s.racks_empty}"),
        ("jobs running / placed", f"{s.jobs_running} / {s.jobs_placed}"),
        ("jobs queued (blocked)", f"{s.jobs_queued} ({s.jobs_blocked})"),
        ("jobs finished", s.jobs_finished),
        ("events", s.seq),
    ]
    for k, v in rows:
        t.add_row(k, f"{v:,}" if isinstance(v, int) else str(v))
    return t


def _warn(value: int, threshold: int, *, bad: bool = False) -> Cell:
    if bad and value >= threshold:
        return Text(str(value), style="red")
    if not bad and value <= threshold:
        return Text(str(value), style="yellow")
    return str(value)
