"""Appending decisions to the event log: whole, in order, only while the partition is ours.

Theory of operation:
1. A decision (the events one command caused) is written whole or not at all: all its
   records go into one Kafka record batch, which the broker appends atomically. Decisions of
   one partition are packed into as few batches as `max_batch_bytes` allows (a decision never
   spans two), and the batches of a partition are sent one after the other, each awaited.
2. The caller applies a decision to its replica only after `append` returned: the broker
   acknowledged it. A failed send raises, and the caller must treat the partition's replicas
   as unknown (some batches may have landed): drop them, rebuild from the log, decide again;
   the log's command positions make the redecision of what landed a no-op.
3. The writer stops the moment its partitions are revoked: `Fence.check` runs before every
   batch, and raises `Revoked` when a rebalance took the partition (or `Stalled` when the
   event loop did not run for longer than the group's session: the process was paused, and
   the group may have given the partition away without it hearing so yet).
4. Write-time check: the controller is the only writer of its events partitions, so a batch
   must land right after the previous one, or after records no reader folds (markers that
   rebuilding readers append, garbage someone wrote, events of a cluster the partition does
   not hold that do not open a log). If an event of the log sits in between, another writer
   wrote there: `ForeignWrite` is raised, and the controller reloads the partition, whose
   read judges it (a fork or an inapplicable event breaks its cluster). The unknown
   clusters' events are judged here, not by a reload: each reload reads the whole partition,
   and 100 such records in 15 s (the hostile fault case) cost that many reloads, during
   which the partition's valid commands waited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from rackplane.logtrust import LogTrust
from rackplane.streams.codec import decode_event
from rackplane.streams.eventlog import EventLog, is_marker, opens_a_log
from rackplane.streams.senders import SharedProducer

RECORD_OVERHEAD = 64
"""Bytes a record adds to its key and value in a v2 batch, at most (varints, headers)."""
BATCH_OVERHEAD = 128
"""Bytes of a record batch's header, with room to spare."""

Decision = Sequence[tuple[bytes, bytes]]
"""The (key, value) records of one command's events."""


class Revoked(RuntimeError):
    """The partition was taken from this worker while it was writing."""


class Stalled(Revoked):
    """The event loop stood still longer than the group's session: ownership is in doubt."""


class ForeignWrite(RuntimeError):
    """A record that this writer did not write sits among its events."""


def decision_bytes(decision: Decision) -> int:
    """The bytes a decision takes in a record batch, at most."""
    return sum(len(k) + len(v) + RECORD_OVERHEAD for k, v in decision)


class Fence:
    """Which events partitions this worker may write now (see the module docstring, 3)."""

    def __init__(
        self, *, stall_after: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        """Args:
        stall_after: seconds without a tick that mean the loop was paused.
        monotonic: the clock (tests pass their own).
        """
        self.epoch = 0
        self.owned: set[int] = set()
        self.stall_after = stall_after
        self.monotonic = monotonic
        self.last_tick = monotonic()
        self.stalls = 0

    def assign(self, partitions: set[int]) -> None:
        self.owned = set(partitions)

    def revoke(self, partitions: set[int] | None = None) -> None:
        """Partitions leave (all when None): every writer in progress stops."""
        self.epoch += 1
        self.owned = set() if partitions is None else self.owned - partitions

    def tick(self) -> None:
        self.last_tick = self.monotonic()

    async def run(self, every: float = 0.1) -> None:
        """Tick until cancelled (a task of the worker's event loop)."""
        while True:
            self.tick()
            await asyncio.sleep(every)

    def check(self, epoch: int, partition: int) -> None:
        """Raise unless `partition` is still ours since `epoch` (see the module docstring)."""
        if epoch != self.epoch or partition not in self.owned:
            raise Revoked(f"events partition {partition} was revoked while it was written")
        idle = self.monotonic() - self.last_tick
        if idle > self.stall_after:
            self.stalls += 1
            self.tick()
            raise Stalled(
                f"the event loop stood still for {idle:.1f} s (more than {self.stall_after} s):"
                f" partition {partition} may have been given away"
            )


class EventAppender:
    """Appends decisions to the events topic through the worker's producer."""

    def __init__(
        self,
        producer: SharedProducer,
        topic: str,
        eventlog: EventLog,
        *,
        max_batch_bytes: int,
        holds: Callable[[str], bool] | None = None,
    ) -> None:
        """Args:
        producer: the worker's producer (its `max_batch_size` must be at least
            `max_batch_bytes`).
        topic: the events topic.
        eventlog: reads back what lies between two of this writer's batches.
        max_batch_bytes: the largest record batch (the topic's `max.message.bytes` or below).
        holds: True for a cluster whose log the writer's replicas hold (registered, or broken).
            None: every cluster's event found between two batches is a foreign write.
        """
        self.producer = producer
        self.topic = topic
        self.eventlog = eventlog
        self.max_batch_bytes = max_batch_bytes
        self.holds = holds
        self.next_offset: dict[int, int] = {}
        """Partition -> the offset right after this writer's last batch (or the last read)."""
        self.batches = 0

    def expect(self, partition: int, offset: int) -> None:
        """The log of `partition` ends before `offset` (a rebuild read up to there)."""
        self.next_offset[partition] = offset

    async def append(
        self, partition: int, decisions: Sequence[Decision], check: Callable[[], None]
    ) -> list[int]:
        """Write `decisions` to `partition`, in order; return the offset of each decision's
        last record. `check` runs before each batch (it raises to stop the writer)."""
        producer = await self.producer.get()
        offsets: list[int] = []
        written: set[bytes] = set()  # the clusters of this call's batches (keys)
        for group in self._batches(decisions):
            check()
            batch = producer.create_batch()
            ends: list[int] = []  # each decision's last record, relative to the batch
            count = 0
            for decision in group:
                for key, value in decision:
                    written.add(key)
                    if batch.append(key=key, value=value, timestamp=None) is None:
                        raise RuntimeError(  # the size estimate is wrong: a bug, not input
                            f"a record batch for {self.topic}[{partition}] overflowed at "
                            f"record {count}"
                        )
                    count += 1
                ends.append(count - 1)
            batch.close()
            future = await producer.send_batch(batch, self.topic, partition=partition)
            meta = await future
            base = int(meta.offset)
            await self._check_contiguous(partition, base, written)
            self.next_offset[partition] = base + count
            self.batches += 1
            offsets.extend(base + e for e in ends)
        return offsets

    def _batches(self, decisions: Sequence[Decision]) -> list[list[Decision]]:
        out: list[list[Decision]] = []
        size = self.max_batch_bytes
        for decision in decisions:
            need = decision_bytes(decision)
            if not out or size + need > self.max_batch_bytes:
                out.append([])
                size = BATCH_OVERHEAD
            out[-1].append(decision)
            size += need
        return out

    async def _check_contiguous(self, partition: int, base: int, written: set[bytes]) -> None:
        expected = self.next_offset.get(partition)
        if expected is None or base == expected:
            return
        if base < expected:
            raise ForeignWrite(
                f"{self.topic}[{partition}]: a batch landed at offset {base}, before this "
                f"writer's last one ended ({expected})"
            )
        between: list[Any] = await self.eventlog.records(partition, expected, base)
        trust = self.eventlog.trust

        def held(key: bytes) -> bool:
            return self.holds is None or key in written or self.holds(key.decode())

        foreign = [r.offset for r in between if _an_event_of_the_log(r, trust, held)]
        if foreign:
            raise ForeignWrite(
                f"{self.topic}[{partition}]: events this writer did not write lie between its "
                f"batches, at offsets {foreign[:5]}{' ...' if len(foreign) > 5 else ''}"
            )


def _an_event_of_the_log(
    record: Any, trust: LogTrust | None, held: Callable[[bytes], bool] = lambda key: True
) -> bool:
    """True for a record that readers would fold: an event keyed by its cluster, signed by a
    trusted key when there is a `trust`, of a cluster whose log is `held` (by its key) or
    opening one. Markers, garbage (undecodable, or keyed by another cluster than it names),
    forged events and the events of clusters that have no log are skipped by every reader, so
    they cannot fork anything."""
    if not record.value or (record.headers and is_marker(record.headers)):
        return False
    try:
        event = decode_event(record.value)
    except ValueError:
        return False
    if record.key != event.cluster.encode():
        return False
    if trust is not None and trust.event_problem(event) is not None:
        return False
    # Readers skip the events of a cluster they hold no log of, unless the event opens one.
    return held(record.key) or opens_a_log(event)


class TransactionalAppender:
    """Exactly-once mode: decisions go through Faust's topic, inside the transaction of the
    commands partition they came from; Kafka's transaction makes a batch whole, and fences a
    writer whose partition was given away (its producer is fenced by the new owner's)."""

    def __init__(self, topic: Any) -> None:
        """Args:
        topic: the Faust events topic.
        """
        self.topic = topic

    def expect(self, partition: int, offset: int) -> None:
        """Nothing to check: transactions fence other writers."""

    async def append(
        self, partition: int, decisions: Sequence[Decision], check: Callable[[], None]
    ) -> list[int]:
        check()
        pending: list[list[Any]] = []
        for decision in decisions:
            futures = [
                await self.topic.send(key=key, value=value, partition=partition)
                for key, value in decision
            ]
            pending.append(futures)
        offsets: list[int] = []
        for futures in pending:
            metas = [await f for f in futures]
            offsets.append(int(metas[-1].offset))
        return offsets
