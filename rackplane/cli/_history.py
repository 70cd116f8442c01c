"""`rackplane history ...`: verify (`_verify.py`), timelines of a job, node or rack, the
cluster's statistics, and the Parquet export."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rackplane.cli._history_common import (
    DEFAULT_DB,
    ClusterOpt,
    Db,
    Json,
    busy,
    history,
    pick_cluster,
)
from rackplane.cli._render import console, errors, fail, print_json
from rackplane.cli._verify import verify

history_app = typer.Typer(
    help="Audit history: verify it, explain a job, node or rack, statistics, export.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add the `history` group to the CLI."""
    history_app.command()(verify)
    app.add_typer(history_app, name="history")


def _timeline(
    db: Path | None, cluster: str | None, subject: str, kind: str, json_out: bool
) -> None:
    from rackplane.timeline import timeline

    with history(db) as reader:
        name = pick_cluster(reader, cluster)
        events = busy(f"reading {name}", lambda: reader.events(name, mentioning=subject))
    entries = timeline(events, subject)
    if not entries:
        fail(f"no event of {name} mentions {kind} {subject!r}")
    if json_out:
        print_json({"cluster": name, kind: subject, "timeline": [e.as_json() for e in entries]})
        return
    t = Table(title=f"{kind} {subject} ({name})", title_justify="left", header_style="bold")
    for c in ("seq", "at", "event", "actor", "what happened"):
        t.add_column(c, justify="right" if c == "seq" else "left", overflow="fold")
    for e in entries:
        at = e.at.strftime("%Y-%m-%d %H:%M:%S")
        t.add_row(str(e.seq), at, e.type, e.actor, escape(e.text))  # text is data, not markup
    console.print(t)


@history_app.command()
def job(
    job_id: Annotated[str, typer.Argument(metavar="JOB")],
    db: Db = DEFAULT_DB,
    cluster: ClusterOpt = None,
    json_out: Json = False,
) -> None:
    """A job's timeline: submitted, blocked and why, placed where and why, swaps, migrations,
    degradations, preemptions with their cost, completion."""
    _timeline(db, cluster, job_id, "job", json_out)


@history_app.command()
def node(
    node_id: Annotated[str, typer.Argument(metavar="NODE")],
    db: Db = DEFAULT_DB,
    cluster: ClusterOpt = None,
    json_out: Json = False,
) -> None:
    """A node's timeline: failures, repairs, cordons, the jobs it served and swaps."""
    _timeline(db, cluster, node_id, "node", json_out)


@history_app.command()
def rack(
    rack_id: Annotated[str, typer.Argument(metavar="RACK")],
    db: Db = DEFAULT_DB,
    cluster: ClusterOpt = None,
    json_out: Json = False,
) -> None:
    """A rack's timeline: placements, failures of its nodes, swaps, rack faults, defrag."""
    _timeline(db, cluster, rack_id, "rack", json_out)


@history_app.command()
def stats(db: Db = DEFAULT_DB, cluster: ClusterOpt = None, json_out: Json = False) -> None:
    """Interruptions per rack and node, MTBI, spare-pool exhaustion, blocked time by reason,
    GPU-hours lost, defrag plans and their cost."""
    from rackplane.history.stats import history_stats

    with history(db) as reader:
        name = pick_cluster(reader, cluster)
        events = busy(f"reading {name}", lambda: reader.events(name))
    s = history_stats(name, events)
    data = s.as_json()
    if json_out:
        print_json(data)
        return
    t = Table(title=f"History of {name}", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    rows = [
        ("events", f"{s.events:,}"),
        ("span", f"{s.span_days:,.2f} days ({data['first_at']} .. {data['last_at']})"),
        ("node interruptions", f"{sum(s.node_interruptions.values()):,}"),
        ("rack interruptions", f"{sum(s.rack_interruptions.values()):,}"),
        ("node MTBI (estimated)", _days(s.node_mtbi_days)),
        ("rack MTBI (estimated)", _days(s.rack_mtbi_days)),
        ("spare-pool exhaustions", f"{len(s.spare_exhaustions):,}"),
        ("job-hours blocked by topology", f"{s.blocked_hours['topology']:,.1f}"),
        ("job-hours blocked by capacity", f"{s.blocked_hours['capacity']:,.1f}"),
        *((f"GPU-h lost: {k}", f"{v:,.1f}") for k, v in s.lost_gpu_hours.items()),
        ("defrag plans", f"{len(s.defrag_plans):,}"),
        ("defrag cost (GPU-h)", f"{data['defrag_cost_gpu_hours']:,.1f}"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)
    for title, counts in (("racks", s.rack_interruptions), ("nodes", s.node_interruptions)):
        top = Table(title=f"Most interrupted {title}", title_justify="left", header_style="bold")
        top.add_column(title[:-1])
        top.add_column("interruptions", justify="right")
        for name, n in counts.most_common(10):
            top.add_row(name, str(n))
        if counts:
            console.print(top)


def _days(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} days"


@history_app.command()
def export(
    parquet: Annotated[Path, typer.Option("--parquet", help="Directory to write (new or empty).")],
    db: Annotated[
        Path | None,
        typer.Option("--db", help="The DuckDB history file (default: the history_db setting)."),
    ] = DEFAULT_DB,
    json_out: Json = False,
) -> None:
    """Export the history to Parquet, partitioned by day (replay and history read it too)."""
    from rackplane.history import HistoryError
    from rackplane.history.export import export_parquet

    with history(db) as reader:
        try:
            counts = busy(f"exporting to {parquet}", lambda: export_parquet(reader, parquet))
        except HistoryError as err:
            fail(str(err))
        except OSError as err:
            fail(f"--parquet: cannot write {parquet}: {err.strerror or err}")
    if json_out:
        print_json({"directory": str(parquet), "rows": counts})
    else:
        errors.print(f"exported {', '.join(f'{v:,} {k}' for k, v in counts.items())} to {parquet}")
