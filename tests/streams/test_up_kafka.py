"""`rackplane up` and `up --kafka`: the demo on a local Apache Kafka 4.1.1 that `up` starts
(Java 17+, jars from the Maven cache; by default when it can), and nothing of it left running
afterwards, after the end of `--duration` or a SIGTERM while Kafka starts. In the Kafka tier
(`make test-kafka`, which fetches the jars first); CI has Java and Maven."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.broker, pytest.mark.kafka_only]

UP = [sys.executable, "-m", "rackplane", "up", "--kafka", "--headless"]


def _running(pattern: str) -> str:
    found = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True)
    return found.stdout.strip()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def test_up_runs_the_demo_on_kafka_by_default_when_java_is_here_and_stops_it() -> None:
    """No `--kafka`: Java 17+ is on PATH and the tier fetched the jars, so `up` chooses Kafka."""
    done = subprocess.run(
        [sys.executable, "-m", "rackplane", "up", "--headless", "--duration", "20", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert re.fullmatch(r"kafka://127\.0\.0\.1:\d+", summary["broker"])
    assert "Java 17+ found: the broker is a local Apache Kafka" in done.stderr
    assert "Kafka ready on" in done.stderr
    assert "its cost grows with it" not in " ".join(done.stderr.split())  # the embedded one's note
    assert summary["jobs_placed"] > 10
    assert summary["rejected"] == 0
    assert summary["command_to_event_ms_p50"] is not None
    workdir = re.search(r"logs in (\S+)", done.stderr)
    assert workdir is not None
    time.sleep(0.5)
    assert _running(workdir.group(1)) == ""  # neither the worker nor the JVM (its config is there)
    assert not _accepts(int(summary["broker"].rsplit(":", 1)[1]))
    (kafka_dir,) = Path(workdir.group(1)).glob("rackplane-kafka-*")
    assert (kafka_dir / "kafka.log").stat().st_size > 0  # the log is kept, the data is not
    assert not (kafka_dir / "data").exists()


def test_a_sigterm_while_kafka_starts_stops_the_jvm_too() -> None:
    process = subprocess.Popen(
        [*UP, "--duration", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    seen = []
    try:
        for line in process.stderr:
            seen.append(line)
            if "starting Apache Kafka" in line:
                break
        time.sleep(3)  # the JVM is up and formatting or starting, not ready yet
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = "".join(seen) + rest
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    workdir = re.search(r"logs in (\S+)\)", stderr)
    assert workdir is not None, stderr
    time.sleep(0.5)
    assert _running(workdir.group(1)) == ""
