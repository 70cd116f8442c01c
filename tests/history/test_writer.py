"""The writer's chunked inserts: the same rows as one statement, and all or nothing."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from rackplane.history import DuckDBAuditSink, HistoryError, open_history
from rackplane.history import _schema as schema
from rackplane.history._rows import GENESIS, chain, chain_all
from rackplane.history._writer import to_json
from rackplane.history.verify import verify
from tests.history.conftest import Recorded


def stored(path: Path) -> list[tuple[object, ...]]:
    con = duckdb.connect(str(path), read_only=True)
    rows = con.execute("SELECT * FROM events ORDER BY row_id").fetchall()
    heads = con.execute("SELECT * FROM chain_heads ORDER BY tbl").fetchall()
    con.close()
    return rows + heads


def test_chaining_bytes_gives_the_hashes_verify_recomputes_from_text(
    recorded: Recorded,
) -> None:
    payloads = [to_json(e) for e in recorded.events[:50]]
    want, prev = [], GENESIS
    for p in payloads:
        prev = chain(prev, p.decode())
        want.append(prev)
    assert chain_all(GENESIS, payloads) == want
    assert payloads[3].decode() == recorded.events[3].model_dump_json()


def test_a_batch_inserted_in_overlapped_chunks_stores_what_one_insert_stores(
    recorded: Recorded, tmp_path: Path
) -> None:
    events = recorded.events
    assert len(events) > 60
    with DuckDBAuditSink(tmp_path / "one.duckdb") as sink:
        sink.record_events(events[:30])
        sink.record_events(events[30:])
    with DuckDBAuditSink(tmp_path / "chunked.duckdb") as sink:
        sink.chunk = 8  # 30 rows: 3 chunks and a remainder; the rest: 4+ chunks
        sink.record_events(events[:30])
        sink.record_events(events[30:])
        assert sink._inserter is not None  # the overlap ran
    assert stored(tmp_path / "chunked.duckdb") == stored(tmp_path / "one.duckdb")
    with open_history(tmp_path / "chunked.duckdb") as reader:
        assert reader.events(events[0].cluster) == events
        assert all(r.ok for r in verify(reader))


def test_a_chunk_that_fails_to_insert_rolls_back_the_whole_batch(
    recorded: Recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = recorded.events
    path = tmp_path / "h.duckdb"
    real = schema.insert
    calls = 0

    def third_chunk_fails(*args: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise duckdb.IOException("disk full")
        real(*args)  # type: ignore[arg-type]

    with DuckDBAuditSink(path) as sink:
        sink.chunk = 8
        sink.record_events(events[:20])
        heads = dict(sink._heads)
        monkeypatch.setattr("rackplane.history._writer.insert", third_chunk_fails)
        calls = 0
        with pytest.raises(HistoryError, match="disk full"):
            sink.record_events(events[20:])
        assert calls == 3
        assert sink._heads == heads
        monkeypatch.setattr("rackplane.history._writer.insert", real)
        sink.record_events(events[20:])  # recorded again, in full
    with open_history(path) as reader:
        assert reader.events(events[0].cluster) == events
        assert all(r.ok for r in verify(reader))


def test_a_message_that_fails_to_serialize_mid_batch_stores_nothing_of_it(
    recorded: Recorded, tmp_path: Path
) -> None:
    events = recorded.events
    path = tmp_path / "h.duckdb"
    with DuckDBAuditSink(path) as sink:
        sink.chunk = 8
        sink.record_events(events[:10])
        broken = [*events[10:], object()]  # the last chunk cannot be serialized
        with pytest.raises(AttributeError):
            sink._append(sink.con, "events", broken)  # type: ignore[arg-type]
        sink.record_events(events[10:])
    with open_history(path) as reader:
        assert reader.events(events[0].cluster) == events
        assert all(r.ok for r in verify(reader))
