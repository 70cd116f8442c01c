"""`rackplane up --kafka` refuses in one line, exit status 2 and no traceback when Java or
Maven is missing, Java is too old, or Maven fails; it takes one broker, not two. Without
`--kafka` or `--tansu`, `up` falls back to the embedded broker in those cases, and says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_tools import fake_tool


def _up(
    path: Path, cache: Path, *args: str, flag: str = "--kafka"
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=str(path), RACKPLANE_CACHE=str(cache))
    chosen = (flag,) if flag else ()  # "": `up` chooses
    argv = [sys.executable, "-m", "rackplane", "up", *chosen, "--headless", "--duration", "5"]
    return subprocess.run(
        [*argv, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    # Before it, progress (the fetch announced); the error is the one last line.
    assert [line for line in lines if line.startswith("error")] == lines[-1:], done.stderr
    return lines[-1]


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH of its own: no java, no mvn until a test puts a fake one there."""
    path = tmp_path / "bin"
    path.mkdir()
    return path


def test_without_java_it_says_so(bin_dir: Path, tmp_path: Path) -> None:
    line = _one_line_error(_up(bin_dir, tmp_path / "cache"))
    assert "`java` is not on PATH" in line and "Java 17+" in line


def test_an_old_java_is_refused(bin_dir: Path, tmp_path: Path) -> None:
    fake_tool(bin_dir, "java", "echo 'openjdk version \"11.0.22\" 2024-01-16' >&2")
    line = _one_line_error(_up(bin_dir, tmp_path / "cache"))
    assert "is Java 11" in line and "needs Java 17+" in line


def test_without_maven_and_an_empty_cache_it_says_so(bin_dir: Path, tmp_path: Path) -> None:
    fake_tool(bin_dir, "java", "echo 'openjdk version \"17.0.15\" 2025-04-15' >&2")
    line = _one_line_error(_up(bin_dir, tmp_path / "cache"))
    assert "Maven (`mvn`) is not on PATH" in line
    assert str(tmp_path / "cache" / "kafka-4.1.1") in line
    assert not (tmp_path / "cache" / "kafka-4.1.1").exists()


def test_a_failed_fetch_is_one_line_with_the_details_in_a_file(
    bin_dir: Path, tmp_path: Path
) -> None:
    fake_tool(bin_dir, "java", "echo 'openjdk version \"21.0.2\" 2024-01-16' >&2")
    fake_tool(bin_dir, "mvn", "echo '[ERROR] Could not transfer artifact kafka_2.13'; exit 1")
    line = _one_line_error(_up(bin_dir, tmp_path / "cache"))
    assert "Maven failed to fetch the Kafka jars (exit 1)" in line
    details = Path(line.rsplit("(details: ", 1)[1].rstrip(")"))
    assert "Could not transfer artifact kafka_2.13" in details.read_text()
    # Nothing half-fetched is left where a later run would take it for the jars.
    assert not (tmp_path / "cache" / "kafka-4.1.1").exists()


def test_kafka_and_broker_together_are_refused(bin_dir: Path, tmp_path: Path) -> None:
    line = _one_line_error(_up(bin_dir, tmp_path / "cache", "--broker", "kafka://127.0.0.1:9"))
    assert "--broker and --kafka" in line


def test_tansu_and_broker_together_are_refused(bin_dir: Path, tmp_path: Path) -> None:
    line = _one_line_error(
        _up(bin_dir, tmp_path / "cache", "--broker", "kafka://127.0.0.1:9", flag="--tansu")
    )
    assert "--broker and --tansu" in line


def _ran_on_tansu(done: subprocess.CompletedProcess[str]) -> str:
    """The demo ran on the embedded broker; what `up` said, on one line."""
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    said = " ".join(done.stderr.split())
    assert said.count("its cost grows with it") == 1
    assert "starting Apache Kafka" not in said
    summary = json.loads(done.stdout)
    assert summary["broker"].startswith("kafka://127.0.0.1:")
    assert summary["commands"] > 0
    return said


def test_by_default_without_java_the_demo_runs_on_the_embedded_broker_and_says_why(
    bin_dir: Path, tmp_path: Path
) -> None:
    said = _ran_on_tansu(_up(bin_dir, tmp_path / "cache", "--json", flag=""))
    assert "`up` starts Apache Kafka instead when it can; not here: `java` is not on PATH" in said


def test_by_default_a_failed_fetch_falls_back_to_the_embedded_broker(
    bin_dir: Path, tmp_path: Path
) -> None:
    fake_tool(bin_dir, "java", "echo 'openjdk version \"21.0.2\" 2024-01-16' >&2")
    fake_tool(bin_dir, "mvn", "echo '[ERROR] Could not transfer artifact kafka_2.13'; exit 1")
    said = _ran_on_tansu(_up(bin_dir, tmp_path / "cache", "--json", flag=""))
    assert "Java 17+ found: the broker is a local Apache Kafka" in said
    assert "Maven failed to fetch the Kafka jars (exit 1) (details: " in said
    assert "not here: Apache Kafka did not start (above)" in said
    assert not (tmp_path / "cache" / "kafka-4.1.1").exists()
