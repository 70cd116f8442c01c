"""The DuckDB audit sink: typed columns, JSON payload, batched, idempotent under redelivery."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from rackplane.history import DuckDBAuditSink, HistoryError, open_history
from rackplane.history.verify import verify
from rackplane.models import CordonNode, Rejection, SubmitJob
from tests.builders import CLUSTER, Harness, cmd, job, rack, register
from tests.history.conftest import Recorded


def story() -> Harness:
    """Two racks; a job placed by hand-made commands; a cordon."""
    h = Harness()
    h.given(register(rack("r01", 4), rack("r02", 4), spares_per_rack=0))
    h.when(cmd(SubmitJob, job=job("j1", 2, slice_size=2)))
    h.when(cmd(CordonNode, node="r02-n01", reason="fan"))
    return h


def rejection(n: int) -> Rejection:
    return Rejection(
        source_topic="rackplane.commands", partition=0, offset=n, key=CLUSTER,
        reason="not JSON", agent="controller", at=datetime(2026, 11, 1, tzinfo=UTC),
        size=3, raw_base64="AAAA",
    )  # fmt: skip


def test_events_land_in_typed_columns_with_their_json_payload(tmp_path: Path) -> None:
    h = story()
    with DuckDBAuditSink(tmp_path / "h.duckdb") as sink:
        sink.record_events(h.log)
    con = duckdb.connect(str(tmp_path / "h.duckdb"), read_only=True)
    rows = con.execute(
        'SELECT cluster, seq, type, epoch_us("at"), job, node, rack, actor, causation_id, '
        "payload FROM events ORDER BY seq"
    ).fetchall()
    con.close()
    want = [(CLUSTER, 1, "TopologyRegistered"), (CLUSTER, 2, "JobSubmitted"),
            (CLUSTER, 3, "NodeCordoned")]  # fmt: skip
    assert [r[:3] for r in rows] == want
    submitted, cordoned = rows[1], rows[2]
    assert submitted[4] == "j1" and cordoned[5] == "r02-n01"
    assert cordoned[3] == int(h.log[2].at.timestamp() * 1_000_000)
    assert cordoned[8] == h.log[2].causation_id
    assert '"reason":"fan"' in cordoned[9]


def test_redelivered_events_commands_and_rejections_are_stored_once(tmp_path: Path) -> None:
    h = story()
    commands = [cmd(CordonNode, node="r01-n01"), cmd(CordonNode, node="r01-n02")]
    path = tmp_path / "h.duckdb"
    with DuckDBAuditSink(path) as sink:
        sink.record_events(h.log[:2])
        sink.record_events(h.log)  # a batch redelivered with one new event
        sink.record_events([h.log[1], h.log[1]])
        sink.record_commands([commands[0], commands[0]])
        sink.record_commands(commands)
        sink.record_rejections([rejection(1), rejection(1), rejection(2)])
    with DuckDBAuditSink(path) as sink:  # a restart: the file decides what is stored
        sink.record_events(h.log)
        sink.record_commands(commands)
        sink.record_rejections([rejection(2)])
    with open_history(path) as reader:
        assert reader.counts() == {"events": 3, "commands": 2, "rejections": 2}
        assert reader.events(CLUSTER) == h.log
        assert reader.commands(CLUSTER) == commands
        assert [r.offset for r in reader.rejections()] == [1, 2]
        assert all(r.ok for r in verify(reader))


def test_an_event_missed_below_the_last_seq_is_still_recorded_when_it_comes(
    tmp_path: Path,
) -> None:
    h = story()
    with DuckDBAuditSink(tmp_path / "h.duckdb") as sink:
        sink.record_events([h.log[0], h.log[2]])
        sink.record_events([h.log[1]])
    with open_history(tmp_path / "h.duckdb") as reader:
        assert reader.events(CLUSTER) == h.log


def test_buffered_engine_events_are_written_in_batches_and_on_close(recorded: Recorded) -> None:
    with open_history(recorded.path) as reader:
        assert reader.clusters() == [recorded.scenario.topology.cluster]
        assert reader.events(reader.clusters()[0]) == recorded.events
        assert reader.counts()["events"] == len(recorded.events) > 64


def test_a_file_that_is_not_duckdb_is_refused_with_its_name(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    with pytest.raises(HistoryError, match=r"notes\.txt"):
        DuckDBAuditSink(bad)
    assert bad.read_text() == "hello"


_READ_ELSEWHERE = """
import sys
from rackplane.history import open_history
from rackplane.history.verify import verify
with open_history(sys.argv[1]) as r:
    print(r.note)
    print(len(r.events(sys.argv[2])), all(report.ok for report in verify(r)))
"""


def _read_in_another_process(path: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _READ_ELSEWHERE, str(path), CLUSTER],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 or "held by a writer" in done.stderr, done.stderr
    return (done.stdout or done.stderr).rstrip("\n").splitlines()


def test_another_process_reads_the_published_copy_while_the_writer_holds_the_file(
    tmp_path: Path,
) -> None:
    h = story()
    path = tmp_path / "h.duckdb"
    with DuckDBAuditSink(path) as sink:
        sink.record_events(h.log[:2])
        said = _read_in_another_process(path)
        assert "held by a writer" in said[-1] and "no reading copy" in said[-1]
        sink.publish()
        note, counts = _read_in_another_process(path)
        assert "is being recorded" in note and "h.duckdb.reading" in note
        assert counts == "2 True"  # the copy verifies: every row and hash of the chain
        sink.record_events(h.log[2:])
        assert _read_in_another_process(path)[1] == "2 True"  # until the next publish
        sink.publish()
        assert _read_in_another_process(path)[1] == f"{len(h.log)} True"
    note, counts = _read_in_another_process(path)  # released: the file itself
    assert note == "" and counts == f"{len(h.log)} True"
