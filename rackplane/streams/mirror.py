"""What a workload adapter (`rackplane kube`, `rackplane slurm`) shares: one cluster's state
folded from the log, and an outbox that sends each planned command once per subject.

Theory of operation:
    - `ClusterMirror.follow` reads the events topic from the start, folds the cluster's events
      (signed by the controller, when the config says so) into `state`, hands each to
      `on_event` (what an adapter tallies beside the state), and sets `caught_up` once it has
      read to where the log ended when it started: only then may an adapter plan, or it would
      act on an old picture. `changed` is set after every batch read.
    - `Outbox.send` sends a plan's commands: at most one per (subject, command type) until it
      is no longer planned or `resend_after` passed (a command lost or refused is sent again;
      the controller deduplicates what it decided by command id).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from aiokafka import TopicPartition
from pydantic import ValidationError

from rackplane.keyfiles import KeyFile
from rackplane.models import ClusterId, Command, Event
from rackplane.projections import ClusterState, EventGap, evolve, initial_state
from rackplane.streams.client import Client
from rackplane.streams.codec import decode_event
from rackplane.streams.config import StreamConfig
from rackplane.streams.eventlog import is_marker


class ClusterMirror:
    """One cluster's state, folded from the log as it grows (see the module docstring)."""

    def __init__(
        self,
        config: StreamConfig,
        cluster: ClusterId,
        *,
        on_event: Callable[[Event], None] | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        self.config, self.cluster = config, cluster
        self.on_event = on_event
        self.log = log or logging.getLogger("rackplane.mirror")
        self.state: ClusterState = initial_state(cluster)
        self.caught_up = asyncio.Event()
        self.changed = asyncio.Event()

    async def follow(self, client: Client) -> None:
        """Read and fold until cancelled.

        Raises:
            RuntimeError: the cluster's log has a gap (it cannot be folded).
        """
        consumer = client.reader("events")
        await consumer.start()
        try:
            topic = self.config.topic("events")
            parts = consumer.partitions_for_topic(topic)
            if not parts:  # metadata not in yet: ask, so "read to the end" means the end
                await consumer.topics()
                parts = consumer.partitions_for_topic(topic) or set()
            ends = await consumer.end_offsets([TopicPartition(topic, p) for p in parts])
            waiting = {tp: end for tp, end in ends.items() if end > 0}
            if not waiting:
                self.caught_up.set()
            key = self.cluster.encode()
            while True:
                batch = await consumer.getmany(timeout_ms=500)
                for tp, records in batch.items():
                    for record in records:
                        if record.key == key and record.value and not is_marker(record.headers):
                            self._fold(client, record)
                    if tp in waiting and records and records[-1].offset + 1 >= waiting[tp]:
                        del waiting[tp]
                if not self.caught_up.is_set():
                    for tp in list(waiting):
                        if await consumer.position(tp) >= waiting[tp]:
                            del waiting[tp]
                    if not waiting:
                        self.log.info("the log is read (seq %d)", self.state.seq)
                        self.caught_up.set()
                if batch:
                    self.changed.set()
        finally:
            await consumer.stop()

    def _fold(self, client: Client, record: Any) -> None:
        try:
            event = decode_event(record.value)
        except (ValidationError, ValueError):
            return
        if event.cluster != self.cluster or not client.trusted(record, event):
            return
        try:
            self.state = evolve(self.state, event)
        except EventGap as err:
            raise RuntimeError(f"the log of {self.cluster} has a gap: {err}") from err
        if self.on_event is not None:
            self.on_event(event)


class Planned(Protocol):
    """A planned command and what it is about (`kube.plan.Order`, `slurm.plan.Order`)."""

    @property
    def subject(self) -> str: ...

    @property
    def command(self) -> Command: ...


class Outbox:
    """Sends planned commands, one per (subject, type) at a time (see the module docstring)."""

    def __init__(
        self,
        *,
        key: KeyFile | None,
        resend_after: float,
        log: logging.Logger,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.key, self.resend_after, self.log = key, resend_after, log
        self._clock = clock
        self._sent: dict[tuple[str, str], float] = {}

    async def send(self, client: Client, orders: Iterable[Planned]) -> None:
        """Send what is planned and not in flight; forget what is no longer planned."""
        now = self._clock() if self._clock else asyncio.get_running_loop().time()
        wanted: set[tuple[str, str]] = set()
        acks = []
        for order in orders:
            slot: tuple[str, str] = (order.subject, str(order.command.type))
            wanted.add(slot)
            sent = self._sent.get(slot)
            if sent is not None and now - sent < self.resend_after:
                continue
            command = self.key.sign(order.command) if self.key else order.command
            acks.append(await client.send(command, wait=False))
            self._sent[slot] = now
            self.log.info("sent %s %s", command.type, command.id)
        for slot in [s for s in self._sent if s not in wanted]:
            del self._sent[slot]
        if acks:
            await asyncio.gather(*acks)
