"""Builders and readers for the event-log contract suite.

Reads count records instead of asking the broker for end offsets: after multi-record batches
Tansu may answer ListOffsets(latest) wrongly (STACK_NOTES.md), so "I have read everything" is
"I have read the N records I wrote", bounded by a timeout that fails the test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeAlias

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from rackplane.models import Event, JobSpec, JobSubmitted, NodeCordoned
from rackplane.streams import encode_event, event_key

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
READ_TIMEOUT_S = 20.0
QUIET_S = 1.0

Record: TypeAlias = ConsumerRecord[bytes, bytes]

# What the conftest fixtures hand to tests: `await new_topic(partitions=3)` and so on.
TopicFactory = Callable[..., Awaitable[str]]
ProducerFactory = Callable[[], Awaitable[AIOKafkaProducer]]
ConsumerFactory = Callable[..., Awaitable[AIOKafkaConsumer]]


def cluster_events(cluster: str, count: int) -> list[Event]:
    """Events `seq` 1..count for one cluster: jobs submitted and nodes cordoned, alternating."""
    events: list[Event] = []
    for seq in range(1, count + 1):
        common = {
            "id": f"{cluster}-ev-{seq}",
            "cluster": cluster,
            "seq": seq,
            "at": T0 + timedelta(seconds=seq),
            "actor": "controller",
            "causation_id": f"{cluster}-cmd-{seq}",
        }
        if seq % 2:
            job = JobSpec(id=f"job-{seq}", nodes=16 * (1 + seq % 4), slice_size=16)
            events.append(JobSubmitted(**common, job=job))
        else:
            events.append(NodeCordoned(**common, node=f"r{seq % 8:02d}-n{seq % 18 + 1:02d}"))
    return events


def interleave(*streams: list[Event]) -> list[Event]:
    """Round-robin over `streams`: a1 b1 c1 a2 b2 c2 ..."""
    merged: list[Event] = []
    for i in range(max(len(s) for s in streams)):
        merged.extend(s[i] for s in streams if i < len(s))
    return merged


async def append(producer: AIOKafkaProducer, topic: str, events: list[Event]) -> None:
    """Append `events` keyed by cluster id, in order, and wait until all are acknowledged."""
    futures = [await producer.send(topic, value=encode_event(e), key=event_key(e)) for e in events]
    await asyncio.gather(*futures)


async def append_raw(
    producer: AIOKafkaProducer, topic: str, key: bytes, values: list[bytes]
) -> None:
    """Append raw `values` under one key, in order, and wait until all are acknowledged."""
    futures = [await producer.send(topic, value=v, key=key) for v in values]
    await asyncio.gather(*futures)


async def read_exactly(
    consumer: AIOKafkaConsumer, count: int, timeout: float = READ_TIMEOUT_S
) -> list[Record]:
    """Return the next `count` records (in delivery order); fail the test after `timeout` s."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(records) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"read {len(records)} of {count} records in {timeout:.0f} s")
        batches = await consumer.getmany(timeout_ms=200, max_records=count - len(records))
        for batch in batches.values():
            records.extend(batch)
    return records


async def assert_nothing_more(consumer: AIOKafkaConsumer, quiet: float = QUIET_S) -> None:
    """Fail when `consumer` delivers anything within `quiet` seconds (a duplicate or extra)."""
    deadline = time.monotonic() + quiet
    while time.monotonic() < deadline:
        batches = await consumer.getmany(timeout_ms=100)
        extra = [r for batch in batches.values() for r in batch]
        assert not extra, f"unexpected extra records: {[(r.partition, r.offset) for r in extra]}"
