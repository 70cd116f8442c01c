"""A client of a running pipeline: send commands and telemetry, read events and rejections.

Used by the production commands (`rackplane submit ...`), `rackplane up`, tests and benchmarks.
With `log_keys` in its configuration, what it reads of the events topic is judged as the
worker's readers judge it (`rackplane.logtrust`): an event not signed by one of those keys is
passed over, so `rackplane events`, a command's outcome and the console show only what the
controller wrote.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError
from pydantic import ValidationError

from rackplane.logtrust import Judge
from rackplane.models import REJECTIONS, TELEMETRY, Command, Event, NodeTelemetry, Rejection
from rackplane.streams._records import is_marker, partition_for
from rackplane.streams.codec import decode_event, encode_command
from rackplane.streams.config import StreamConfig

__all__ = ["BrokerUnreachable", "Client"]

CONNECT_TIMEOUT_S = 8.0
"""How long the client waits for the brokers' first answer (a listener that accepts the
connection and says nothing would otherwise hold it for aiokafka's 40-s request timeout):
a dead broker is reported within 10 s."""
SETTLE_S = 1.0
"""How long a command's chain of events must stay quiet before its outcome is complete. On
this project's test worker (Tansu, a checkpoint every 10 events; 2026-12-05, 26 chains a
policy went on) the policy's event came 20-77 ms after the direct one, but the worker stalls now and
then: four direct events came 0.42-0.49 s after the send, and a CI run lost a `JobPlaced`
with a 0.5-s wait. On a slower pipeline the wait grows further: at least `SETTLE_PER_DIRECT`
times what the command's own first event took to come, at most `SETTLE_MAX_S`."""
SETTLE_PER_DIRECT = 4.0
"""A policy's reaction is a command's round trip and a decision more, and a worker that was
slow to answer the command is likely slow to react to it."""
SETTLE_MAX_S = 5.0
"""The longest wait for more of a chain, however slow the direct answer was."""


def telemetry_key(sample: NodeTelemetry) -> bytes:
    """The record key of a telemetry sample: its cluster.

    The GPU Manager's rack rule needs every node of a rack on one worker (two nodes of a rack
    within 3 minutes make the rack's verdict), and a sample does not say its rack: the exporter
    knows its node and cluster, the rack is the controller's. Keyed by node, the nodes of one
    rack spread over the partitions, and with several workers no worker saw two of them. Keyed
    by cluster, a cluster's telemetry is one partition, read by one worker; clusters still
    spread over the partitions and workers. One partition carries a cluster's rate (a
    1,024-rack cluster: ~4,600 samples/s every 5 s; the telemetry loop reads ~90,000/s).
    """
    return sample.cluster.encode()


class BrokerUnreachable(KafkaConnectionError):  # type: ignore[misc]  # aiokafka is untyped
    """No Kafka broker could be reached at the configured address (nothing listens, the
    connection or its authentication failed, or what listens gives no Kafka answer); the
    message says which when it can."""


class Client:
    """Producer and readers for one pipeline (`async with Client(config) as c: ...`)."""

    def __init__(
        self,
        config: StreamConfig,
        *,
        linger_ms: int = 0,
        connect_timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        """Raises:
        LogTrustError: a log key is not an Ed25519 public key."""
        self.config = config
        self.connect_timeout = connect_timeout
        self.producer = AIOKafkaProducer(**config.kafka_options(), acks="all", linger_ms=linger_ms)
        self.trust = config.log_trust()
        self.judge: Judge[int] = Judge(self.trust)

    @property
    def forged(self) -> int:
        """Events passed over: not signed by a log key."""
        return self.judge.forged

    def trusted(self, record: Any, event: Event) -> bool:
        """Whether `event` (read from `record`) is the controller's (always, without log keys)."""
        return self.judge.refuses(record.partition, event) is None

    async def __aenter__(self) -> Client:
        """Raises:
        BrokerUnreachable: nothing listens there, or what listens gives no Kafka answer."""
        where = self.config.bootstrap
        try:
            await asyncio.wait_for(self.producer.start(), self.connect_timeout)
        except TimeoutError:
            await self.producer.stop()
            raise BrokerUnreachable(
                f"{where} took the connection but gave no Kafka answer within "
                f"{self.connect_timeout:.0f} s (is it a Kafka listener?)"
            ) from None
        except KafkaConnectionError as err:
            await self.producer.stop()
            raise BrokerUnreachable(
                f"could not connect to a broker at {where}: nothing listens there, or the "
                f"connection or its authentication failed ({err})"
            ) from None
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()

    async def send(self, command: Command, *, wait: bool = True) -> Any:
        """Send a command keyed by its cluster; by default wait for the broker's ack."""
        fut = await self.producer.send(
            self.config.topic("commands"),
            value=encode_command(command),
            key=command.cluster.encode(),
        )
        return await fut if wait else fut

    async def send_raw(self, topic: str, value: bytes, key: bytes | None = None) -> Any:
        """Send bytes as they are (tests of bad input)."""
        return await self.producer.send(self.config.topic(topic), value=value, key=key)

    async def send_telemetry(self, sample: NodeTelemetry) -> Any:
        """Publish a node sample keyed by its cluster (`telemetry_key`; returns the delivery
        future)."""
        return await self.producer.send(
            self.config.topic("telemetry"),
            value=TELEMETRY.dump_json(sample, exclude_none=True),  # None = unsupported = default
            key=telemetry_key(sample),
        )

    def reader(self, name: str, *, from_start: bool = True) -> AIOKafkaConsumer:
        """A consumer of one topic without a group (start and stop it yourself)."""
        return AIOKafkaConsumer(
            self.config.topic(name),
            **self.config.kafka_options(),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_start else "latest",
            fetch_max_wait_ms=self.config.fetch_wait_ms,
            isolation_level="read_committed" if self.config.exactly_once else "read_uncommitted",
        )

    async def events(self, *, from_start: bool = True) -> AsyncIterator[Event]:
        """Every event on the log, in partition order (markers and garbage skipped)."""
        consumer = self.reader("events", from_start=from_start)
        await consumer.start()
        try:
            async for record in consumer:
                if is_marker(record.headers) or not record.value:
                    continue
                try:
                    event = decode_event(record.value)
                except ValidationError:
                    continue
                if self.trusted(record, event):
                    yield event
        finally:
            await consumer.stop()

    async def rejections(self) -> AsyncIterator[Rejection]:
        """Every rejection, from the start."""
        consumer = self.reader("rejected")
        await consumer.start()
        try:
            async for record in consumer:
                try:
                    yield REJECTIONS.validate_json(record.value or b"")
                except ValidationError:
                    continue  # garbage written to the rejected topic itself: not a rejection
        finally:
            await consumer.stop()

    async def outcome(
        self,
        command: Command,
        *,
        timeout: float = 30.0,
        follow: bool = False,
        settle: float = SETTLE_S,
    ) -> list[Event]:
        """Send `command` and return the events it caused.

        Without `follow`, the events it caused directly (its `causation_id`). With `follow`,
        also the chain that came of them: the events of the policies' commands proposed on a
        state one of those events ended (a proposal's id is `<policy>:<seq>:<n>`), and so on,
        until the cluster's log has stayed quiet of the chain for `settle` seconds. On a busy
        cluster a policy may propose after an unrelated event came in between: that proposal
        is not tied to the command, and its events are not shown.

        Raises:
            TimeoutError: no event of the command within `timeout` seconds.
        """
        consumer = await self.reader_of(command.cluster)
        try:
            await consumer.seek_to_end()
            await self.send(command)
            chain = _Chain(command, follow)
            return await _collect(consumer, chain, timeout, settle, self.trusted)
        finally:
            await consumer.stop()

    async def reader_of(self, cluster: str) -> AIOKafkaConsumer:
        """A started group-less consumer of the one events partition `cluster`'s log is on
        (stop it yourself)."""
        consumer = AIOKafkaConsumer(
            **self.config.kafka_options(),
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=self.config.fetch_wait_ms,
            isolation_level="read_committed" if self.config.exactly_once else "read_uncommitted",
        )
        topic = self.config.topic("events")
        await consumer.start()
        try:
            parts = await self.producer.partitions_for(topic)
            consumer.assign([TopicPartition(topic, partition_for(cluster, len(parts)))])
        except BaseException:
            await consumer.stop()
            raise
        return consumer


class _Chain:
    """Which events belong to a command's outcome (see `Client.outcome`)."""

    def __init__(self, command: Command, follow: bool) -> None:
        self.cluster = command.cluster
        self.command_id = command.id
        self.causes = {command.id}
        self.seqs: set[int] = set()
        self.follow = follow

    def takes(self, event: Event) -> bool:
        if event.cluster != self.cluster or event.causation_id is None:
            return False
        cause = event.causation_id
        if cause in self.causes or (self.follow and _proposed_at(cause) in self.seqs):
            self.causes.add(cause)
            self.seqs.add(event.seq)
            return True
        return False


def _proposed_at(command_id: str) -> int | None:
    """The seq a policy's proposal was made on (`<policy>:<seq>:<n>`), else None."""
    parts = command_id.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return int(parts[1])


async def _collect(
    consumer: AIOKafkaConsumer,
    chain: _Chain,
    timeout: float,
    settle: float,
    trusted: Callable[[Any, Event], bool] = lambda r, e: True,
) -> list[Event]:
    sent = time.monotonic()
    deadline = sent + timeout
    found: list[Event] = []
    quiet = settle
    quiet_after: float | None = None
    while time.monotonic() < deadline:
        wait = 200 if quiet_after is None else max(10, int((quiet_after - time.monotonic()) * 1000))
        batch = await consumer.getmany(timeout_ms=min(wait, 200))
        got = False
        for records in batch.values():
            for record in records:
                if is_marker(record.headers) or not record.value:
                    continue
                try:
                    event = decode_event(record.value)
                except ValidationError:
                    continue
                if trusted(record, event) and chain.takes(event):
                    found.append(event)
                    got = True
        if got and not chain.follow:
            # The events a command caused directly are one decision, written as one record
            # batch (streams/_append.py), and a fetch hands a batch over whole (getmany reads
            # without `max_records`): the fetch that brought the first of them brought all.
            return found
        if got:
            if quiet_after is None:  # the first event: how slow is it today?
                direct = time.monotonic() - sent
                quiet = min(max(settle, SETTLE_PER_DIRECT * direct), max(settle, SETTLE_MAX_S))
            quiet_after = time.monotonic() + quiet
        elif quiet_after is not None and time.monotonic() >= quiet_after:
            return found
    if not found:
        raise TimeoutError(f"no event for command {chain.command_id} within {timeout:.0f} s")
    return found
