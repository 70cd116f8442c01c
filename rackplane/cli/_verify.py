"""`rackplane history verify`: the hash chains, each cluster's seqs, and (`--against-log`)
the store against the event log."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackplane._errtext import named
from rackplane.cli._config import ConfigFile, settings
from rackplane.cli._history_common import DEFAULT_DB, Db, Json, busy, history, resolve_db
from rackplane.cli._render import console, errors, fail, print_json

if TYPE_CHECKING:
    from rackplane.history.against_log import ClusterDiff, LogIndex
    from rackplane.history.continuity import SeqReport
    from rackplane.history.signatures import SignatureReport
    from rackplane.history.verify import ChainReport
    from rackplane.logtrust import LogTrust
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
LogKeys = Annotated[
    list[str] | None,
    typer.Option(
        "--log-key",
        metavar="KEY",
        help="A worker's public key (base64, or a `keys show --json` file) the stored events "
        "must be signed by; default: the configuration's worker_key_file and log_keys.",
        show_default=False,
    ),
]
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
    log_key: LogKeys = None,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Check every table's hash chain, every cluster's seqs (1..N, each once) and, with a log
    key, every stored event's signature; with --against-log, compare the stored events with
    the event log. Exit status 1 on a problem."""
    from rackplane.history.against_log import compare
    from rackplane.history.continuity import check_seqs
    from rackplane.history.signatures import check_signatures
    from rackplane.history.verify import verify as check_chains

    path = resolve_db(db)
    s = settings(config_file, broker=against_log, topic_prefix=prefix)
    config = s.stream_config() if against_log is not None else None
    trust = _trust(log_key, s.worker_key_file, s.log_keys, s.unsigned_log_prefix)
    diffs: list[ClusterDiff] | None = None
    signatures: SignatureReport | None = None
    with history(path) as reader:
        chains = busy(f"verifying {path}", lambda: check_chains(reader))
        seqs = busy(f"checking the seqs of {path}", lambda: check_seqs(reader))
        if trust is not None:
            signatures = busy(
                f"checking the signatures of {path}", lambda: check_signatures(reader, trust)
            )
        if config is not None:
            index = _read_log(config, trust)
            diffs = busy("comparing", lambda: compare(index, reader.event_digests()))
    ok = (
        all(r.ok for r in chains)
        and all(r.ok for r in seqs)
        and (signatures is None or signatures.ok)
        and (diffs is None or (all(d.ok(strict=strict) for d in diffs) and not index.forged))
    )
    if json_out:
        out: dict[str, Any] = {
            "ok": ok,
            "tables": [_chain_json(r) for r in chains],
            "clusters": [r.as_json() for r in seqs],
            "signatures": signatures.as_json() if signatures is not None else None,
        }
        if diffs is not None and config is not None:
            out["log"] = {
                "topic": config.topic("events"),
                "strict": strict,
                "records": index.records,
                "undecodable": index.undecodable,
                "forged": index.forged,
                "forged_examples": index.forged_examples,
                "clusters": [d.as_json(strict=strict) for d in diffs],
            }
        print_json(out)
    else:
        console.print(_chain_table(path, chains))
        console.print(_seq_table(seqs))
        for r in seqs:
            if not r.ok:
                console.print(f"[red]{r.line()}[/]", highlight=False)
        _print_signatures(signatures)
        if diffs is not None and config is not None:
            _print_diffs(config.topic("events"), index, diffs, strict)
    if not ok:
        raise SystemExit(1)


def _trust(
    given: list[str] | None, key_file: Path | None, log_keys: tuple[str, ...], prefix: bool
) -> LogTrust | None:
    """The log keys the stored events are checked against: `--log-key`, else the
    configuration's (the worker key file's public part and `log_keys`); None: none."""
    from rackplane.keyfiles import KeyFileError, load_key
    from rackplane.logtrust import LogTrust, LogTrustError

    keys = [_public_key(k) for k in given or ()]
    if not keys:
        if key_file is not None:
            try:
                keys.append(load_key(key_file).public_key)
            except KeyFileError as err:
                fail(str(err))
        keys += log_keys
    if not keys:
        return None
    try:
        return LogTrust.of(keys, unsigned_prefix=prefix)
    except LogTrustError as err:
        fail(str(err))


def _public_key(text: str) -> str:
    """A `--log-key`: base64 itself, or the path of a `keys show --json` file."""
    path = Path(text)
    if not path.is_file():
        return text
    try:
        return str(json.loads(path.read_text())["public_key"])
    except UnicodeDecodeError as err:
        fail(f"{path}: not a public key: expected UTF-8 text (byte {err.start} cannot be decoded)")
    except (KeyError, TypeError):  # JSON, but no {"public_key": ...} object
        fail(f"{path}: not a public key (`rackplane keys show --json`): no public_key field")
    except (OSError, ValueError) as err:
        fail(f"{path}: not a public key (`rackplane keys show --json`): {err}")


def _print_signatures(report: SignatureReport | None) -> None:
    if report is None:
        errors.print(
            "signatures: not checked (no log key: --log-key, or worker_key_file / log_keys in "
            "the configuration); the hash chains alone do not stop whoever can rewrite the file",
            highlight=False,
        )
        return
    if report.ok:
        console.print(
            f"[green]signatures: {report.signed:,} of {report.events:,} events signed by a "
            "trusted log key[/]",
            highlight=False,
        )
        return
    console.print(
        f"[red]signatures: {report.refused:,} of {report.events:,} events not written by a "
        "controller[/]",
        highlight=False,
    )
    for e in report.examples:
        console.print(f"[red]{e}[/]", highlight=False)


def _read_log(config: StreamConfig, trust: LogTrust | None) -> LogIndex:
    """The events topic read to its end, indexed, with a progress bar; or exit."""
    from rackplane.history.against_log import LogIndex
    from rackplane.streams.log_scan import ScanError, scan_to_end

    topic = config.topic("events")
    index = LogIndex(topic, trust=trust)
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
            fail(f"cannot read {topic} on {config.broker}: {named(err)}")
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
        + (f", {index.forged:,} forged" if index.forged else "")
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
    for e in index.forged_examples:
        console.print(f"[red]{e}[/]", highlight=False)
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
