"""Kafka SASL/SCRAM end to end: the settings reach the worker (Faust and aiokafka) and the
client. Runs in `make test-kafka`: the Apache Kafka that `scripts/kafka/kafka_server.py`
starts also listens with SASL_PLAINTEXT + SCRAM-SHA-512 (Tansu has no SASL)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from aiokafka.errors import KafkaError

from rackplane.config import load_settings
from rackplane.models import RegisterTopology, TopologyRegistered
from rackplane.streams.client import Client
from rackplane.streams.config import StreamConfig
from rackplane.streams.process import WorkerProcess
from rackplane.streams.topics import ensure_topics
from tests.streams.conftest import new_cluster, small_topology

pytestmark = [pytest.mark.broker, pytest.mark.kafka_only]


def _needed(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run through `make test-kafka` (scripts/kafka)")
    return value


@pytest.fixture
def sasl_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The SASL settings as an operator sets them: RACKPLANE_* variables."""
    env = {
        "RACKPLANE_BROKER": _needed("RACKPLANE_TEST_SASL_BROKER"),
        "RACKPLANE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "RACKPLANE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "RACKPLANE_KAFKA_SASL_USERNAME": _needed("RACKPLANE_TEST_SASL_USERNAME"),
        "RACKPLANE_KAFKA_SASL_PASSWORD": _needed("RACKPLANE_TEST_SASL_PASSWORD"),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # the worker subprocess inherits them
    return env


def config_from_env(prefix: str) -> StreamConfig:
    flags = {"topic_prefix": prefix, "app_id": prefix, "partitions": 2}
    return load_settings(flags=flags).settings.stream_config()


def test_a_worker_and_a_client_work_over_sasl_scram(
    sasl_env: dict[str, str], tmp_path: Path
) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    config = config_from_env(name)
    assert config.security.protocol == "SASL_PLAINTEXT"
    asyncio.run(ensure_topics(config))
    cluster = new_cluster()
    with WorkerProcess(config, data_dir=tmp_path):

        async def register() -> list[object]:
            async with Client(config) as client:
                command = RegisterTopology(
                    id=f"cmd-{name}",
                    cluster=cluster,
                    actor="alice",
                    topology=small_topology(cluster),
                )
                return list(await client.outcome(command, timeout=60))

        events = asyncio.run(register())
    assert [type(e) for e in events] == [TopologyRegistered]


def test_a_wrong_password_is_refused_by_the_broker(
    sasl_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RACKPLANE_KAFKA_SASL_PASSWORD", "not-the-password")
    config = config_from_env(f"t{uuid.uuid4().hex[:8]}")

    async def connect() -> None:
        async with Client(config):
            pass

    with pytest.raises(KafkaError):
        asyncio.run(connect())
