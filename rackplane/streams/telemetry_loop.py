"""The telemetry path: a plain aiokafka consumer loop inside the worker.

Telemetry is the high-rate input (a sample per node per interval: 2,304 nodes every 5 s is
460/s, and a 1,024-rack cluster ten times that). Faust's stream iteration tops out at about
3,600 messages/s on one core here, even for an agent that does nothing (measured with
`take_events`; 2,600/s with `events()`), while a plain consumer reads 90,000/s. So the GPU
Manager's input is a consumer in its own group (`<app_id>.telemetry`) that processes each
fetched batch and, at most every `commit_interval`, commits what the commands it caused have
been acknowledged for (at-least-once; a redelivered sample re-derives the same command id,
which the controller deduplicates).

It lives or dies with the worker: a commit refused because the group rebalanced (after a broker
pause, say) is normal, and the loop goes on (what was not committed is read again); anything
else it cannot handle, a send the broker never acknowledged included, stops the worker at once
(`_fatal`), so a supervisor restarts it and the samples are read again from the last commit.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import (
    CommitFailedError,
    IllegalGenerationError,
    KafkaConnectionError,
    NodeNotReadyError,
    RebalanceInProgressError,
    RequestTimedOutError,
    UnknownMemberIdError,
)

from rackplane._errtext import named
from rackplane.streams._fatal import GuardedTask
from rackplane.streams.agents import GpuManager

RETRIABLE_COMMIT = (
    CommitFailedError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
)
"""Commit failures after which the loop goes on: the group moved, or the broker is away."""

log = logging.getLogger("rackplane.telemetry")


class TelemetryLoop(GuardedTask):
    """Consume telemetry in batches and feed the GPU Manager until stopped."""

    loop_name = "telemetry"

    def __init__(
        self,
        kafka: dict[str, Any],
        topic: str,
        group: str,
        manager: GpuManager,
        *,
        session_timeout: float,
        fetch_wait_ms: int = 50,
        max_records: int = 5_000,
        commit_interval: float = 0.5,
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.group = group
        self.manager = manager
        self.session_timeout = session_timeout
        self.max_records = max_records
        self.commit_interval = commit_interval
        self.fetch_wait_ms = fetch_wait_ms
        self.joined = asyncio.Event()
        """Set once the consumer has joined its group (part of the worker being ready)."""
        self.failed: str | None = None
        """Why the loop stopped, when it did (the worker is on its way down then)."""
        self.commit_failures = 0

    def consumer(self) -> AIOKafkaConsumer:
        """The loop's consumer (not started)."""
        return AIOKafkaConsumer(
            self.topic,
            **self.kafka,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=int(self.session_timeout * 1000),
            heartbeat_interval_ms=1_000,
            fetch_max_wait_ms=self.fetch_wait_ms,
            max_poll_records=self.max_records,
            # A full NVML sample of a 4-GPU node is ~1.5 KB: the 1 MiB default would cap a
            # fetch at a few hundred samples.
            max_partition_fetch_bytes=16 * 1024 * 1024,
        )

    async def _run(self) -> None:
        consumer = self.consumer()
        await consumer.start()  # returns once the group is joined
        self.joined.set()
        loop = asyncio.get_running_loop()
        committed = loop.time()
        dirty = False
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=100, max_records=self.max_records)
                records = [r for rs in batch.values() for r in rs]
                if records:
                    # on_telemetry returns once the commands it caused are acknowledged, so
                    # everything up to the consumer's position may be committed.
                    await self.manager.on_telemetry(records)
                    dirty = True
                if dirty and loop.time() - committed >= self.commit_interval:
                    committed = loop.time()
                    try:
                        await consumer.commit()
                        dirty = False
                    except RETRIABLE_COMMIT as err:
                        self.commit_failures += 1
                        log.info("telemetry commit refused (%s); going on", type(err).__name__)
        except asyncio.CancelledError:
            raise
        except BaseException as err:
            self.failed = named(err)
            raise
        finally:
            await consumer.stop()
