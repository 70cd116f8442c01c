"""`DuckDBAuditSink`: the audit trail in one DuckDB file, one writer.

Theory of operation:
1. Opening the file creates the tables if needed and reads back what dedupe and the chain
   need: each table's last row (id and hash), the last seq per cluster, the command ids and
   rejection keys already stored.
2. `record_*` gets a batch (a Faust batch, or what `add_event` buffered): it drops what is
   already stored (an event's (cluster, seq), a command's id, a rejection's digest), so a
   redelivery never duplicates; it hashes the new rows in order onto the chain; it inserts
   them (one statement per row group, overlapped with the hashing of the next: `_writer`)
   and moves the chain head, in one transaction.
3. If anything fails, the transaction rolls back and the in-memory heads stay where they
   were: the batch can be recorded again.
"""

from __future__ import annotations

from collections.abc import Sequence
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
        try:
            self.con = duckdb.connect(str(self.path))
            self.con.execute(DDL)
        except duckdb.Error as err:
            raise HistoryError(f"cannot record into {self.path}: {err}") from err
        self.buffer_size = buffer
        self._inserter: ThreadPoolExecutor | None = None
        self._buffer: list[Event] = []
        self._heads: dict[str, tuple[int, str]] = dict.fromkeys(TABLES, (0, GENESIS))
        for tbl, row_id, h in self.con.execute(
            "SELECT tbl, row_id, hash FROM chain_heads"
        ).fetchall():
            self._heads[tbl] = (row_id, h)
        self._last_seq: dict[str, int] = dict(
            self.con.execute("SELECT cluster, max(seq) FROM events GROUP BY cluster").fetchall()
        )
        self._command_ids = {r[0] for r in self.con.execute("SELECT id FROM commands").fetchall()}
        self._rejection_keys = {
            r[0] for r in self.con.execute("SELECT key FROM rejections").fetchall()
        }

    # -- AuditSink -----------------------------------------------------------------------------

    def record_events(self, events: Sequence[Event]) -> None:
        """Append the events not stored yet (by (cluster, seq)), in the order given."""
        fresh, last = self._fresh_events(events)
        self._append("events", fresh)
        self._last_seq = last

    def record_commands(self, commands: Sequence[Command]) -> None:
        """Append the commands whose id is not stored yet."""
        fresh, ids = [], set()
        for c in commands:
            if c.id not in self._command_ids and c.id not in ids:
                ids.add(c.id)
                fresh.append(c)
        self._append("commands", fresh)
        self._command_ids |= ids

    def record_rejections(self, rejections: Sequence[Rejection]) -> None:
        """Append the rejections not stored yet (by the digest of their JSON)."""
        payloads, keys = [], set()
        for r in rejections:
            payload = to_json(r)
            key = rejection_key(payload)
            if key not in self._rejection_keys and key not in keys:
                keys.add(key)
                payloads.append(payload)
        self._append("rejections", payloads)
        self._rejection_keys |= keys

    def close(self) -> None:
        """Write what is buffered, checkpoint and close the file. Idempotent."""
        if self.con is None:
            return
        self.flush()
        if self._inserter is not None:
            self._inserter.shutdown()
        self.con.execute("CHECKPOINT")
        self.con.close()
        self.con = None  # type: ignore[assignment]

    # -- for the in-process engine -------------------------------------------------------------

    def add_event(self, event: Event) -> None:
        """Buffer one event (an `Engine` sink); written every `buffer` events and on flush."""
        self._buffer.append(event)
        if len(self._buffer) >= self.buffer_size:
            self.flush()

    def flush(self) -> None:
        """Write the buffered events."""
        if self._buffer:
            batch, self._buffer = self._buffer, []
            self.record_events(batch)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _fresh_events(self, events: Sequence[Event]) -> tuple[list[Event], dict[str, int]]:
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
                for r in self.con.execute(
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

    def _append(self, name: str, rows: Sequence[BaseModel] | Sequence[bytes]) -> None:
        if not rows:
            return
        if self._inserter is None and len(rows) > self.chunk:
            self._inserter = ThreadPoolExecutor(1, thread_name_prefix="rackplane-history")
        self._heads[name] = append_rows(
            self.con, name, rows, self._heads[name], self._inserter, chunk=self.chunk
        )


def _one_run(events: Sequence[Event], last: dict[str, int]) -> bool:
    """True when `events` are one cluster's gapless run of seqs after its last (what the
    controller writes): then all of them are fresh."""
    cluster, first = events[0].cluster, events[0].seq
    return (
        first > last.get(cluster, 0)
        and [e.seq for e in events] == list(range(first, first + len(events)))
        and {e.cluster for e in events} == {cluster}
    )
