"""`rackplane recorder`: one history for the whole pipeline, readable while it records."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.history import open_history
from rackplane.history.sink import reading_copy
from rackplane.models import JobSpec, SubmitJob
from tests.streams.conftest import Pipeline, new_cluster

pytestmark = pytest.mark.broker
runner = CliRunner()


def _recorder(p: Pipeline, db: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "rackplane", "recorder", "--db", str(db)]
    argv += ["--broker", p.config.broker, "--prefix", p.config.prefix]
    return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)


def _seqs(db: Path, cluster: str) -> tuple[list[int], str]:
    with open_history(db) as reader:
        if cluster not in reader.clusters():
            return [], reader.note
        return [e.seq for e in reader.events(cluster)], reader.note


def test_the_recorder_is_read_while_it_records_and_holds_everything_once_stopped(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    db = tmp_path / "history.duckdb"
    c = new_cluster()
    proc = _recorder(pipeline, db)
    try:
        asyncio.run(pipeline.register(c))
        asyncio.run(
            pipeline.send(
                *(
                    SubmitJob(
                        id=pipeline.command_id(),
                        cluster=c,
                        actor="alice",
                        job=JobSpec(id=f"j{n}", nodes=2),
                    )
                    for n in range(3)
                )
            )
        )
        events = asyncio.run(pipeline.events(c, lambda es: len(es) >= 7))
        want = [e.seq for e in events]
        deadline = time.monotonic() + 60
        seen: list[int] = []
        note = ""
        while time.monotonic() < deadline:  # the reading copy catches up within seconds
            if reading_copy(db).exists():
                seen, note = _seqs(db, c)
                if seen[: len(want)] == want:
                    break
            time.sleep(0.5)
        assert seen[: len(want)] == want
        assert "is being recorded" in note  # the file is held: its copy was read

        # The CLI reads it the same way, and says so in one line.
        result = runner.invoke(app, ["history", "job", "j1", "--db", str(db), "--cluster", c])
        assert result.exit_code == 0, result.output
        assert "is being recorded" in result.stderr and "j1" in result.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "recorder stopped" in err and "Traceback" not in err
    final, note = _seqs(db, c)
    assert note == "" and final[: len(want)] == want  # the file itself, released


def test_the_recorder_refuses_a_dead_broker_in_one_line(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["recorder", "--db", str(tmp_path / "h.duckdb"), "--broker", "kafka://127.0.0.1:1"]
    )
    assert result.exit_code == 2, result.output
    assert "cannot reach kafka://127.0.0.1:1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "h.duckdb").exists()
