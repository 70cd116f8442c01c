"""rackplane makes its own topics, with a log that never forgets, and refuses topics that would
let it forget or split a cluster (on Tansu in `make test`, on Apache Kafka in `make test-kafka`).
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from rackplane.streams.config import StreamConfig
from rackplane.streams.topics import TopicsError, _configs, ensure_topics
from tests.conftest import BrokerUnderTest

pytestmark = pytest.mark.broker


def _config(broker: BrokerUnderTest, **fields: object) -> StreamConfig:
    name = f"t{uuid.uuid4().hex[:8]}"
    return StreamConfig(broker=f"kafka://{broker.bootstrap}", prefix=name, app_id=name, **fields)  # type: ignore[arg-type]


async def _admin(broker: BrokerUnderTest) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    return admin


async def test_the_topics_are_created_with_the_partitions_and_an_events_log_kept_for_ever(
    broker: BrokerUnderTest,
) -> None:
    config = _config(broker, partitions=3, max_event_bytes=2 * 1_048_576)
    await ensure_topics(config)
    await ensure_topics(config)  # again: existing topics are kept as they are
    admin = await _admin(broker)
    try:
        described = await admin.describe_topics([config.topic(n) for n in ("commands", "events")])
        events = await _configs(admin, config.topic("events"))
    finally:
        await admin.close()
    assert [len(t["partitions"]) for t in described] == [3, 3]
    assert events["retention.ms"] == "-1"
    assert events["retention.bytes"] == "-1"
    assert events["max.message.bytes"] == str(2 * 1_048_576)


async def _make_events_topic(
    broker: BrokerUnderTest, config: StreamConfig, partitions: int, **configs: str
) -> None:
    """An events topic made by someone else: what `configs` says, a message limit that takes
    a decision unless `configs` says otherwise, the broker's defaults for the rest (Apache
    Kafka: a week's retention)."""
    configs = {"max.message.bytes": str(config.max_event_bytes), **configs}
    admin = await _admin(broker)
    try:
        await admin.create_topics(
            [NewTopic(config.topic("events"), partitions, 1, topic_configs=configs)]
        )
    finally:
        await admin.close()


async def test_an_events_topic_that_forgets_after_a_week_is_refused_unless_allowed(
    broker: BrokerUnderTest,
) -> None:
    config = _config(broker, partitions=2)
    await _make_events_topic(broker, config, 2, **{"retention.ms": "604800000"})
    with pytest.raises(TopicsError, match=r"finite retention \(retention.ms=604800000\)"):
        await ensure_topics(config)
    allowed = StreamConfig(**{**config.__dict__, "allow_finite_retention": True})
    await ensure_topics(allowed)  # said at WARNING, and it starts


async def test_an_events_topic_with_other_partitions_than_the_commands_is_refused(
    broker: BrokerUnderTest,
) -> None:
    config = _config(broker, partitions=4)
    await _make_events_topic(broker, config, 2, **{"retention.ms": "-1", "retention.bytes": "-1"})
    with pytest.raises(TopicsError, match="has 2 partitions, the configuration says 4"):
        await ensure_topics(config)


async def test_an_events_topic_taking_smaller_messages_than_a_decision_is_refused(
    broker: BrokerUnderTest,
) -> None:
    config = _config(broker, partitions=1)
    await _make_events_topic(
        broker, config, 1, **{"retention.ms": "-1", "retention.bytes": "-1",
                               "max.message.bytes": "100000"}
    )  # fmt: skip
    with pytest.raises(TopicsError, match="at most 100,000 bytes, below max_event_bytes"):
        await ensure_topics(config)


def test_the_worker_refuses_to_start_on_a_forgetting_log_in_one_line(
    broker: BrokerUnderTest,
) -> None:
    import asyncio

    config = _config(broker, partitions=1)
    asyncio.run(_make_events_topic(broker, config, 1, **{"retention.bytes": "1073741824"}))
    result = subprocess.run(
        [
            sys.executable, "-m", "rackplane", "worker", "--broker", config.broker,
            "--prefix", config.prefix, "--app-id", config.app_id, "--partitions", "1",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "finite retention (" in lines[0] and "retention.bytes=1073741824" in lines[0]
    assert "Traceback" not in result.stderr
