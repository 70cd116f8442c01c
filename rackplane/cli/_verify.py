"""`rackplane history verify`: the hash chains, each cluster's seqs, and (`--against-log`)
the store against the event log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackplane.cli._config import ConfigFile, settings
from rackplane.cli._history_common import DEFAULT_DB, Db, Json, busy, history, resolve_db
from rackplane.cli._render import console, errors, fail, print_json

if TYPE_CHECKING:
    from rackplane.history.against_log import ClusterDiff, LogIndex
    from rackplane.history.continuity import SeqReport
    from rackplane.history.verify import ChainReport
    from rackplane.streams.config import StreamConfig

AgainstLog = Annotated[
    str | None,
    typer.Option(
        "--against-log",
        metavar="BROKER",
        help="Also compare the stored events with the event log on this broker "
        "(kafka://host:port; security settings from the configuration).",
        show_default=False,
    ),
]
Prefix = Annotated[str | None, typer.Option(help="Topic prefix of the log (with --against-log).")]
Strict = Annotated[
    bool,
    typer.Option(
        "--strict", help="With --against-log: a store behind the log fails too (default: passes)."
    ),
]


def verify(
    db: Db = DEFAULT_DB,
    against_log: AgainstLog = None,
    prefix: Prefix = None,
    strict: Strict = False,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Check every table's hash chain and every cluster's seqs (1..N, each once); with
    --against-log, compare the stored events with the event log. Exit status 1 on a problem."""
    from rackplane.history.against_log import compare
    from rackplane.history.continuity import check_seqs
    from rackplane.history.verify import verify as check_chains

    path = resolve_db(db)
    config = (
        settings(config_file, broker=against_log, topic_prefix=prefix).stream_config()
        if against_log is not None
        else None
    )
    diffs: list[ClusterDiff] | None = None
    with history(path) as reader:
        chains = busy(f"verifying {path}", lambda: check_chains(reader))
        seqs = busy(f"checking the seqs of {path}", lambda: check_seqs(reader))
        if config is not None:
            index = _read_log(config)
            diffs = busy("comparing", lambda: compare(index, reader.event_digests()))
    ok = (
        all(r.ok for r in chains)
        and all(r.ok for r in seqs)
        and (diffs is None or all(d.ok(strict=strict) for d in diffs))
    )
    if json_out:
        out: dict[str, Any] = {
            "ok": ok,
            "tables": [_chain_json(r) for r in chains],
            "clusters": [r.as_json() for r in seqs],
        }
        if diffs is not None and config is not None:
            out["log"] = {
                "topic": config.topic("events"),
                "strict": strict,
                "records": index.records,
                "undecodable": index.undecodable,
                "clusters": [d.as_json(strict=strict) for d in diffs],
            }
        print_json(out)
    else:
        console.print(_chain_table(path, chains))
        console.print(_seq_table(seqs))
        for r in seqs:
            if not r.ok:
                console.print(f"[red]{r.line()}[/]", highlight=False)
        if diffs is not None and config is not None:
            _print_diffs(config.topic("events"), index, diffs, strict)
    if not ok:
        raise SystemExit(1)


def _read_log(config: StreamConfig) -> LogIndex:
    """The events topic read to its end, indexed, with a progress bar; or exit."""
    from rackplane.history.against_log import LogIndex
    from rackplane.streams.log_scan import ScanError, scan_to_end

    topic = config.topic("events")
    index = LogIndex(topic)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=errors, transient=True,
    ) as progress:  # fmt: skip
        task = progress.add_task(f"reading {topic}", total=None)

        def tick(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            asyncio.run(
                scan_to_end(
                    config.kafka_options(),
                    topic,
                    index.add,
                    read_committed=config.exactly_once,
                    fetch_wait_ms=max(config.fetch_wait_ms, 100),
                    progress=tick,
                )
            )
        except ScanError as err:
            fail(f"{config.broker}: {err}")
        except Exception as err:  # a broker that cannot be reached, said plainly
            fail(f"cannot read {topic} on {config.broker}: {type(err).__name__}: {err}")
    return index


def _chain_json(r: ChainReport) -> dict[str, Any]:
    return {"table": r.table, "rows": r.rows, "ok": r.ok, "problem": r.problem,
            "row_id": r.row_id, "row": r.row, "detail": r.detail}  # fmt: skip


def _chain_table(path: Path, reports: list[ChainReport]) -> Table:
    t = Table(title=f"Hash chains of {path}", title_justify="left", header_style="bold")
    for c in ("table", "rows", "verdict", "first bad row", "detail"):
        t.add_column(c, justify="right" if c == "rows" else "left")
    for r in reports:
        verdict = "[green]intact[/]" if r.ok else f"[red]{r.problem}[/]"
        where = "" if r.row_id is None else f"row_id {r.row_id} ({r.row})"
        t.add_row(r.table, f"{r.rows:,}", verdict, where, r.detail)
    return t


def _seq_table(reports: list[SeqReport]) -> Table:
    t = Table(title="Seqs per cluster", title_justify="left", header_style="bold")
    for c in ("cluster", "events", "last seq", "missing", "twice", "verdict"):
        t.add_column(c, justify="left" if c in ("cluster", "verdict") else "right")
    for r in reports:
        verdict = "[green]1..N, each once[/]" if r.ok else f"[red]{r.detail()}[/]"
        t.add_row(r.cluster, f"{r.events:,}", f"{r.last:,}", f"{r.missing:,}",
                  f"{r.duplicates:,}", verdict)  # fmt: skip
    if not reports:
        t.add_row("-", "0", "-", "-", "-", "no events")
    return t


def _print_diffs(topic: str, index: LogIndex, diffs: list[ClusterDiff], strict: bool) -> None:
    t = Table(
        title=f"Store against the log ({topic}: {index.records:,} records"
        + (f", {index.undecodable:,} undecodable" if index.undecodable else "")
        + ")",
        title_justify="left",
        header_style="bold",
    )
    cols = ("cluster", "in log", "stored", "behind", "missing", "extra", "different", "forks",
            "log gaps", "duplicates", "verdict")  # fmt: skip
    for c in cols:
        t.add_column(c, justify="left" if c in ("cluster", "verdict") else "right")
    for d in diffs:
        n = d.counts
        colour = "red" if not d.ok(strict=strict) else "yellow" if n["behind"] else "green"
        t.add_row(
            d.cluster, f"{d.in_log:,}", f"{d.stored:,}",
            *(f"{n[k]:,}" for k in ("behind", "missing", "extra", "different", "forks",
                                    "log_gaps")),
            f"{d.duplicates:,}", f"[{colour}]{d.verdict()}[/]",
        )  # fmt: skip
    console.print(t)
    for d in diffs:
        for kind, examples in d.examples.items():
            if kind == "behind" or not examples:
                continue
            more = d.counts[kind] - len(examples)
            for e in examples:
                console.print(f"[red]cluster {d.cluster}: {e}[/]", highlight=False)
            if more > 0:
                console.print(f"[red]cluster {d.cluster}: ... {more:,} more[/]", highlight=False)
        if d.before_log:
            errors.print(
                f"cluster {d.cluster}: {d.before_log:,} stored event(s) are older than the "
                "log's first (trimmed by retention)",
                highlight=False,
            )
    behind = [d for d in diffs if d.counts["behind"]]
    if behind and not strict:
        errors.print(
            "behind: the store lacks only the log's newest events (an audit agent that lags "
            "a running worker); --strict fails on it",
            highlight=False,
        )
