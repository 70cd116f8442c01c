"""`scan_to_end`: read every partition of a topic up to its true end, once.

The end is found with markers, as `EventLog.rebuild` does for one cluster (ListOffsets is
wrong on Tansu after multi-record batches, STACK_NOTES): one marker record per partition
(empty value, a `rackplane-marker` header, which every reader of the events topic skips);
reading a partition up to its marker's offset sees everything written before. Records are
handed to the caller in partition order, markers left out.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from rackplane.streams.eventlog import MARKER_HEADER, is_marker

MARKER_KEY = b"rackplane-scan"
STALL_S = 60.0
"""Seconds without a record, short of the end, after which a scan gives up."""


class ScanError(RuntimeError):
    """The topic cannot be read to its end (missing, or the read stalled)."""


async def scan_to_end(
    kafka: dict[str, Any],
    topic: str,
    on_record: Callable[[int, int, bytes | None], None],
    *,
    read_committed: bool = False,
    fetch_wait_ms: int = 100,
    progress: Callable[[int, int], None] | None = None,
    stall_s: float = STALL_S,
) -> int:
    """Read `topic` from the start of every partition to its end; return the records read.

    Args:
        kafka: connection options (`StreamConfig.kafka_options()`).
        topic: the topic.
        on_record: called with (partition, offset, value) for each record but the markers.
        read_committed: skip aborted transactions (exactly-once mode).
        fetch_wait_ms: the consumer's fetch wait.
        progress: called with (offsets done, offsets to read) as the scan goes.
        stall_s: give up after this long without a record short of the end.

    Raises:
        ScanError: the topic does not exist, or the read stalled.
    """
    consumer = AIOKafkaConsumer(
        **kafka,
        enable_auto_commit=False,
        group_id=None,
        fetch_max_wait_ms=fetch_wait_ms,
        isolation_level="read_committed" if read_committed else "read_uncommitted",
    )
    await consumer.start()
    read = 0
    try:
        if topic not in await consumer.topics():  # before a producer asks: it may create it
            raise ScanError(f"topic {topic} does not exist on the broker")
        ends = await _mark_ends(kafka, topic)
        tps = [TopicPartition(topic, p) for p in sorted(ends)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        done_at = dict.fromkeys(ends, 0)
        open_ = {p for p, end in ends.items() if end > 0}
        total = sum(ends.values())
        last_record = time.monotonic()
        while open_:
            batch = await consumer.getmany(*(t for t in tps if t.partition in open_),
                                           timeout_ms=500)  # fmt: skip
            for tp, records in batch.items():
                for r in records:
                    if r.offset >= ends[tp.partition]:
                        open_.discard(tp.partition)
                        break
                    done_at[tp.partition] = r.offset + 1
                    if not is_marker(r.headers):
                        read += 1
                        on_record(tp.partition, r.offset, r.value)
                if done_at[tp.partition] >= ends[tp.partition]:
                    open_.discard(tp.partition)
            if batch:
                last_record = time.monotonic()
                if progress is not None:
                    progress(sum(done_at.values()), total)
            elif time.monotonic() - last_record > stall_s:
                where = ", ".join(f"[{p}]@{done_at[p]} of {ends[p]}" for p in sorted(open_))
                raise ScanError(f"reading {topic} stalled: nothing for {stall_s:.0f} s at {where}")
    finally:
        await consumer.stop()
    if progress is not None:
        progress(total, total)
    return read


async def _mark_ends(kafka: dict[str, Any], topic: str) -> dict[int, int]:
    """Append a marker to each partition of `topic`; return partition -> its offset."""
    producer = AIOKafkaProducer(**kafka, acks="all")
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(topic))
        token = uuid.uuid4().hex.encode()
        metas = await asyncio.gather(
            *(
                producer.send_and_wait(
                    topic,
                    value=b"",
                    key=MARKER_KEY,
                    partition=p,
                    headers=[(MARKER_HEADER, token)],
                )
                for p in partitions
            )
        )
    finally:
        await producer.stop()
    return {m.partition: m.offset for m in metas}
