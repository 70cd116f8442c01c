"""The event-log contract: what every broker behind `rackplane.events` must do.

One suite, run against the embedded Tansu broker (`pytest tests/broker`) and against Apache
Kafka 4.x (`python3 scripts/kafka/kafka_server.py run -- pytest tests/broker`). Events are
built with the real models and travel through `rackplane.streams.codec`, keyed by cluster id.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from aiokafka.structs import TopicPartition
from pydantic import ValidationError

from rackplane.models import Event
from rackplane.streams import decode_event, encode_event
from tests.broker._log import (
    ConsumerFactory,
    ProducerFactory,
    TopicFactory,
    append,
    append_raw,
    assert_nothing_more,
    cluster_events,
    interleave,
    read_exactly,
)

pytestmark = pytest.mark.broker


async def test_events_appended_for_one_cluster_are_read_back_in_order_with_gapless_seq(
    new_topic: TopicFactory, new_producer: ProducerFactory, new_consumer: ConsumerFactory
) -> None:
    topic = await new_topic(partitions=1)
    want = cluster_events("c-solo", 200)

    await append(await new_producer(), topic, want)
    consumer = await new_consumer(topic)
    records = await read_exactly(consumer, len(want))

    got = [decode_event(r.value) for r in records]
    assert got == want
    assert [e.seq for e in got] == list(range(1, 201))
    assert {r.key for r in records} == {b"c-solo"}
    assert [r.offset for r in records] == sorted(r.offset for r in records)
    await assert_nothing_more(consumer)


async def test_each_cluster_keeps_its_order_across_three_partitions_with_nothing_lost_or_duplicated(
    new_topic: TopicFactory, new_producer: ProducerFactory, new_consumer: ConsumerFactory
) -> None:
    topic = await new_topic(partitions=3)
    clusters = ["c-ams", "c-fra", "c-lhr", "c-iad", "c-sjc", "c-nrt"]
    want = {c: cluster_events(c, 50) for c in clusters}

    await append(await new_producer(), topic, interleave(*want.values()))
    consumer = await new_consumer(topic)
    records = await read_exactly(consumer, 50 * len(clusters))
    await assert_nothing_more(consumer)

    got: dict[str, list[Event]] = defaultdict(list)
    partitions_of: dict[str, set[int]] = defaultdict(set)
    for record in records:
        event = decode_event(record.value)
        got[event.cluster].append(event)
        partitions_of[event.cluster].add(record.partition)
    assert got == want  # per cluster: every event, once, in append order
    assert all(len(p) == 1 for p in partitions_of.values()), "a cluster spans partitions"
    assert len(set().union(*partitions_of.values())) > 1, "the clusters did not spread out"


async def test_a_replacement_consumer_in_the_group_continues_from_the_committed_offset(
    new_topic: TopicFactory,
    new_producer: ProducerFactory,
    new_consumer: ConsumerFactory,
    group_id: str,
) -> None:
    topic = await new_topic(partitions=3)
    events = interleave(*(cluster_events(c, 40) for c in ["c-ams", "c-fra", "c-lhr"]))
    await append(await new_producer(), topic, events)

    # Given a consumer that processed half the log and committed exactly that much,
    first = await new_consumer(topic, group_id=group_id)
    processed = await read_exactly(first, len(events) // 2)
    committed: dict[TopicPartition, int] = {}
    for record in processed:  # within a partition, what was processed is a prefix
        tp = TopicPartition(topic, record.partition)
        committed[tp] = max(committed.get(tp, 0), record.offset + 1)
    await first.commit(committed)
    await first.stop()

    # when a new consumer takes its place in the group,
    second = await new_consumer(topic, group_id=group_id)
    rest = await read_exactly(second, len(events) - len(processed))
    await assert_nothing_more(second)

    # then it starts at the committed offsets: nothing is delivered twice, nothing is lost.
    for record in rest:
        assert record.offset >= committed.get(TopicPartition(topic, record.partition), 0)
    first_ids = {decode_event(r.value).id for r in processed}
    rest_ids = {decode_event(r.value).id for r in rest}
    assert not first_ids & rest_ids
    assert first_ids | rest_ids == {e.id for e in events}


async def test_a_malformed_message_fails_to_decode_while_the_good_ones_around_it_still_decode(
    new_topic: TopicFactory, new_producer: ProducerFactory, new_consumer: ConsumerFactory
) -> None:
    topic = await new_topic(partitions=1)
    before, middle, after = cluster_events("c-bad", 3)
    wrong_tag = json.loads(encode_event(middle)) | {"type": "NodeRebooted"}
    missing_field = json.loads(encode_event(middle))
    del missing_field["seq"]
    values = [
        encode_event(before),
        b"this is not json",
        json.dumps(wrong_tag).encode(),
        json.dumps(missing_field).encode(),
        b"\xff\xfe not utf-8",
        encode_event(after),
    ]

    await append_raw(await new_producer(), topic, b"c-bad", values)
    records = await read_exactly(await new_consumer(topic), len(values))

    assert [r.value for r in records] == values
    first, *malformed, last = records
    assert decode_event(first.value) == before
    assert decode_event(last.value) == after
    want_errors = ["json_invalid", "union_tag_invalid", "missing", "json_invalid"]
    for record, want_error in zip(malformed, want_errors, strict=True):
        with pytest.raises(ValidationError) as caught:
            decode_event(record.value)
        assert want_error in {e["type"] for e in caught.value.errors()}
