"""The broker the contract suite runs against, and the Kafka clients it uses.

`RACKPLANE_TEST_BROKER=kafka://host:port` (set by `scripts/kafka/kafka_server.py run`) points
the suite at that broker; without it one embedded Tansu broker serves the whole session.
Every client a test opens is closed at teardown, also when the test fails.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.broker._log import ConsumerFactory, ProducerFactory, TopicFactory
from tests.conftest import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS, BrokerUnderTest


@pytest.fixture
async def new_topic(broker: BrokerUnderTest) -> AsyncIterator[TopicFactory]:
    """Create a topic with a unique name: `await new_topic(partitions=3)`."""
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()

    async def create(partitions: int = 1) -> str:
        name = f"rackplane.test.events.{uuid.uuid4().hex[:12]}"
        await admin.create_topics(
            [NewTopic(name=name, num_partitions=partitions, replication_factor=1)]
        )
        return name

    try:
        yield create
    finally:
        await admin.close()


@pytest.fixture
async def new_producer(broker: BrokerUnderTest) -> AsyncIterator[ProducerFactory]:
    """Start producers (closed at teardown). Not idempotent: Tansu has no idempotent producer."""
    started: list[AIOKafkaProducer] = []

    async def make() -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            acks="all",
            enable_idempotence=False,
            linger_ms=5,  # multi-record batches, as in production (and Tansu's trap)
        )
        await producer.start()
        started.append(producer)
        return producer

    try:
        yield make
    finally:
        for producer in started:
            await producer.stop()


@pytest.fixture
async def new_consumer(broker: BrokerUnderTest) -> AsyncIterator[ConsumerFactory]:
    """Start consumers reading from the earliest offset, committing only by hand.

    `await new_consumer(topic)` reads without a group; `group_id=...` joins a group.
    """
    started: list[AIOKafkaConsumer] = []

    async def make(topic: str, *, group_id: str | None = None) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group_id,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        await consumer.start()
        started.append(consumer)
        return consumer

    try:
        yield make
    finally:
        for consumer in started:
            await consumer.stop()


@pytest.fixture
def group_id() -> str:
    """A consumer-group id no other test uses."""
    return f"rackplane-test-{uuid.uuid4().hex[:12]}"
