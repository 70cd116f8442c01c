"""Reading a cluster's event log to its true end, to rebuild state after a start or a crash.

Theory of operation: to know that everything written before "now" has been read, without
trusting ListOffsets (Tansu answers it wrongly after multi-record batches, STACK_NOTES), a
reader appends a *marker* record to the cluster's partition: empty value, key = cluster id, a
`rackplane-marker` header with a fresh token. The broker's answer names the partition and the
marker's offset; reading that partition from the start up to the marker sees every event
written before it. Every consumer of the events topic skips marker records.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pydantic import ValidationError

from rackplane.models import Event
from rackplane.projections import ClusterState, EventGap, WrongCluster, evolve, initial_state
from rackplane.streams.codec import decode_event

log = logging.getLogger("rackplane.eventlog")

MARKER_HEADER = "rackplane-marker"


def is_marker(headers: Sequence[tuple[str, bytes]] | None) -> bool:
    """True for a marker record (see the module docstring)."""
    return any(k == MARKER_HEADER for k, _ in headers or ())


@dataclass
class Rebuilt:
    """A state rebuilt from the log and the events that built it (oldest first)."""

    state: ClusterState
    events: list[Event]
    skipped: int
    """Records of this cluster that were not events (undecodable, or a seq out of line)."""


class EventLog:
    """Rebuilds cluster states from the events topic (one reader per agent)."""

    def __init__(
        self,
        kafka: dict[str, Any],
        topic: str,
        *,
        read_committed: bool = False,
        fetch_wait_ms: int = 50,
        seen_window: int | None = None,
    ) -> None:
        """Args:
        kafka: connection options (`StreamConfig.kafka_options()`).
        topic: the events topic.
        read_committed: skip aborted transactions (exactly-once mode writes events in
            transactions).
        fetch_wait_ms: the reader's fetch wait (`StreamConfig.fetch_wait_ms`).
        seen_window: the dedupe window of the states it rebuilds (`StreamConfig.seen_window`).
        """
        self.kafka = kafka
        self.topic = topic
        self.read_committed = read_committed
        self.fetch_wait_ms = fetch_wait_ms
        self.seen_window = seen_window
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Open the producer the markers go through."""
        if self._producer is None:
            self._producer = AIOKafkaProducer(**self.kafka, acks="all")
            await self._producer.start()

    async def stop(self) -> None:
        """Close what `start` opened."""
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def rebuild(self, cluster: str, *, timeout: float = 60.0) -> Rebuilt:
        """Fold every event of `cluster` written so far into a fresh state."""
        async with self._lock:
            await self.start()
            assert self._producer is not None
            token = uuid.uuid4().hex.encode()
            meta = await self._producer.send_and_wait(
                self.topic, value=b"", key=cluster.encode(), headers=[(MARKER_HEADER, token)]
            )
            return await asyncio.wait_for(
                self._read_until(cluster, meta.partition, meta.offset), timeout
            )

    def reader(self) -> AIOKafkaConsumer:
        """A consumer without a group for reading the log (not started)."""
        return AIOKafkaConsumer(
            **self.kafka,
            enable_auto_commit=False,
            group_id=None,
            fetch_max_wait_ms=self.fetch_wait_ms,
            isolation_level="read_committed" if self.read_committed else "read_uncommitted",
        )

    async def _read_until(self, cluster: str, partition: int, stop: int) -> Rebuilt:
        key = cluster.encode()
        tp = TopicPartition(self.topic, partition)
        consumer = self.reader()
        await consumer.start()
        state, events, skipped = initial_state(cluster, seen_window=self.seen_window), [], 0
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            done = False
            while not done:
                batch = await consumer.getmany(tp, timeout_ms=500)
                for record in batch.get(tp, []):
                    if record.offset >= stop:
                        done = True
                        break
                    if record.key != key or is_marker(record.headers):
                        continue
                    before = state.seq
                    try:
                        event = decode_event(record.value or b"")
                        state = evolve(state, event)
                    except (ValidationError, EventGap, WrongCluster) as err:
                        skipped += 1
                        log.warning(
                            "event log %s[%d]@%d skipped: %s",
                            self.topic,
                            partition,
                            record.offset,
                            str(err).splitlines()[0],
                        )
                        continue
                    if event.seq == before + 1:
                        events.append(event)
        finally:
            await consumer.stop()
        return Rebuilt(state, events, skipped)
