"""Reading records of one partition by offset, without trusting ListOffsets.

Records are read from an offset up to (not including) another, and a read needs a record at
or past its end: the marker the caller wrote (see eventlog.py) is one. Records compacted away
are simply not there; markers are left out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from rackplane.streams.eventlog import is_marker

GAP = 16
"""Wanted records this close are read in one pass instead of seeking to each."""


class PartitionReader:
    """Reads records of a topic's partitions by offset through one assigned consumer."""

    def __init__(self, consumer: AIOKafkaConsumer, topic: str, *, timeout: float) -> None:
        self.consumer = consumer
        self.topic = topic
        self.timeout = timeout

    async def read_at(self, p: int, offsets: Sequence[int]) -> dict[int, Any]:
        """The records at `offsets` (those that are there), reading close ones in one pass."""
        wanted = sorted(set(offsets))
        got: dict[int, Any] = {}
        i = 0
        while i < len(wanted):
            j = i
            while j + 1 < len(wanted) and wanted[j + 1] - wanted[j] <= GAP:
                j += 1
            for rec in await self.read_range(p, wanted[i], wanted[j] + 1):
                got[rec.offset] = rec
            i = j + 1
        return {o: got[o] for o in wanted if o in got}

    async def read_range(self, p: int, lo: int, hi: int) -> list[Any]:
        """Records with lo <= offset < hi (some may have been compacted away); needs a
        record at or after hi - 1 (the marker `_mark` wrote is one)."""
        consumer, tp = self.consumer, TopicPartition(self.topic, p)
        consumer.assign([tp])
        consumer.seek(tp, lo)
        out: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            batch = (await consumer.getmany(tp, timeout_ms=200)).get(tp, [])
            for rec in batch:
                if rec.offset >= hi:
                    return out
                if rec.offset >= lo and not is_marker(rec.headers):
                    out.append(rec)
            if batch and batch[-1].offset >= hi - 1:
                return out
            if loop.time() > deadline:
                raise TimeoutError(
                    f"reading {self.topic}[{p}] {lo}..{hi} took over {self.timeout} s"
                )


async def highwater(consumer: AIOKafkaConsumer, topic: str, p: int, timeout: float) -> int:
    """The end of `topic[p]` now: the high watermark of one fetch. ListOffsets is not asked
    (Tansu answers it wrongly after multi-record batches); a fetch's high watermark is right
    on both brokers. For readers that may not write the marker records of eventlog.py."""
    tp = TopicPartition(topic, p)
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        await consumer.getmany(tp, timeout_ms=200, max_records=1)
        end: Any = consumer.highwater(tp)
        if end is not None:
            return int(end)
        if loop.time() > deadline:
            raise TimeoutError(f"{topic}[{p}] gave no fetch answer within {timeout:.0f} s")
