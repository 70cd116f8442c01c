"""A full disk, for real: the sinks fail, store nothing half, and store the batch once later.

The sink runs in a child process (`disk_full_child`) whose RLIMIT_FSIZE this test lowers
with `resource.prlimit`: the kernel then refuses every write past the limit with EFBIG, in
DuckDB's WAL, its database file and the JSON-lines files alike (Python ignores SIGXFSZ), as a
full disk refuses them with ENOSPC. Raising the limit frees the disk. Unprivileged (no mount,
no tmpfs), so it runs wherever the tests run.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rackplane.history import open_history
from rackplane.history.continuity import check_seqs
from rackplane.history.verify import verify
from rackplane.models import COMMANDS, EVENTS, REJECTIONS, CordonNode, Event
from tests.builders import CLUSTER, cmd
from tests.history.conftest import Recorded
from tests.history.test_sink import rejection

ROOT = Path(__file__).parents[2]


class Child:
    """The sink process: `ask` sends one request and returns its answer."""

    def __init__(self, kind: str, path: Path, messages: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.history.disk_full_child", kind, str(path), str(messages)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.read()["ready"]

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the sink process died"
        return json.loads(line)  # type: ignore[no-any-return]

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def record(self, kind: str, start: int, stop: int) -> dict[str, Any]:
        return self.ask(record=kind, start=start, stop=stop)

    def fill_disk(self, limit: int) -> None:
        """No write past `limit` bytes of any file from now on."""
        _, hard = resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (limit, hard))

    def free_disk(self) -> None:
        if self.proc.poll() is not None:
            return
        _, hard = resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.ask(close=True)["ok"]
            self.proc.wait(30)


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


COMMAND_LIST = [cmd(CordonNode, node=f"r0001-n{i:02d}", reason="test") for i in range(40)]
REJECTION_LIST = [rejection(n) for n in range(20)]


@pytest.fixture
def messages(long_recorded: Recorded, tmp_path: Path) -> Path:
    path = tmp_path / "messages.jsonl"
    with path.open("w") as f:
        for kind, dump, items in (
            ("events", EVENTS.dump_json, long_recorded.events),
            ("commands", COMMANDS.dump_json, COMMAND_LIST),
            ("rejections", REJECTIONS.dump_json, REJECTION_LIST),
        ):
            for m in items:
                f.write(json.dumps({"kind": kind, "json": dump(m).decode()}) + "\n")  # type: ignore[arg-type]
    return path


@pytest.fixture
def duckdb_child(tmp_path: Path, messages: Path) -> Iterator[tuple[Child, Path]]:
    db = tmp_path / "h.duckdb"
    child = Child("duckdb", db, messages)
    try:
        yield child, db
    finally:
        child.free_disk()
        child.close()


def assert_stored_once(db: Path, events: list[Event], commands: int, rejections: int) -> None:
    with open_history(db) as reader:
        cluster = events[0].cluster
        assert reader.events(cluster) == events
        assert [c.id for c in reader.commands(CLUSTER)] == [c.id for c in COMMAND_LIST[:commands]]
        assert [r.offset for r in reader.rejections()] == list(range(rejections))
        assert all(r.ok for r in verify(reader)), verify(reader)
        assert all(r.ok for r in check_seqs(reader))


def test_a_batch_that_failed_on_a_full_disk_is_stored_once_when_recorded_again(
    long_recorded: Recorded, duckdb_child: tuple[Child, Path]
) -> None:
    child, db = duckdb_child
    assert child.record("events", 0, 50)["ok"]
    assert child.record("commands", 0, 10)["ok"]
    assert child.record("rejections", 0, 5)["ok"]
    child.fill_disk(max(size(Path(f"{db}.wal")), 1))  # the next commit's WAL write fails
    for kind, start, stop in (("events", 50, 120), ("commands", 10, 30), ("rejections", 5, 12)):
        for _ in range(3):  # the audit agent's retries
            failed = child.record(kind, start, stop)
            assert not failed["ok"] and "File too large" in failed["error"], failed
    child.free_disk()
    for kind, start, stop in (("events", 50, 120), ("commands", 10, 30), ("rejections", 5, 12)):
        assert child.record(kind, start, stop)["ok"]
        assert child.record(kind, start, stop)["ok"]  # a redelivery adds nothing
    child.close()
    assert_stored_once(db, long_recorded.events[:120], commands=30, rejections=12)


def test_a_failed_checkpoint_invalidates_the_database_and_the_sink_opens_it_again(
    long_recorded: Recorded, duckdb_child: tuple[Child, Path]
) -> None:
    child, db = duckdb_child
    assert child.record("events", 0, 50)["ok"]
    assert child.ask(sql="SET checkpoint_threshold = '1KB'")["ok"]  # every commit checkpoints
    child.fill_disk(size(db) + 1)
    failed = child.record("events", 50, 200)
    assert not failed["ok"] and "checkpoint" in failed["error"], failed
    again = child.record("events", 50, 200)  # reopened: a plain WAL write fails now
    assert not again["ok"] and "invalidated" not in again["error"], again
    child.free_disk()
    assert child.record("events", 50, 200)["ok"]
    assert child.record("events", 0, 250)["ok"]  # one redelivered batch with 50 new events
    child.close()
    assert_stored_once(db, long_recorded.events[:250], commands=0, rejections=0)


def test_a_batch_of_many_row_groups_that_fails_mid_insert_is_stored_whole_later(
    long_recorded: Recorded, duckdb_child: tuple[Child, Path]
) -> None:
    child, db = duckdb_child
    assert child.ask(chunk=16)["ok"]  # 16-row inserts from the inserter thread
    assert child.record("events", 0, 40)["ok"]
    child.fill_disk(max(size(Path(f"{db}.wal")), 1))
    failed = child.record("events", 40, 1000)
    assert not failed["ok"] and "File too large" in failed["error"], failed
    child.free_disk()
    assert child.record("events", 40, 1000)["ok"]
    child.close()
    assert_stored_once(db, long_recorded.events[:1000], commands=0, rejections=0)


def test_closing_on_a_full_disk_releases_the_file_and_keeps_every_committed_row(
    long_recorded: Recorded, duckdb_child: tuple[Child, Path]
) -> None:
    child, db = duckdb_child
    assert child.record("events", 0, 300)["ok"]
    assert child.record("commands", 0, 5)["ok"]
    child.fill_disk(max(size(Path(f"{db}.wal")), 1))  # the checkpoint at close fails
    assert child.ask(close=True)["ok"]
    assert child.proc.wait(30) == 0
    assert size(Path(f"{db}.wal")) > 0  # the rows are in the WAL, not yet in the file
    assert_stored_once(db, long_recorded.events[:300], commands=5, rejections=0)


def test_a_jsonl_write_cut_short_by_a_full_disk_leaves_no_half_line(
    long_recorded: Recorded, tmp_path: Path, messages: Path
) -> None:
    audit = tmp_path / "audit"
    child = Child("jsonl", audit, messages)
    try:
        assert child.record("events", 0, 20)["ok"]
        before = size(audit / "events.jsonl")
        child.fill_disk(before + 700)  # room for a line and a half of the next batch
        failed = child.record("events", 20, 60)
        assert not failed["ok"] and "File too large" in failed["error"], failed
        assert size(audit / "events.jsonl") == before  # the partial write was cut back
        child.free_disk()
        assert child.record("events", 20, 60)["ok"]
    finally:
        child.free_disk()
        child.close()
    lines = (audit / "events.jsonl").read_bytes().splitlines()
    assert [EVENTS.validate_json(line) for line in lines] == long_recorded.events[:60]


def test_a_jsonl_file_with_a_torn_last_line_is_cut_back_when_the_sink_opens_it(
    long_recorded: Recorded, tmp_path: Path
) -> None:
    from rackplane.streams.audit import JsonlAuditSink

    sink = JsonlAuditSink(tmp_path)
    sink.record_events(long_recorded.events[:3])
    sink.close()
    with (tmp_path / "events.jsonl").open("ab") as f:  # a crash in the middle of a write
        f.write(EVENTS.dump_json(long_recorded.events[3])[:25])
    sink = JsonlAuditSink(tmp_path)
    sink.record_events(long_recorded.events[3:5])
    sink.close()
    lines = (tmp_path / "events.jsonl").read_bytes().splitlines()
    assert [EVENTS.validate_json(line) for line in lines] == long_recorded.events[:5]
    assert os.path.getsize(tmp_path / "events.jsonl") == sum(len(x) + 1 for x in lines)
