"""The exporters publish telemetry keyed by cluster on the suite's broker (one partition holds a
cluster's telemetry, so one worker sees every node of a rack: the GPU Manager's rack rule)."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.models import TELEMETRY, NodeTelemetry
from rackplane.streams.config import StreamConfig
from rackplane.streams.topics import ensure_topics
from tests.conftest import BrokerUnderTest
from tests.exporters.fake_nvml import FakeNvml

pytestmark = pytest.mark.broker
SAMPLE = Path(__file__).parent.parent / "fixtures" / "dcgm" / "dcgm_exporter_sample.prom"
runner = CliRunner()


def config(broker: BrokerUnderTest) -> StreamConfig:
    name = f"x{uuid.uuid4().hex[:8]}"
    c = StreamConfig(broker=f"kafka://{broker.bootstrap}", prefix=name, app_id=name)
    asyncio.run(ensure_topics(c))
    return c


def published(c: StreamConfig, n: int) -> list[tuple[str, NodeTelemetry]]:
    async def read() -> list[tuple[str, NodeTelemetry]]:
        consumer = AIOKafkaConsumer(
            c.topic("telemetry"), bootstrap_servers=c.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        out: list[tuple[str, NodeTelemetry]] = []
        try:
            while len(out) < n:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                for records in batch.values():
                    out += [(r.key.decode(), TELEMETRY.validate_json(r.value)) for r in records]
        finally:
            await consumer.stop()
        return out

    return asyncio.run(read())


def test_the_dcgm_exporter_publishes_each_node_keyed_by_cluster(broker: BrokerUnderTest) -> None:
    c = config(broker)
    url = f"kafka://{broker.bootstrap}"
    args = ["exporter", "dcgm", "--file", str(SAMPLE), "--count", "2", "--interval", "100ms",
            "--cluster", "c1", "--broker", url, "--prefix", c.prefix]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "4 samples published" in " ".join(result.stderr.split())
    records = published(c, 4)
    assert sorted(s.node for _, s in records) == ["424773df46e0"] * 2 + ["551bdf382151"] * 2
    assert all(k == s.cluster == "c1" for k, s in records)


def test_the_nvml_exporter_publishes_one_sample_per_interval(
    broker: BrokerUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = config(broker)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    args = ["exporter", "nvml", "--node", "h200", "--count", "3", "--interval", "50ms",
            "--broker", f"kafka://{broker.bootstrap}", "--prefix", c.prefix]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    records = published(c, 3)
    assert [s.node for _, s in records] == ["h200"] * 3
    assert all(k == s.cluster for k, s in records)
    assert records[0][1].gpus[0].model == "NVIDIA H200" and records[0][1].gpus[0].xids == ()


def test_an_unreachable_broker_is_said_plainly() -> None:
    args = ["exporter", "dcgm", "--file", str(SAMPLE), "--count", "1",
            "--broker", "kafka://127.0.0.1:9"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "cannot publish to kafka://127.0.0.1:9" in " ".join(
        result.stderr.split()
    )
