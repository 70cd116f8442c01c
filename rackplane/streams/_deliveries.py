"""Every record of the commands topic reaches the controller, in offset order, whatever
Faust's consumer does.

Why: the core recognises a decided command by its position (`ClusterState.decided`: a
command at or below the last decided offset of its partition was decided), so a command the
controller sees after a later one of its partition is taken for decided and dropped. And
faust-streaming 0.15's consumer does not deliver every record: its fetch loop treats a jump
in the offsets it delivers as records that need no ack (`Consumer._add_gap`, meant for
compacted topics and transaction markers) and commits past them, it drops what it fetched
while its flow was suspended for a rebalance, and after one it resets its read offset to the
committed offset while records fetched before are still being delivered. Seen in the fault
suite before this module: 10 acknowledged commands of one partition never decided after
Apache Kafka restarted (offsets 494-503), 21 commands of the policies and, in another run,
the last 51 commands of a partition never decided after worker crashes on Tansu; with it,
runs log skips of 2-39 records after restarts (`commands[1] offsets 1109..1140 were skipped
by the consumer`) and decide them. A record Faust never delivers it never acks either, so
its commit would stop there for good and every restart would read again from that offset.

So the controller keeps, per commands partition it owns, the offset it expects next:
1. After an assignment, the one after the last command its events name (`ClusterState.applied`
   over the partition's clusters, as rebuilt from the log: the truth, where the consumer's
   committed offset, as Faust keeps it, was seen both below and above where it started);
   after each batch, the batch's last offset + 1. Records after the last decided one that
   caused no event (rejected input) are read again after a restart: a second rejection
   record, never a lost command.
2. A batch whose first record of a partition lies past the expected offset, or two of whose
   records of a partition are not next to each other, has a hole: the records in between
   are read from the topic (`RecordReader`, a consumer without a group) and decided in
   their place, in order. (Offsets that hold no record, transaction markers in exactly-once
   mode, cost a read that finds nothing.)
3. A partition that nothing reached for `idle_s` is looked at from its expected offset (one
   fetch of the same reader, once per `idle_s`: no ListOffsets, which Tansu answers wrongly
   after multi-record batches, and no marker records): what it holds there is what Faust did
   not deliver, and is decided (`CatchUp`).
4. Once decided, the records the controller read itself are marked done in Faust's
   consumer (`Controller.released`: a gap in its bookkeeping), so its commit moves past
   records it never delivered.
Records decided twice this way (Faust delivers one after it was read) are recognised by
their position, as any redelivery is.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from rackplane.streams._fatal import GuardedTask

log = logging.getLogger("rackplane.agents")

IDLE_S = 3.0
"""Seconds of a partition with nothing delivered before the controller looks at it itself;
also the age a record must have for the controller to take it that way."""


def message_of(item: Any) -> Any:
    """The Kafka record of a Faust event (or the record itself)."""
    return getattr(item, "message", item)


class Holes:
    """Per commands partition, the offset expected next (see the module docstring)."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}
        self.last_delivery: dict[int, float] = {}

    def forget(self) -> None:
        """A rebalance: another worker may decide these partitions before they come back."""
        self.next.clear()

    def missing(self, batch: Sequence[Any], expected: dict[int, int]) -> list[tuple[int, int, int]]:
        """The (partition, lo, hi) ranges of records missing from `batch`: before its first
        record of a partition (given the offset `expected` next of each), and between two of
        its records of a partition that are not next to each other."""
        out: list[tuple[int, int, int]] = []
        want = dict(expected)
        for item in batch:
            m = message_of(item)
            p, offset = m.partition, m.offset
            if p not in want:
                continue
            if offset > want[p]:
                out.append((p, want[p], offset))
            want[p] = max(want[p], offset + 1)
        return out

    def decided(self, batch: Sequence[Any], *, now: float) -> None:
        """The batch was decided: expect what follows it."""
        last: dict[int, int] = defaultdict(lambda: -1)
        for item in batch:
            m = message_of(item)
            last[m.partition] = max(last[m.partition], m.offset)
        for partition, offset in last.items():
            self.next[partition] = max(self.next.get(partition, 0), offset + 1)
            self.last_delivery[partition] = now


def merged(batch: Sequence[Any], found: dict[tuple[int, int], list[Any]]) -> list[Any]:
    """`batch` with the records read for each hole (keyed by partition and the offset the hole
    ends at) right before the record that follows the hole."""
    out: list[Any] = []
    for item in batch:
        m = message_of(item)
        out.extend(found.get((m.partition, m.offset), ()))
        out.append(item)
    return out


async def filled(
    batch: Sequence[Any],
    holes: Holes,
    expected: dict[int, int],
    read: Callable[[int, int, int], Awaitable[list[Any]]],
    *,
    topic: str,
    whose: str,
) -> tuple[list[Any], list[tuple[int, int, int]]]:
    """`batch` with the records missing before and inside it (`Holes.missing`) read with
    `read(partition, lo, hi)` and put in their place, and the (partition, lo, hi) ranges read;
    each hole logged at WARNING (`topic` and `whose` name where and for whom)."""
    found: dict[tuple[int, int], list[Any]] = {}
    ranges: list[tuple[int, int, int]] = []
    for partition, lo, hi in holes.missing(batch, expected):
        records = await read(partition, lo, hi)
        found[(partition, hi)] = records
        ranges.append((partition, lo, hi))
        log.warning(
            "%s[%d] offsets %d..%d were skipped by the consumer: read from the topic and %s "
            "in their place (%d records)",
            topic,
            partition,
            lo,
            hi - 1,
            whose,
            len(records),
        )
    return (merged(batch, found) if found else list(batch)), ranges


def old_enough(records: Sequence[Any], before: float) -> list[Any]:
    """The leading records written before `before` (Unix seconds, by their timestamps)."""
    out: list[Any] = []
    for record in records:
        if record.timestamp / 1000 > before:
            break
        out.append(record)
    return out


class RecordReader:
    """Reads records of one topic by offset through a consumer without a group (the commands
    topic for the controller, the events topic for its followers: `_following`). Its reads
    take turns: one consumer, seeked per read."""

    def __init__(
        self,
        kafka: dict[str, Any],
        topic: str,
        *,
        fetch_wait_ms: int,
        stall: float,
        read_committed: bool = False,
    ) -> None:
        """Args:
        kafka: connection options (`StreamConfig.kafka_options()`).
        topic: the topic read.
        fetch_wait_ms: the reader's fetch wait.
        stall: seconds a read may stand still before it fails.
        read_committed: leave aborted transactions out (exactly-once mode: the policies'
            commands and the controller's events are written in transactions, and Faust's
            consumer reads committed).
        """
        self.kafka = kafka
        self.topic = topic
        self.fetch_wait_ms = fetch_wait_ms
        self.stall = stall
        self.read_committed = read_committed
        self._consumer: AIOKafkaConsumer | None = None
        self._turn = asyncio.Lock()

    async def read(self, partition: int, lo: int, hi: int) -> list[Any]:
        """The records with lo <= offset < hi (offsets without a record, such as transaction
        markers, are passed over: the read ends when the position reaches `hi`).

        Raises:
            TimeoutError: the read did not move for `stall` seconds.
        """
        async with self._turn:
            consumer = await self._started()
            tp = TopicPartition(self.topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, lo)
            out: list[Any] = []
            moved = time.monotonic()
            while await consumer.position(tp) < hi:
                batch = (await consumer.getmany(tp, timeout_ms=500)).get(tp, [])
                if batch:
                    moved = time.monotonic()
                elif time.monotonic() - moved > self.stall:
                    raise TimeoutError(
                        f"reading {self.topic}[{partition}] {lo}..{hi} stood still for "
                        f"{self.stall:.0f} s at offset {await consumer.position(tp)}"
                    )
                out.extend(r for r in batch if lo <= r.offset < hi)
            return out

    async def peek(self, partition: int, lo: int, *, wait_ms: int = 500) -> list[Any]:
        """What one fetch from `lo` returns (records at or after `lo`; empty: nothing there
        yet). Reads no further: a caller that got records asks again."""
        return (await self.peek_many({partition: lo}, wait_ms=wait_ms)).get(partition, [])

    async def peek_many(
        self, starts: dict[int, int], *, wait_ms: int = 500
    ) -> dict[int, list[Any]]:
        """`peek` of several partitions at once (partition -> its offset to look from): one
        fetch round; a partition it returned nothing of is absent."""
        if not starts:
            return {}
        async with self._turn:
            consumer = await self._started()
            tps = {p: TopicPartition(self.topic, p) for p in starts}
            consumer.assign(list(tps.values()))
            for p, lo in starts.items():
                consumer.seek(tps[p], lo)
            batch = await consumer.getmany(*tps.values(), timeout_ms=wait_ms)
            out: dict[int, list[Any]] = {}
            for tp, records in batch.items():
                got = [r for r in records if r.offset >= starts[tp.partition]]
                if got:
                    out[tp.partition] = got
            return out

    def consumer(self) -> AIOKafkaConsumer:
        """The reader's consumer (not started)."""
        return AIOKafkaConsumer(
            **self.kafka,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=self.fetch_wait_ms,
            isolation_level="read_committed" if self.read_committed else "read_uncommitted",
        )

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = self.consumer()
            await consumer.start()
            await asyncio.sleep(0)  # see eventlog._started
            self._consumer = consumer
        return self._consumer

    async def stop(self) -> None:
        async with self._turn:
            if self._consumer is not None:
                await self._consumer.stop()
                self._consumer = None


class IdleWatch(GuardedTask):
    """A loop of the worker, from start to stop, that looks about every `every` seconds at
    the partitions nothing reached for `idle_s`, while the worker has its partitions (a
    rebalance in progress: never; after one, the consumer gets its idle time first).
    Subclasses give `_look`."""

    def __init__(self, ready: Callable[[], bool], *, idle_s: float, every: float) -> None:
        self.ready = ready
        self.idle_s = idle_s
        self.every = every
        self.joined = asyncio.Event()
        self.joined.set()
        self.ready_since: float | None = None
        self.caught_up = 0
        """Records read this way since the start."""

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            await self.once(time.monotonic())

    async def once(self, now: float) -> None:
        """One look (`now`: monotonic seconds)."""
        if not self.ready():
            self.ready_since = None
            return
        if self.ready_since is None:
            self.ready_since = now
        await self._look(now, self.ready_since)

    @abc.abstractmethod
    async def _look(self, now: float, ready_since: float) -> None:
        """Look at what reached nothing for `idle_s` since `ready_since` at the latest."""


class CatchUp(IdleWatch):
    """Reads and decides what the consumer leaves undelivered (see the module docstring, 3).
    A failure here (the partition revoked while deciding, the broker gone past the
    controller's outage limit) stops the worker, as it does in the controller's agent."""

    loop_name = "catch_up"

    def __init__(
        self,
        holes: Holes,
        owned: Callable[[], set[int]],
        ready: Callable[[], bool],
        read_and_decide: Callable[[int], Awaitable[int]],
        *,
        idle_s: float = IDLE_S,
        every: float = 1.0,
    ) -> None:
        """Args:
        holes: the controller's expected offsets and last deliveries.
        owned: the commands partitions this worker owns now.
        ready: whether the worker has its partitions (no rebalance in progress).
        read_and_decide: read what lies at and after a partition's expected offset, decide
            it, and return how many records that was (`Controller.catch_up`).
        """
        super().__init__(ready, idle_s=idle_s, every=every)
        self.holes = holes
        self.owned = owned
        self.read_and_decide = read_and_decide
        self.looked: dict[int, float] = {}

    async def _look(self, now: float, ready_since: float) -> None:
        """Look at each owned partition that nothing reached for `idle_s` (once per `idle_s`):
        whatever the topic holds from its expected offset on is decided."""
        for partition in sorted(self.owned()):
            quiet_since = max(
                self.holes.last_delivery.get(partition, ready_since),
                ready_since,
                self.looked.get(partition, ready_since),
            )
            if now - quiet_since < self.idle_s:
                continue
            self.looked[partition] = now
            for _ in range(100):  # a long tail: go on while there is more, within reason
                got = await self.read_and_decide(partition)
                self.caught_up += got
                if got == 0:
                    break
