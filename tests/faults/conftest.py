"""The brokers of the fault suite, and where each case writes its counts.

`make test-faults` runs this directory (`-m faults`; `make test` deselects it). The suite starts
its own brokers: one Apache Kafka 4.1.1 (jars from `scripts/kafka/kafka_server.py`'s cache)
shared by the cases that do not hurt it, a fresh one for each case that kills or pauses its
broker, and one embedded Tansu for the cases that apply there too. Tansu keeps its log in
memory, so a killed or paused broker applies to Apache Kafka only.

Every case writes `<case>-<broker>.json` (its counts, see `_check.Verdict`) into
`$RACKPLANE_FAULT_REPORT`, else into a directory under pytest's tmp dir (printed at the end).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rackplane.streams import EmbeddedBroker
from tests.faults._kafka import kafka_server

KINDS = ("kafka", "tansu")


@dataclass(frozen=True)
class FaultBroker:
    """A broker a case runs against; `server` is set when the case may hurt it."""

    kind: str
    bootstrap: str
    server: Any = None  # kafka_server.KafkaServer

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"


@pytest.fixture(scope="session")
def kafka_jars() -> Path:
    """The Kafka classpath (downloaded with Maven the first time, cached after)."""
    module = kafka_server()
    try:
        jars: Path = module.fetch_jars()
    except module.KafkaError as err:
        raise pytest.UsageError(f"the fault suite needs Apache Kafka: {err}") from err
    return jars


def _started_kafka(jars: Path) -> Any:
    module = kafka_server()
    try:
        return module.KafkaServer(jars).start()
    except module.KafkaError as err:
        raise AssertionError(f"Kafka did not start: {err}") from err


@pytest.fixture(scope="session")
def shared_kafka(kafka_jars: Path) -> Iterator[FaultBroker]:
    server = _started_kafka(kafka_jars)
    try:
        yield FaultBroker("kafka", server.bootstrap)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def shared_tansu() -> Iterator[FaultBroker]:
    with EmbeddedBroker() as tansu:
        yield FaultBroker("tansu", tansu.bootstrap)


@pytest.fixture(params=KINDS)
def any_broker(request: pytest.FixtureRequest) -> FaultBroker:
    """Each case that applies to both brokers runs once on each (shared brokers)."""
    name = "shared_kafka" if request.param == "kafka" else "shared_tansu"
    broker: FaultBroker = request.getfixturevalue(name)
    return broker


@pytest.fixture
def own_kafka(kafka_jars: Path) -> Iterator[FaultBroker]:
    """A fresh Kafka for a case that kills or pauses it."""
    server = _started_kafka(kafka_jars)
    try:
        yield FaultBroker("kafka", server.bootstrap, server)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where each case writes its counts (JSON)."""
    configured = os.environ.get("RACKPLANE_FAULT_REPORT")
    path = Path(configured) if configured else tmp_path_factory.mktemp("fault-report")
    path.mkdir(parents=True, exist_ok=True)
    _used.append(path)
    return path


_used: list[Path] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say where the counts went."""
    for path in _used:
        terminalreporter.write_line(f"fault suite counts (one JSON per case): {path}")
