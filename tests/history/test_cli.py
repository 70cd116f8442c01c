"""`rackplane replay` and `rackplane history ...` as a user runs them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.history import state_at
from rackplane.projections import cluster_summary, state_digest
from tests.history.conftest import POLICY, Recorded

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env=WIDE)
    return result.exit_code, result.stdout, result.stderr


def test_replay_at_a_seq_prints_the_state_of_that_seq_as_json(recorded: Recorded) -> None:
    code, out, err = run("replay", "--db", str(recorded.path), "--seq", "40", "--json")
    assert code == 0, err
    data = json.loads(out)
    want = state_at(recorded.events, seq=40)
    assert (data["seq"], data["digest"]) == (40, state_digest(want))
    assert data["summary"]["allocated"] == cluster_summary(want).allocated
    assert len(data["racks"]) == 6 and {"rack", "free", "spare", "failed"} <= set(data["racks"][0])


def test_replay_at_a_time_prints_tables(recorded: Recorded) -> None:
    at = recorded.events[30].at.isoformat()
    code, out, err = run("replay", "--db", str(recorded.path), "--at", at)
    assert code == 0, err
    for text in ("Rack occupancy", "r0001", "allocated nodes", "Jobs"):
        assert text in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--seq", "3", "--at", "2026-12-01"], "exactly one", id="both"),
        pytest.param([], "exactly one", id="neither"),
        pytest.param(["--at", "yesterday"], "ISO 8601", id="bad-time"),
        pytest.param(["--seq", "3", "--cluster", "other"], "no events of cluster", id="cluster"),
        pytest.param(["--what-if", "policy=best"], "unknown policy", id="bad-what-if"),
        pytest.param(["--at", "2020-01-01"], "no event", id="before-the-start"),
    ],
)
def test_bad_replay_requests_are_clear_errors(
    recorded: Recorded, args: list[str], message: str
) -> None:
    code, _, err = run("replay", "--db", str(recorded.path), *args)
    assert code == 2
    assert message in err.replace("\n", " ")
    assert "Traceback" not in err


def test_a_missing_history_is_named(tmp_path: Path) -> None:
    code, _, err = run("history", "stats", "--db", str(tmp_path / "none.duckdb"))
    assert code == 2 and "none.duckdb" in err


def test_what_if_prints_the_record_and_both_runs_side_by_side(recorded: Recorded) -> None:
    code, out, err = run(
        "replay", "--db", str(recorded.path), "--what-if", "policy=naive", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["recorded_policy"] == POLICY and data["what_if"] == "policy=naive"
    assert data["rerun"]["swaps"] == data["recorded"]["swaps"]
    assert data["what_if_metrics"]["slices_rack_local_fraction"] < 1.0
    code, out, _ = run("replay", "--db", str(recorded.path), "--what-if", "spares=0")
    assert code == 0 and "recorded (from the log)" in out and "slices_rack_local_fraction" in out


def test_history_job_tells_the_story_of_a_job(recorded: Recorded) -> None:
    swapped = next(e for e in recorded.events if e.type == "NodeSwapped")
    job = swapped.job  # type: ignore[union-attr]
    code, out, err = run("history", "job", job, "--db", str(recorded.path), "--json")
    assert code == 0, err
    kinds = [e["type"] for e in json.loads(out)["timeline"]]
    assert kinds[:2] == ["JobSubmitted", "JobPlaced"] and "NodeSwapped" in kinds
    code, out, _ = run("history", "job", job, "--db", str(recorded.path))
    assert code == 0 and "swapped for" in out and "placed" in out


def test_history_node_and_rack_list_what_happened_there(recorded: Recorded) -> None:
    failed = next(e for e in recorded.events if e.type == "NodeFailed")
    node, rack = failed.node, failed.rack  # type: ignore[union-attr]
    code, out, _ = run("history", "node", node, "--db", str(recorded.path), "--json")
    assert code == 0
    assert "NodeFailed" in [e["type"] for e in json.loads(out)["timeline"]]
    code, out, _ = run("history", "rack", rack, "--db", str(recorded.path), "--json")
    assert code == 0
    assert {"JobPlaced", "NodeFailed"} <= {e["type"] for e in json.loads(out)["timeline"]}
    code, _, err = run("history", "node", "r9999n01", "--db", str(recorded.path))
    assert code == 2 and "r9999n01" in err


def test_history_stats_counts_interruptions_and_losses(recorded: Recorded) -> None:
    code, out, err = run("history", "stats", "--db", str(recorded.path), "--json")
    assert code == 0, err
    data = json.loads(out)
    failures = sum(1 for e in recorded.events if e.type == "NodeFailed")
    assert sum(data["node_interruptions"].values()) == failures > 0
    assert data["node_mtbi_days"] == pytest.approx(108 * data["span_days"] / failures)
    assert set(data["blocked_hours"]) == {"topology", "capacity"}
    code, out, _ = run("history", "stats", "--db", str(recorded.path))
    assert code == 0 and "node MTBI (estimated)" in out


def test_verify_passes_then_names_an_edited_row(recorded: Recorded, tmp_path: Path) -> None:
    code, out, _ = run("history", "verify", "--db", str(recorded.path), "--json")
    assert code == 0 and json.loads(out)["ok"] is True
    copy = tmp_path / "copy.duckdb"
    shutil.copy(recorded.path, copy)
    con = duckdb.connect(str(copy))
    con.execute("UPDATE events SET job = 'someone' WHERE seq = 25")
    con.close()
    code, out, _ = run("history", "verify", "--db", str(copy))
    assert code == 1
    assert "edited" in out and "row_id 25" in out


def test_export_then_replay_and_history_read_the_parquet_directory(
    recorded: Recorded, tmp_path: Path
) -> None:
    out_dir = tmp_path / "pq"
    code, out, err = run("history", "export", "--db", str(recorded.path), "--parquet",
                         str(out_dir), "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["rows"]["events"] == len(recorded.events)
    code, out, _ = run("replay", "--db", str(out_dir), "--seq", "40", "--json")
    assert code == 0 and json.loads(out)["digest"] == state_digest(
        state_at(recorded.events, seq=40)
    )
    code, out, _ = run("history", "stats", "--db", str(out_dir), "--json")
    assert code == 0 and json.loads(out)["events"] == len(recorded.events)
    code, _, err = run("history", "export", "--db", str(recorded.path), "--parquet", str(out_dir))
    assert code == 2 and "not an empty directory" in err


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded run on a shared cluster: team-b borrows team-a's quota for 100 h; team-a's
    two jobs come back at hour 10 and reclaim two of team-b's four (tests/sim/test_queues.py)."""
    from rackplane.history import DuckDBAuditSink
    from rackplane.sim import ScenarioDoc, build_scenario
    from rackplane.sim.simulator import Simulation
    from tests.sim.test_queues import _doc

    def jobs(queue: str, n: int, at: int, hours: int) -> list[dict[str, object]]:
        one = {"submit_hours": at, "nodes": 16, "duration_hours": hours, "queue": queue}
        return [one | {"class": queue, "checkpoint_minutes": 30} for _ in range(n)]

    workload = {"classes": [], "jobs": jobs("team-b", 4, 0, 100) + jobs("team-a", 2, 10, 10)}
    sim = Simulation(build_scenario(ScenarioDoc.model_validate(_doc(workload=workload))), POLICY)
    path = tmp_path_factory.mktemp("history") / "shared.duckdb"
    with DuckDBAuditSink(path, buffer=64) as sink:
        sim.engine.sinks.append(sink.add_event)
        sim.run()
    return path


def test_what_if_on_a_shared_cluster_prints_each_runs_queues(shared: Path) -> None:
    code, out, err = run("replay", "--db", str(shared), "--what-if", "spares=1", "--json")
    assert code == 0, err
    data = json.loads(out)
    queues = [
        [(q["queue"], q["jobs_submitted"], q["preemptions"]) for q in data[run]["queues"]]
        for run in ("rerun", "what_if_metrics")
    ]
    want = [("team-a", 2, {}), ("team-b", 4, {"reclaim": 2})]
    assert queues == [want, want]
    assert data["rerun"]["jain_index"] == pytest.approx(0.8, abs=1e-4)  # held 16 and 48 of 32
    code, out, err = run("replay", "--db", str(shared), "--what-if", "spares=1")
    assert code == 0, err
    words = " ".join(out.split())  # a table's title wraps at its width
    assert "Queues (re-run: tas+spares+defrag): Jain's fairness index 0.800" in words
    assert "Queues (what-if: spares_per_rack=1): Jain's fairness index" in words
    assert "preempted: reclaim" in out and "'queue': 'team-a'" not in out


def test_what_if_without_queues_prints_no_queue_table(recorded: Recorded) -> None:
    code, out, err = run("replay", "--db", str(recorded.path), "--what-if", "spares=0")
    assert code == 0, err
    assert "Queues (" not in out and "jain_index" in out
