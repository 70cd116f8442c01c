"""`DuckDBAuditSink`: the audit trail in one DuckDB file, one writer.

Theory of operation:
1. Opening the file creates the tables if needed and reads back what dedupe and the chain
   need (the *heads*): each table's last row (id and hash), the last seq per cluster, the
   command ids and rejection keys already stored.
2. `record_*` gets a batch (a Faust batch, or what `add_event` buffered): it drops what is
   already stored (an event's (cluster, seq), a command's id, a rejection's digest), so a
   redelivery never duplicates; it hashes the new rows in order onto the chain; it inserts
   them (one statement per row group, overlapped with the hashing of the next: `_writer`)
   and moves the chain head, in one transaction.
3. If anything fails (a full disk: the WAL write of the COMMIT, a row group written to the
   file, an automatic checkpoint), the transaction is gone and the write raises
   `HistoryError`; the sink then re-reads its heads from the file, so that it holds exactly
   what is stored: the same batch can be recorded again, and is stored once. A fatal error
   (a failed checkpoint) invalidates DuckDB's database ("database has been invalidated
   because of a previous fatal error"): the sink closes the connection and opens the file
   again (DuckDB replays the WAL), now or, if that fails too, at the next write.
4. `close` writes what is buffered, checkpoints and releases the file; on a failing disk the
   checkpoint fails and the committed rows stay in the WAL, which the next open replays.
5. Reading while it records. DuckDB lets one process hold a file, and a reader in another
   process cannot open it even read-only. So the writer publishes a *reading copy* now and
   then (`publish`: the whole database copied into `reading_copy(path)` in one transaction's
   view, written beside it under a temporary name and renamed over the old copy, so a reader
   never sees half of one); `open_history` reads that copy when the file itself is held, and
   says as of when. The copy costs a full write of the database: the audit publishes at most
   every few seconds and never more often than ten times the last copy's duration.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Self

import duckdb
from pydantic import BaseModel

from rackplane.history._rows import GENESIS, rejection_key
from rackplane.history._schema import DDL, TABLES
from rackplane.history._writer import CHUNK, append_rows, to_json
from rackplane.history.errors import HistoryError
from rackplane.models import Command, Event, Rejection

DEFAULT_DB = "rackplane.duckdb"
READING_SUFFIX = ".reading"
"""The reading copy of a history file `F` is `F.reading` (see `publish`)."""


def reading_copy(path: str | Path) -> Path:
    """Where the writer of `path` publishes the copy other processes read while it records."""
    p = Path(path)
    return p.with_name(p.name + READING_SUFFIX)


log = logging.getLogger("rackplane.history")


class DuckDBAuditSink:
    """Implements `rackplane.streams.audit.AuditSink` on a DuckDB file.

    A batch larger than `chunk` rows (one DuckDB row group) is inserted in chunks by a
    background thread while the next chunk is serialized and hashed (`_writer`), still in one
    transaction.

    Args:
        path: the DuckDB file (created if missing). One process may hold it at a time.
        buffer: events `add_event` collects before it writes them as one batch.

    Raises:
        HistoryError: the file cannot be opened (another process holds it, not a DuckDB file).
    """

    chunk: int = CHUNK
    """Rows per INSERT of a large batch (tests set it small to exercise the overlap)."""

    def __init__(self, path: str | Path, *, buffer: int = 10_000) -> None:
        self.path = Path(path)
        self.buffer_size = buffer
        self._inserter: ThreadPoolExecutor | None = None
        self._buffer: list[Event] = []
        self._closed = False
        self._heads: dict[str, tuple[int, str]] = {}
        self._last_seq: dict[str, int] = {}
        self._command_ids: set[str] = set()
        self._rejection_keys: set[str] = set()
        self.con: duckdb.DuckDBPyConnection | None = None
        self._open()

    def _open(self) -> None:
        """Connect, create the tables if needed, read the heads (step 1)."""
        try:
            con = duckdb.connect(str(self.path))
        except duckdb.Error as err:
            raise HistoryError(f"cannot record into {self.path}: {_one_line(err)}") from err
        try:
            con.execute(DDL)
            self._load_heads(con)
        except duckdb.Error as err:
            with contextlib.suppress(duckdb.Error):
                con.close()
            raise HistoryError(f"cannot record into {self.path}: {_one_line(err)}") from err
        self.con = con

    def _load_heads(self, con: duckdb.DuckDBPyConnection) -> None:
        heads = dict.fromkeys(TABLES, (0, GENESIS))
        for tbl, row_id, h in con.execute("SELECT tbl, row_id, hash FROM chain_heads").fetchall():
            heads[tbl] = (row_id, h)
        last_seq = dict(
            con.execute("SELECT cluster, max(seq) FROM events GROUP BY cluster").fetchall()
        )
        command_ids = {r[0] for r in con.execute("SELECT id FROM commands").fetchall()}
        rejection_keys = {r[0] for r in con.execute("SELECT key FROM rejections").fetchall()}
        self._heads, self._last_seq = heads, last_seq
        self._command_ids, self._rejection_keys = command_ids, rejection_keys

    # -- AuditSink -----------------------------------------------------------------------------

    def record_events(self, events: Sequence[Event]) -> None:
        """Append the events not stored yet (by (cluster, seq)), in the order given.

        Raises:
            HistoryError: the write failed; nothing of the batch is stored and the sink can
                record it again (see the module docstring).
        """

        def write(con: duckdb.DuckDBPyConnection) -> None:
            fresh, last = self._fresh_events(con, events)
            self._append(con, "events", fresh)
            self._last_seq = last

        self._write("events", len(events), write)

    def record_commands(self, commands: Sequence[Command]) -> None:
        """Append the commands whose id is not stored yet (raises as `record_events`)."""

        def write(con: duckdb.DuckDBPyConnection) -> None:
            fresh, ids = [], set()
            for c in commands:
                if c.id not in self._command_ids and c.id not in ids:
                    ids.add(c.id)
                    fresh.append(c)
            self._append(con, "commands", fresh)
            self._command_ids |= ids

        self._write("commands", len(commands), write)

    def record_rejections(self, rejections: Sequence[Rejection]) -> None:
        """Append the rejections not stored yet, by the digest of their JSON (raises as
        `record_events`)."""

        def write(con: duckdb.DuckDBPyConnection) -> None:
            payloads, keys = [], set()
            for r in rejections:
                payload = to_json(r)
                key = rejection_key(payload)
                if key not in self._rejection_keys and key not in keys:
                    keys.add(key)
                    payloads.append(payload)
            self._append(con, "rejections", payloads)
            self._rejection_keys |= keys

        self._write("rejections", len(rejections), write)

    def last_seqs(self) -> dict[str, int]:
        """Each cluster's last stored seq (what the audit follows the log from)."""
        return dict(self._last_seq)

    def close(self) -> None:
        """Write what is buffered, checkpoint and release the file. Idempotent.

        On a failing disk the file is released all the same: a failed checkpoint leaves the
        committed rows in the WAL (the next open replays it) and is only logged.

        Raises:
            HistoryError: buffered events (`add_event`) could not be written; they are lost
                with this sink, and the message says how many.
        """
        if self._closed:
            return
        lost: HistoryError | None = None
        try:
            self.flush()
        except HistoryError as err:
            lost = err
        self._closed = True
        if self._inserter is not None:
            self._inserter.shutdown()
        if self.con is not None:
            try:
                self.con.execute("CHECKPOINT")
            except duckdb.Error as err:
                log.warning(
                    "history %s: checkpoint at close failed (the WAL keeps what was committed): %s",
                    self.path,
                    _one_line(err),
                )
            self._disconnect()
        if lost is not None:
            raise HistoryError(
                f"{self.path}: {len(self._buffer)} buffered event(s) not written: {lost}"
            ) from lost

    def publish(self) -> float:
        """Copy the stored history into `reading_copy(self.path)` (step 5); returns the
        seconds the copy took.

        Raises:
            HistoryError: the copy could not be written (the old copy, if any, stays).
        """
        if self._closed or self.con is None:
            raise HistoryError(f"{self.path}: the history sink is closed")
        target = reading_copy(self.path)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        started = time.monotonic()
        con = self.con
        tmp.unlink(missing_ok=True)
        try:
            (name,) = con.execute("SELECT current_database()").fetchone() or ("",)
            con.execute("ATTACH ? AS rackplane_reading", [str(tmp)])
            try:
                con.execute(f'COPY FROM DATABASE "{name}" TO rackplane_reading')
            finally:
                con.execute("DETACH rackplane_reading")
            os.replace(tmp, target)
        except (duckdb.Error, OSError) as err:
            tmp.unlink(missing_ok=True)
            raise HistoryError(
                f"cannot publish a reading copy of {self.path}: {_one_line(err)}"
            ) from err
        return time.monotonic() - started

    # -- for the in-process engine -------------------------------------------------------------

    def add_event(self, event: Event) -> None:
        """Buffer one event (an `Engine` sink); written every `buffer` events and on flush."""
        self._buffer.append(event)
        if len(self._buffer) >= self.buffer_size:
            self.flush()

    def flush(self) -> None:
        """Write the buffered events; when that fails (raises `HistoryError`), they stay
        buffered for the next flush."""
        if self._buffer:
            self.record_events(self._buffer)
            self._buffer = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _write(self, table: str, n: int, work: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
        """Run one batch's write; on failure re-read the heads from the file (step 3)."""
        if self._closed:
            raise HistoryError(f"{self.path}: the history sink is closed")
        if self.con is None:  # a failure lost the connection, and reopening failed then
            self._open()
        assert self.con is not None
        try:
            work(self.con)
        except Exception as err:
            self._recover()
            raise HistoryError(
                f"cannot record {n} {table} into {self.path}: {_one_line(err)}"
            ) from err

    def _recover(self) -> None:
        """Hold exactly what the file holds again: re-read the heads, or reopen the file when
        the connection no longer answers (a fatal error invalidated the database)."""
        assert self.con is not None
        try:
            self._load_heads(self.con)
            return
        except duckdb.Error:
            pass
        self._disconnect()
        with contextlib.suppress(HistoryError):  # still failing: the next write reopens
            self._open()

    def _disconnect(self) -> None:
        if self.con is not None:
            with contextlib.suppress(duckdb.Error):
                self.con.close()
            self.con = None

    def _fresh_events(
        self, con: duckdb.DuckDBPyConnection, events: Sequence[Event]
    ) -> tuple[list[Event], dict[str, int]]:
        """Events not stored yet, and each cluster's last seq once they are. Below a cluster's
        last seq (a redelivery) the file decides."""
        last = dict(self._last_seq)
        if events and _one_run(events, last):  # the common case, checked cheaply
            last[events[0].cluster] = events[-1].seq
            return list(events), last
        fresh: list[Event] = []
        doubtful: dict[str, list[Event]] = {}
        for e in events:
            if e.seq > last.get(e.cluster, 0):
                last[e.cluster] = e.seq
                fresh.append(e)
            else:
                doubtful.setdefault(e.cluster, []).append(e)
        for cluster, candidates in doubtful.items():
            seqs = sorted({e.seq for e in candidates})
            stored = {
                r[0]
                for r in con.execute(
                    "SELECT seq FROM events WHERE cluster = ? AND seq IN (SELECT UNNEST(?))",
                    [cluster, seqs],
                ).fetchall()
            }
            taken = {e.seq for e in fresh if e.cluster == cluster}
            for e in candidates:
                if e.seq not in stored and e.seq not in taken:
                    taken.add(e.seq)
                    fresh.append(e)
        return fresh, last

    def _append(
        self,
        con: duckdb.DuckDBPyConnection,
        name: str,
        rows: Sequence[BaseModel] | Sequence[bytes],
    ) -> None:
        if not rows:
            return
        if self._inserter is None and len(rows) > self.chunk:
            self._inserter = ThreadPoolExecutor(1, thread_name_prefix="rackplane-history")
        self._heads[name] = append_rows(
            con, name, rows, self._heads[name], self._inserter, chunk=self.chunk
        )


def _one_line(err: BaseException) -> str:
    """DuckDB's message (it spans lines: "Original error: ...") on one line."""
    return " ".join(line.strip() for line in str(err).splitlines() if line.strip())


def _one_run(events: Sequence[Event], last: dict[str, int]) -> bool:
    """True when `events` are one cluster's gapless run of seqs after its last (what the
    controller writes): then all of them are fresh."""
    cluster, first = events[0].cluster, events[0].seq
    return (
        first > last.get(cluster, 0)
        and [e.seq for e in events] == list(range(first, first + len(events)))
        and {e.cluster for e in events} == {cluster}
    )
