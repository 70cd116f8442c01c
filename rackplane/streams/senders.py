"""How agents send: through Faust's topics, or through a plain aiokafka producer of the worker.

Measured here (Tansu, one core): Faust's `Topic.send` cost 200-1,000 us a message (4,900
sends/s from an idle app); the controller decided 700 commands/s sending through Faust's
topics, 1,430/s through Faust's own underlying producer, and 2,320/s through a plain
`AIOKafkaProducer` (acks=all) of its own. So in at-least-once mode agents send through one
such producer per worker (same default partitioner: a key lands where a Faust send would put
it). In exactly-once mode a send must join the transaction of its input partition, which only
Faust's path does, so agents send through Faust's topics there.

The producer is idempotent where the broker allows it (Apache Kafka): a retry after a lost
acknowledgement is then not written twice, and batches of one partition keep their order.
Tansu has no idempotent producer (its InitProducerId fails): the worker then says so once, at
WARNING, and goes on without; a retried batch may land twice, which every reader of the log
counts as a duplicate (same bytes, same seq), never as a second decision.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import faust
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    UnknownError,
    UnsupportedVersionError,
)

log = logging.getLogger("rackplane.senders")


class SharedProducer:
    """One aiokafka producer for a worker's agents, started on first use."""

    def __init__(
        self,
        kafka: dict[str, Any],
        *,
        max_request_size: int = 1_048_576,
        max_batch_size: int = 16_384,
        idempotent: bool = True,
    ) -> None:
        """Args:
        kafka: connection options (`StreamConfig.kafka_options()`).
        max_request_size: the producer's largest request.
        max_batch_size: its largest record batch: no more than the smallest
            `max.message.bytes` of the topics it writes (the broker refuses a larger batch
            whole, whatever the records in it).
        idempotent: ask for an idempotent producer (falls back, loudly, where the broker has
            none).
        """
        self.kafka = kafka
        self.max_request_size = max_request_size
        self.max_batch_size = max_batch_size
        self.idempotent = idempotent
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    def _new(self, idempotent: bool) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            **self.kafka,
            acks="all",
            enable_idempotence=idempotent,
            max_request_size=self.max_request_size,
            max_batch_size=self.max_batch_size,
        )

    async def get(self) -> AIOKafkaProducer:
        if self._producer is None:
            async with self._lock:
                if self._producer is None:
                    self._producer = await self._start()
        return self._producer

    async def _start(self) -> AIOKafkaProducer:
        if self.idempotent:
            producer = self._new(True)
            try:
                await producer.start()
                return producer
            except (UnknownError, UnsupportedVersionError, ClusterAuthorizationFailedError) as err:
                await producer.stop()
                log.warning(
                    "the broker gives no idempotent producer (%s): a retried send may be "
                    "written twice; readers count such copies as duplicates",
                    type(err).__name__,
                )
                self.idempotent = False
        producer = self._new(False)
        await producer.start()
        return producer

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None


class FastSender:
    """`send(key=, value=)` to one topic through the worker's shared producer."""

    def __init__(self, producer: SharedProducer, topic: str) -> None:
        self.producer = producer
        self.topic = topic

    async def send(self, *, key: Any = None, value: Any = None) -> Any:
        producer = await self.producer.get()
        return await producer.send(self.topic, value, key=key)


def sender_for(topic: faust.TopicT, producer: SharedProducer, *, exactly_once: bool) -> Any:
    """The sender agents use for `topic` in this mode."""
    return topic if exactly_once else FastSender(producer, topic.get_topic_name())
