"""`open_history(path)`: read a history, from the DuckDB file or from a Parquet export.

Both sources look the same to the reader: a DuckDB file is opened read-only; a Parquet
directory (`export_parquet`) is mounted as views in an in-memory DuckDB. Every query below
runs on either. Messages come back typed (the pydantic models), decoded from `payload`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import duckdb

from rackplane._gc import cycle_collection_paused
from rackplane.history._schema import TABLES, TYPED_CHECK, parsed
from rackplane.history.errors import HistoryError, HistoryGap
from rackplane.history.sink import reading_copy
from rackplane.models import COMMANDS, EVENTS, REJECTIONS, Command, Event, Rejection

_NOT_HISTORY = "is neither a rackplane DuckDB history nor a Parquet export directory"


def open_history(path: str | Path) -> HistoryReader:
    """Open a history for reading.

    Args:
        path: a DuckDB file written by `DuckDBAuditSink`, or a directory written by
            `rackplane history export --parquet`.

    Raises:
        HistoryError: the path is missing, locked by a writer, or not a history.
    """
    p = Path(path)
    if not p.exists():
        raise HistoryError(f"{p}: no such file or directory")
    if p.is_dir():
        return HistoryReader(_mount_parquet(p), p)
    try:
        con = duckdb.connect(str(p), read_only=True)
    except duckdb.Error as err:
        text = str(err)
        if "lock" not in text.lower():
            raise HistoryError(f"{p} {_NOT_HISTORY}: {text}") from err
        copy = reading_copy(p)
        if not copy.exists():
            raise HistoryError(
                f"{p} is held by a writer (a recorder or a worker) that has published no "
                f"reading copy ({copy.name}) yet; try again in a few seconds, or stop the "
                "writer"
            ) from err
        reader = open_history(copy)
        at = datetime.fromtimestamp(copy.stat().st_mtime, UTC)
        reader.note = (
            f"{p} is being recorded: reading its copy of {at:%Y-%m-%d %H:%M:%S} UTC ({copy.name})"
        )
        return reader
    have = {
        r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    }
    missing = [t for t in TABLES if t not in have]
    if missing:
        con.close()
        raise HistoryError(f"{p} {_NOT_HISTORY} (no tables {', '.join(missing)})")
    return HistoryReader(con, p)


def _mount_parquet(directory: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for name in (*TABLES, "chain_heads"):
        files = sorted((directory / name).rglob("*.parquet"))
        if not files:
            con.close()
            raise HistoryError(f"{directory} {_NOT_HISTORY} (no {name}/*.parquet in it)")
        listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
        options = ", hive_partitioning = true, union_by_name = true"
        select = "* EXCLUDE (day)" if name != "chain_heads" else "*"
        try:
            con.execute(
                f"CREATE VIEW {name} AS SELECT {select} FROM read_parquet([{listed}]"
                f"{options if name != 'chain_heads' else ''})"
            )
        except duckdb.Error as err:
            con.close()
            raise HistoryError(f"{directory}: cannot read {name}: {err}") from err
    return con


class HistoryReader:
    """Typed reads of one history (see `open_history`). Usable as a context manager."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path) -> None:
        self.con = con
        self.path = path
        self.note = ""
        """Set when what is read is not the file asked for (its writer's reading copy)."""

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.con.execute(sql, list(params)).fetchall()
        except duckdb.Error as err:
            raise HistoryError(f"{self.path}: {err}") from err

    def clusters(self) -> list[str]:
        """Clusters with at least one recorded event, sorted."""
        return [r[0] for r in self._rows("SELECT DISTINCT cluster FROM events ORDER BY 1")]

    def events(
        self,
        cluster: str,
        *,
        upto_seq: int | None = None,
        upto_at: datetime | None = None,
        mentioning: str | None = None,
    ) -> list[Event]:
        """Events of `cluster` in seq order, up to a seq and/or a time (both inclusive);
        `mentioning`: only events whose payload names this id (a job, node or rack).

        Raises:
            HistoryGap: the cluster's stored seqs up to the bounds are not 1..N (a seq is
                missing or stored twice): whatever is read from them would lie.
        """
        self._check_gapless(cluster, upto_seq, upto_at)
        sql = "SELECT payload FROM events WHERE cluster = ?"
        params: list[Any] = [cluster]
        if upto_seq is not None:
            sql += " AND seq <= ?"
            params.append(upto_seq)
        if upto_at is not None:
            sql += ' AND "at" <= ?'
            params.append(upto_at)
        if mentioning is not None:
            sql += " AND contains(payload, ?)"
            params.append(f'"{mentioning}"')
        rows = self._rows(sql + " ORDER BY seq", params)
        with cycle_collection_paused():
            return [EVENTS.validate_json(r[0]) for r in rows]

    def _check_gapless(self, cluster: str, upto_seq: int | None, upto_at: datetime | None) -> None:
        """Raise `HistoryGap` unless every event a read up to these bounds needs is stored:
        seqs 1..N where N is the bound's seq, or, for a time, the seq after the last event
        read (a missing event there may have happened before the time)."""
        bound = self._rows("SELECT max(seq) FROM events WHERE cluster = ?", [cluster])[0][0]
        if bound is None:
            return
        if upto_seq is not None:
            bound = min(bound, upto_seq)
        if upto_at is not None:
            read = self._rows(
                'SELECT coalesce(max(seq), 0) FROM events WHERE cluster = ? AND "at" <= ?',
                [cluster, upto_at],
            )[0][0]
            after = self.next_seq(cluster, read)
            bound = min(bound, read if after is None else after)
        if bound < 1:
            return
        counts = self.seq_counts(cluster, upto_seq=bound)
        if counts and counts[0][1] == counts[0][2] == bound:  # 1..bound, each once: the usual
            return
        from rackplane.history.continuity import seq_report

        report = seq_report(self, cluster, upto_seq=bound)
        assert report.seq is not None
        raise HistoryGap(
            f"{self.path}: {report.line()}: a gap in the history, nothing folds over it "
            "(`rackplane history verify` checks every cluster)",
            cluster=cluster,
            seq=report.seq,
        )

    def seq_counts(
        self, cluster: str | None = None, *, upto_seq: int | None = None
    ) -> list[tuple[str, int, int, int, int]]:
        """Per cluster with events (or only `cluster`), sorted: (cluster, rows, distinct
        seqs, first seq, last seq), counting the seqs up to `upto_seq` if given."""
        where: list[str] = []
        params: list[Any] = []
        if cluster is not None:
            where.append("cluster = ?")
            params.append(cluster)
        if upto_seq is not None:
            where.append("seq <= ?")
            params.append(upto_seq)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        return self._rows(
            "SELECT cluster, count(*), count(DISTINCT seq), min(seq), max(seq) FROM events"
            f"{clause} GROUP BY cluster ORDER BY cluster",
            params,
        )

    def first_seq_break(
        self, cluster: str, *, upto_seq: int | None = None
    ) -> tuple[int | None, int] | None:
        """The first place where `cluster`'s seqs stop being 1, 2, 3...: (the stored seq
        before it or None, the seq stored there); None when there is none up to `upto_seq`.
        Equal numbers are a seq stored twice; a jump is missing seqs."""
        bound = "" if upto_seq is None else " AND seq <= ?"
        params: list[Any] = [cluster] if upto_seq is None else [cluster, upto_seq]
        rows = self._rows(
            "SELECT prev, seq FROM (SELECT seq, lag(seq) OVER (ORDER BY seq) AS prev "
            f"FROM events WHERE cluster = ?{bound}) "
            "WHERE seq IS DISTINCT FROM coalesce(prev, 0) + 1 ORDER BY seq LIMIT 1",
            params,
        )
        return (rows[0][0], rows[0][1]) if rows else None

    def next_seq(self, cluster: str, after: int) -> int | None:
        """The lowest seq of `cluster` stored above `after`."""
        return self._rows(  # type: ignore[no-any-return]
            "SELECT min(seq) FROM events WHERE cluster = ? AND seq > ?", [cluster, after]
        )[0][0]

    def event_digests(self, *, batch: int = 100_000) -> Iterator[tuple[str, int, bytes]]:
        """(cluster, seq, sha256 of the payload) of every stored event, by cluster and seq."""
        try:
            cursor = self.con.cursor()
            cursor.execute(
                "SELECT cluster, seq, unhex(sha256(payload)) FROM events ORDER BY cluster, seq"
            )
            while rows := cursor.fetchmany(batch):
                yield from rows
        except duckdb.Error as err:
            raise HistoryError(f"{self.path}: {err}") from err

    def event_payloads(self, *, batch: int = 10_000) -> Iterator[tuple[str, int, bytes]]:
        """(cluster, seq, payload) of every stored event, by cluster and seq."""
        try:
            cursor = self.con.cursor()
            cursor.execute("SELECT cluster, seq, payload FROM events ORDER BY cluster, seq")
            while rows := cursor.fetchmany(batch):
                for cluster, seq, payload in rows:
                    yield cluster, seq, payload if isinstance(payload, bytes) else payload.encode()
        except duckdb.Error as err:
            raise HistoryError(f"{self.path}: {err}") from err

    def commands(self, cluster: str) -> list[Command]:
        """Commands of `cluster` in the order they were recorded."""
        rows = self._rows(
            "SELECT payload FROM commands WHERE cluster = ? ORDER BY row_id", [cluster]
        )
        return [COMMANDS.validate_json(r[0]) for r in rows]

    def rejections(self, cluster: str | None = None) -> list[Rejection]:
        """Rejected input in the order recorded; `cluster`: only those keyed by that cluster."""
        if cluster is None:
            rows = self._rows("SELECT payload FROM rejections ORDER BY row_id")
        else:
            rows = self._rows(
                "SELECT payload FROM rejections WHERE json_extract_string(payload, '$.key') = ? "
                "ORDER BY row_id",
                [cluster],
            )
        return [REJECTIONS.validate_json(r[0]) for r in rows]

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        return {t: self._rows(f"SELECT count(*) FROM {t}")[0][0] for t in TABLES}

    def chain_rows(self, table: str) -> list[tuple[Any, ...]]:
        """(row_id, label, prev_hash, hash, payload, typed columns agree with the payload) of a
        table, in row_id order."""
        label = {
            "events": "'cluster ' || cluster || ', seq ' || seq || ', ' || type",
            "commands": "'command ' || id || ', ' || type",
            "rejections": "'from ' || source_topic || ', ' || agent",
        }[table]
        return self._rows(
            f"SELECT row_id, {label}, prev_hash, hash, payload, {TYPED_CHECK[table]} "
            f"FROM {parsed(table)} ORDER BY row_id"
        )

    def chain_head(self, table: str) -> tuple[int, str] | None:
        """The (row_id, hash) the writer recorded as the table's last row."""
        rows = self._rows("SELECT row_id, hash FROM chain_heads WHERE tbl = ?", [table])
        return (rows[0][0], rows[0][1]) if rows else None

    def close(self) -> None:
        """Release the file."""
        self.con.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
