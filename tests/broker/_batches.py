"""Partitions of many one-record batches, and a bare fetch: Tansu's long-partition trap."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords


async def fill_one_record_batches(
    bootstrap: str, topic: str, n: int, *, headers: list[tuple[str, bytes]] | None = None
) -> None:
    """n records on partition 0, each its own batch (as commands sent one at a time)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=0, max_batch_size=512, enable_idempotence=False
    )
    await producer.start()
    try:
        pending = []
        for _ in range(n):
            pending.append(await producer.send(topic, b"x" * 300, partition=0, headers=headers))
            if len(pending) >= 2_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def raw_fetch(
    bootstrap: str, tp: TopicPartition, offset: int, wait_ms: int
) -> tuple[int, int]:
    """One FetchRequest, no client logic around it: (high watermark, records in the answer)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        await client.force_metadata_update()
        node = client.cluster.leader_for_partition(tp)
        request = FetchRequest(
            wait_ms, 1, 52_428_800, 0, [(tp.topic, [(tp.partition, offset, 4_194_304)])]
        )
        response = await client.send(node, request)
    finally:
        await client.close()
    [(_, [(_, error, highwater, *rest)])] = response.topics
    assert error == 0
    records = MemoryRecords(rest[-1])
    count = 0
    while records.has_next():
        batch = records.next_batch()
        count += sum(1 for _ in batch)
    return highwater, count
