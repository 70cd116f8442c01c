"""A consumer with a short fetch wait reads on at the end of a long partition.

Tansu's trap (see `rackplane.streams._fetch_wait`): a fetch costs time in proportion to the
record batches the partition holds, and Tansu answers at the end of the fetch's max wait with
what it gathered by then, which past ~2,000 batches per millisecond of wait is nothing. The
consumer must raise its wait rather than ask again for ever. On Apache Kafka the same reads
simply work.
"""

from __future__ import annotations

import time

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.broker._batches import fill_one_record_batches, raw_fetch
from tests.broker._log import TopicFactory
from tests.conftest import BrokerUnderTest

pytestmark = pytest.mark.broker

BATCHES = 20_000
"""One record each: ~10 ms of Tansu's time per fetch here, 10 times the wait below."""
WAIT_MS = 1
TAIL = 10


async def test_a_consumer_at_a_one_ms_wait_reads_the_end_of_a_partition_of_many_batches(
    broker: BrokerUnderTest, new_topic: TopicFactory
) -> None:
    topic = await new_topic()
    tp = TopicPartition(topic, 0)
    await fill_one_record_batches(broker.bootstrap, topic, BATCHES)
    start = BATCHES - TAIL
    if broker.kind == "tansu":
        # The trap is there (else this test proves nothing): the answer is empty, no error,
        # with the end of the partition past the offset asked for.
        assert await raw_fetch(broker.bootstrap, tp, start, WAIT_MS) == (BATCHES, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, fetch_max_wait_ms=WAIT_MS
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        offsets: list[int] = []
        deadline = time.monotonic() + 10
        while len(offsets) < TAIL and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500)
            offsets += [r.offset for r in batch.get(tp, [])]
    finally:
        await consumer.stop()
    assert offsets == list(range(start, BATCHES)), (
        "the consumer stopped at the end of a long partition"
    )
