"""The hash chain: `rackplane history verify` names the first edited, inserted or deleted row."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from rackplane.history import open_history
from rackplane.history._rows import chain
from rackplane.history.verify import ChainReport, verify
from tests.history.conftest import Recorded


@pytest.fixture
def copy(recorded: Recorded, tmp_path: Path) -> Path:
    path = tmp_path / "tampered.duckdb"
    shutil.copy(recorded.path, path)
    return path


def events_verdict(path: Path) -> ChainReport:
    with open_history(path) as reader:
        return verify(reader)[0]


def sql(path: Path, statement: str, params: list[object] | None = None) -> None:
    con = duckdb.connect(str(path))
    con.execute(statement, params or [])
    con.close()


def test_an_untouched_history_verifies(recorded: Recorded) -> None:
    with open_history(recorded.path) as reader:
        assert [(r.table, r.ok) for r in verify(reader)] == [
            ("events", True), ("commands", True), ("rejections", True),
        ]  # fmt: skip


def test_an_edited_payload_is_named_as_edited(copy: Path) -> None:
    sql(copy, "UPDATE events SET payload = replace(payload, 'managed', 'inference') WHERE seq = 40")
    verdict = events_verdict(copy)
    assert (verdict.problem, verdict.row_id) == ("edited", 40)
    assert "seq 40" in verdict.row


def test_an_edited_typed_column_is_named_as_edited(copy: Path) -> None:
    sql(copy, "UPDATE events SET actor = 'someone-else' WHERE seq = 12")
    assert (events_verdict(copy).problem, events_verdict(copy).row_id) == ("edited", 12)


def test_an_inserted_row_is_named_as_inserted(copy: Path) -> None:
    # A forger copies row 20, renumbers it between 20 and 21, and chains it onto row 20.
    sql(copy, "UPDATE events SET row_id = row_id + 1 WHERE row_id > 20")
    sql(
        copy,
        'INSERT INTO events SELECT 21, cluster, 100000, type, "at", job, node, rack, actor, '
        "causation_id, correlation_id, payload, hash, hash FROM events WHERE row_id = 20",
    )
    verdict = events_verdict(copy)
    assert (verdict.problem, verdict.row_id) == ("inserted", 21)


def test_an_inserted_row_with_a_correct_hash_is_still_found(copy: Path) -> None:
    con = duckdb.connect(str(copy))
    con.execute("UPDATE events SET row_id = row_id + 1 WHERE row_id > 20")
    con.execute(
        'INSERT INTO events SELECT 21, cluster, 100000, type, "at", job, node, rack, actor, '
        "causation_id, correlation_id, payload, hash, hash FROM events WHERE row_id = 20"
    )
    row = con.execute("SELECT prev_hash, payload FROM events WHERE row_id = 21").fetchone()
    assert row is not None
    con.execute("UPDATE events SET hash = ? WHERE row_id = 21", [chain(row[0], row[1])])
    con.close()
    verdict = events_verdict(copy)
    assert (verdict.problem, verdict.row_id) == ("inserted", 21)


def test_a_deleted_row_is_named_by_the_row_after_it(copy: Path) -> None:
    sql(copy, "DELETE FROM events WHERE seq = 30")
    verdict = events_verdict(copy)
    assert (verdict.problem, verdict.row_id) == ("deleted", 31)
    assert "deleted" in verdict.detail


def test_deleting_the_first_and_the_last_rows_is_found_too(copy: Path, tmp_path: Path) -> None:
    last = tmp_path / "last.duckdb"
    shutil.copy(copy, last)
    sql(copy, "DELETE FROM events WHERE seq = 1")
    assert (events_verdict(copy).problem, events_verdict(copy).row_id) == ("deleted", 2)
    sql(last, "DELETE FROM events WHERE row_id = (SELECT max(row_id) FROM events)")
    verdict = events_verdict(last)
    assert verdict.problem == "deleted"
    assert "after this one" in verdict.detail
