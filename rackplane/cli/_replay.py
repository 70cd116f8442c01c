"""`rackplane replay`: the exact cluster state at a seq or a time; what-if replays."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackplane.cli._history_common import (
    DEFAULT_DB,
    ClusterOpt,
    Db,
    Json,
    busy,
    history,
    jsonable,
    parse_time,
    pick_cluster,
)
from rackplane.cli._render import console, errors, fail, occupancy_table, print_json, summary_table


def register(app: typer.Typer) -> None:
    """Add `replay` to the CLI."""
    app.command()(replay)


def replay(
    db: Db = DEFAULT_DB,
    at: Annotated[str | None, typer.Option(help="Replay up to this time (ISO 8601).")] = None,
    seq: Annotated[int | None, typer.Option(help="Replay up to this event seq.")] = None,
    what_if: Annotated[
        str | None,
        typer.Option(
            "--what-if",
            help="Re-run the recorded inputs: policy=naive|tas|...,slice_size=18,spares=0",
        ),
    ] = None,
    cluster: ClusterOpt = None,
    json_out: Json = False,
) -> None:
    """Rebuild the cluster state at a point of its history, or replay it under another policy."""
    if what_if is None and (at is None) == (seq is None):
        fail("give exactly one of --at TIME or --seq N (or --what-if SPEC)")
    if seq is not None and seq < 0:
        fail("--seq must be >= 0")
    upto_at = parse_time(at) if at is not None else None
    from rackplane.history import state_at

    with history(db) as reader:
        name = pick_cluster(reader, cluster)
        events = busy(
            f"reading {name} from {db}",
            lambda: reader.events(name, upto_seq=seq, upto_at=upto_at),
        )
    if what_if is not None:
        _what_if(events, what_if, json_out)
        return
    if not events:
        fail(f"no event of {name} at or before the point asked for")
    from rackplane.projections import EventGap

    try:
        state = busy(
            f"folding {len(events):,} events", lambda: state_at(events, seq=seq, at=upto_at)
        )
    except EventGap as err:  # the reader refuses a gap first; this is the fold's own check
        fail(f"{db}: {err}")
    _print_state(state, json_out)


def _print_state(state: Any, json_out: bool) -> None:
    from rackplane.projections import cluster_summary, rack_occupancy, state_digest

    rows = rack_occupancy(state)
    summary = cluster_summary(state, rows)
    jobs = sorted(state.jobs.values(), key=lambda j: j.order)
    if json_out:
        print_json(
            {
                "cluster": state.cluster,
                "seq": state.seq,
                "at": state.at.isoformat() if state.at else None,
                "digest": state_digest(state),
                "summary": jsonable(summary),
                "racks": [jsonable(r) for r in rows],
                "jobs": [
                    {
                        "job": j.id,
                        "status": j.status.value,
                        "nodes": len(j.nodes),
                        "racks": sorted({r for s in j.slices for r in s.racks}),
                    }
                    for j in jobs
                ],
            }
        )
        return
    console.print(f"[bold]{state.cluster}[/] at seq {state.seq:,} ({state.at})")
    console.print(summary_table(summary))
    console.print(occupancy_table(rows))
    t = Table(title="Jobs", title_justify="left", header_style="bold")
    for c in ("job", "status", "nodes", "racks"):
        t.add_column(c, justify="right" if c == "nodes" else "left")
    for j in jobs:
        racks = sorted({r for s in j.slices for r in s.racks})
        t.add_row(j.id, j.status.value, str(len(j.nodes)), ", ".join(racks))
    console.print(t)


def _what_if(events: list[Any], spec: str, json_out: bool) -> None:
    from rackplane.history.whatif import parse_what_if, what_if

    try:
        change = parse_what_if(spec)
    except ValueError as err:
        fail(str(err))
    if not events:
        fail("the history holds no events to replay")
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
        console=errors, transient=True,
    ) as progress:  # fmt: skip
        tasks: dict[str, Any] = {}

        def tick(name: str, done: float) -> None:
            if name not in tasks:
                tasks[name] = progress.add_task(f"simulating {name}", total=1.0)
            progress.update(tasks[name], completed=done)

        from rackplane.projections import EventGap

        try:
            report = what_if(events, change, progress=tick)
        except (ValueError, EventGap) as err:
            fail(str(err))
    if json_out:
        print_json(report.as_json())
        return
    t = Table(title=f"What-if: {report.what_if}", title_justify="left", header_style="bold")
    t.add_column("metric")
    t.add_column("recorded (from the log)", justify="right")
    t.add_column(f"re-run: {report.recorded_policy}", justify="right")
    t.add_column(f"what-if: {report.what_if}", justify="right")
    for metric, recorded, rerun, alt in report.rows():
        t.add_row(metric, _fmt(recorded), _fmt(rerun), _fmt(alt))
    console.print(t)
    if report.rerun.queues or report.alternative.queues:
        from rackplane.cli._sim import queues_table

        for m, label in (
            (report.rerun, f"re-run: {report.recorded_policy}"),
            (report.alternative, f"what-if: {report.what_if}"),
        ):
            if m.queues:
                console.print(queues_table(m, label))
    errors.print(
        "recorded: counted from the events; re-run: the recorded inputs simulated with the "
        "recorded policy; what-if: the same inputs under the change"
    )


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
    return str(value)
