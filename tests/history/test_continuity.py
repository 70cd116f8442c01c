"""A history with a gap: `history verify` names it, and nothing folds over it.

The gap is the one issue 15 saw: a full disk whose failed batches were acknowledged left seqs
missing from the store while every hash chain still held (a batch never stored breaks no
link: the next one chains onto the last row that was stored).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.history import DuckDBAuditSink, HistoryGap, open_history, state_at
from rackplane.history.continuity import check_seqs
from rackplane.history.verify import verify
from rackplane.tui import SourceError, history_source
from tests.history.conftest import Recorded

runner = CliRunner()
GAP = range(40, 52)
"""The seqs the gappy history lacks (a lost batch of 12)."""


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def gappy(recorded: Recorded, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded run without seqs 40..51, as the audit of issue 15 stored it."""
    path = tmp_path_factory.mktemp("gappy") / "gappy.duckdb"
    with DuckDBAuditSink(path) as sink:
        sink.record_events([e for e in recorded.events if e.seq not in GAP])
    return path


def test_the_chains_hold_and_the_seq_check_names_the_gap(gappy: Path) -> None:
    with open_history(gappy) as reader:
        assert all(r.ok for r in verify(reader))  # what `verify` saw before: "intact"
        (report,) = check_seqs(reader)
    assert not report.ok and report.problem == "missing"
    assert report.line() == f"cluster {report.cluster}: seq 40 missing (stored 39, then 52)"
    assert report.missing == len(GAP) and report.duplicates == 0


def test_verify_prints_the_first_problem_in_one_line_and_fails(
    gappy: Path, recorded: Recorded
) -> None:
    code, out, _ = run("history", "verify", "--db", str(gappy))
    cluster = recorded.events[0].cluster
    assert code == 1
    assert f"cluster {cluster}: seq 40 missing (stored 39, then 52)" in out
    code, out, _ = run("history", "verify", "--db", str(gappy), "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False
    assert all(t["ok"] for t in data["tables"])
    (c,) = data["clusters"]
    assert (c["problem"], c["seq"], c["missing"]) == ("missing", 40, 12)


def test_verify_passes_a_gapless_history(recorded: Recorded) -> None:
    code, out, _ = run("history", "verify", "--db", str(recorded.path), "--json")
    assert code == 0
    (c,) = json.loads(out)["clusters"]
    assert c["ok"] and c["events"] == c["last_seq"] == len(recorded.events)


def test_a_history_without_its_first_events_says_where_it_starts(
    recorded: Recorded, tmp_path: Path
) -> None:
    path = tmp_path / "late.duckdb"
    with DuckDBAuditSink(path) as sink:
        sink.record_events(recorded.events[3:])
    with open_history(path) as reader:
        (report,) = check_seqs(reader)
    assert report.detail() == "seq 1 missing (the first stored is 4)"


def test_a_seq_stored_twice_in_an_export_is_named(recorded: Recorded, tmp_path: Path) -> None:
    out_dir = tmp_path / "pq"
    code, _, err = run("history", "export", "--db", str(recorded.path), "--parquet", str(out_dir))
    assert code == 0, err
    first = sorted((out_dir / "events").rglob("*.parquet"))[0]
    shutil.copy(first, first.with_name("copy-" + first.name))  # the same day's rows twice
    with open_history(out_dir) as reader:
        (report,) = check_seqs(reader)
        assert report.problem == "duplicate" and report.seq == 1
        with pytest.raises(HistoryGap, match="seq 1 stored more than once"):
            reader.events(report.cluster)
    code, out, _ = run("history", "verify", "--db", str(out_dir))
    assert code == 1 and "seq 1 stored more than once" in out


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["replay", "--seq", "5000"], id="replay-seq"),
        pytest.param(["replay", "--seq", "45"], id="replay-seq-in-the-gap"),
        pytest.param(["replay", "--at", "2100-01-01"], id="replay-at"),
        pytest.param(["replay", "--what-if", "policy=naive"], id="what-if"),
        pytest.param(["history", "stats"], id="stats"),
        pytest.param(["history", "rack", "r0001"], id="timeline"),
    ],
)
def test_every_read_that_folds_refuses_the_gap_in_one_line(
    gappy: Path, recorded: Recorded, args: list[str]
) -> None:
    code, out, err = run(*args, "--db", str(gappy))
    assert code == 2 and out == ""
    cluster = recorded.events[0].cluster
    assert f"cluster {cluster}: seq 40 missing (stored 39, then 52)" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_replay_before_the_gap_is_still_true(gappy: Path, recorded: Recorded) -> None:
    with open_history(gappy) as reader:
        events = reader.events(recorded.events[0].cluster, upto_seq=39)
    assert state_at(events) == state_at(recorded.events, seq=39)
    code, out, err = run("replay", "--db", str(gappy), "--seq", "39", "--json")
    assert code == 0, err
    assert json.loads(out)["seq"] == 39


def test_the_console_refuses_a_history_with_a_gap(gappy: Path, recorded: Recorded) -> None:
    with pytest.raises(SourceError, match=r"seq 40 missing \(stored 39, then 52\)") as caught:
        history_source(gappy)
    assert recorded.events[0].cluster in str(caught.value)
