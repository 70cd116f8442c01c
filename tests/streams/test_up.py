"""`rackplane up --tansu --headless --duration S --json`: the whole demo on the embedded broker,
and nothing left running."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from rackplane.history import open_history, state_at
from rackplane.history.verify import verify

EXPECTED = {
    "events", "commands", "rejected", "jobs_submitted", "jobs_placed", "jobs_blocked",
    "jobs_preempted", "placements", "blocks", "preemptions",
    "swaps", "migrations", "degradations", "slices_rack_local_fraction",
    "command_to_event_ms_p50", "command_to_event_ms_p99",
}  # fmt: skip


def test_up_runs_the_demo_headless_prints_a_summary_and_stops_everything(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    argv = ["up", "--tansu", "--headless", "--duration", "25", "--json", "--db", str(db)]
    done = subprocess.run(
        [sys.executable, "-m", "rackplane", *argv],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert set(summary) >= EXPECTED
    assert summary["jobs_placed"] > 10
    # Jobs are counted once, however often they were placed or blocked.
    assert summary["jobs_submitted"] >= summary["jobs_placed"]
    assert summary["jobs_submitted"] >= summary["jobs_blocked"]
    assert summary["placements"] >= summary["jobs_placed"]
    assert summary["blocks"] >= summary["jobs_blocked"]
    assert summary["events"] >= summary["jobs_placed"]
    assert summary["slices_rack_local_fraction"] == 1.0
    assert summary["rejected"] == 0
    assert summary["command_to_event_ms_p50"] is not None
    # On the embedded broker, said once: it slows as its log grows, and what to run instead
    # (`--tansu` chose it, so no reason why not Kafka).
    said = " ".join(done.stderr.split())
    assert said.count("its cost grows with it") == 1
    assert "For a longer run: rackplane up --kafka" in said
    assert "not here" not in said and "Java 17+ found" not in said
    # Nothing left running: neither the worker (its data dir) nor the broker (its port).
    workdir = re.search(r"logs in (\S+)", done.stderr)
    assert workdir is not None
    port = summary["broker"].rsplit(":", 1)[1]
    time.sleep(0.5)
    for pattern in (workdir.group(1), f"127.0.0.1:{port}"):
        found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
        assert found.stdout.strip() == "", f"still running: {pattern}"
    # The demo was recorded (`--db`): a history that verifies and replays.
    assert summary["history"] == str(db)
    with open_history(db) as reader:
        (cluster,) = reader.clusters()
        events = reader.events(cluster)
        assert sum(e.type == "JobPlaced" for e in events) > 10
        assert len(reader.commands(cluster)) > 10
        assert all(r.ok for r in verify(reader))
    assert state_at(events).seq == len(events)
    again = subprocess.run(
        [sys.executable, "-m", "rackplane", *argv], capture_output=True, text=True, check=False
    )
    assert again.returncode == 2 and "exists" in again.stderr
