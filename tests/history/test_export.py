"""Parquet export, partitioned by day, read back by the same reader; bad paths are clear."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackplane.history import HistoryError, open_history
from rackplane.history.export import export_parquet
from rackplane.history.verify import verify
from rackplane.models import CordonNode
from tests.builders import cmd
from tests.history.conftest import Recorded
from tests.history.test_sink import rejection


@pytest.fixture(scope="module")
def with_everything(recorded: Recorded, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded run plus commands and rejections (the simulator records only events)."""
    import shutil

    from rackplane.history import DuckDBAuditSink

    path = tmp_path_factory.mktemp("full") / "h.duckdb"
    shutil.copy(recorded.path, path)
    cluster = recorded.scenario.topology.cluster
    with DuckDBAuditSink(path) as sink:
        sink.record_commands([cmd(CordonNode, cluster=cluster, node=f"r0001n0{i}") for i in (1, 2)])
        sink.record_rejections([rejection(1)])
    return path


def test_a_parquet_export_reads_back_exactly_and_verifies(
    with_everything: Path, tmp_path: Path
) -> None:
    out = tmp_path / "export"
    with open_history(with_everything) as db:
        counts = export_parquet(db, out)
        cluster = db.clusters()[0]
        events, commands, rejections = (db.events(cluster), db.commands(cluster), db.rejections())
    assert counts["events"] == len(events) and counts["commands"] == 2
    days = sorted(p.name for p in (out / "events").iterdir())
    assert len(days) >= 4 and all(d.startswith("day=2026-") for d in days)
    with open_history(out) as pq:
        assert pq.clusters() == [cluster]
        assert pq.events(cluster) == events
        assert pq.commands(cluster) == commands
        assert pq.rejections() == rejections
        assert pq.events(cluster, upto_seq=10) == events[:10]
        assert all(r.ok for r in verify(pq))


def test_an_export_of_an_empty_table_still_reads_back(recorded: Recorded, tmp_path: Path) -> None:
    with open_history(recorded.path) as db:
        export_parquet(db, tmp_path / "x")
    with open_history(tmp_path / "x") as pq:
        assert pq.counts()["commands"] == 0 and pq.commands("sim") == []


def test_exporting_over_existing_files_is_refused(recorded: Recorded, tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with open_history(recorded.path) as db, pytest.raises(HistoryError, match="not an empty"):
        export_parquet(db, tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("what", ["missing", "text-file", "empty-dir"])
def test_opening_something_that_is_not_a_history_names_the_path(what: str, tmp_path: Path) -> None:
    path = tmp_path / what
    if what == "text-file":
        path.write_text("hello")
    elif what == "empty-dir":
        path.mkdir()
    with pytest.raises(HistoryError, match=what):
        open_history(path)
