"""Reading the event log to its true end, to rebuild state after a start, a crash or a rebalance.

Theory of operation:
1. The end. To know that everything written before "now" has been read, without trusting
   ListOffsets (Tansu answers it wrongly after multi-record batches, STACK_NOTES), a reader
   appends a *marker* record to the partition: empty value, a `rackplane-marker` header with a
   fresh token. The broker's answer names the marker's offset; reading the partition up to it
   sees every event written before it. Every consumer of the events topic skips markers.
2. One read per partition. A partition holds the logs of every cluster whose id hashes to it,
   written by the one controller that owns the partition. `rebuild_partition` reads it once
   (from a checkpoint's offset when there is one: a snapshot plus the tail) and folds every
   cluster on it; a cluster not on it does not exist, which costs nothing more to know.
3. Refuse, never guess. Per cluster the next record must carry the next seq. A record with a
   seq already applied is a *duplicate* when its bytes equal the first record of that seq (a
   producer's retry on a broker without idempotence) and a *fork* when they differ; a seq that
   skips ahead is a *gap*. A fork or a gap stops that cluster's log at the last good event
   (`broken`, with an error naming both offsets): nothing may be written after it until an
   operator has looked. Records that are not events of the partition (undecodable, keyed by
   another cluster than the one they name, or naming a cluster not registered, other than
   its registration) are counted and skipped.
4. Written by the controller. With a `LogTrust` (a worker with a key), an event not signed by
   a trusted key, or whose signature does not verify, is *forged*: skipped before its seq is
   looked at, so the controller's own event of that seq is the one folded, and reported
   (an ERROR line per record, `PartitionLog.forged`). See `rackplane.logtrust`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pydantic import ValidationError

from rackplane.logtrust import LogTrust, judge
from rackplane.models import Event
from rackplane.projections import ClusterState, evolve, fold, initial_state
from rackplane.streams._records import MARKER_HEADER as MARKER_HEADER  # re-exported: the
from rackplane.streams._records import is_marker as is_marker  # log's readers import them
from rackplane.streams._records import partition_for as partition_for  # from here
from rackplane.streams.codec import decode_event

log = logging.getLogger("rackplane.eventlog")

STALL_S = 60.0
"""Seconds a read may go without a new record before the end, before it fails."""
EVENTS_KEPT = 10_000
"""Events per cluster a read hands back (the newest): what followers catch up on after a
rebuild; a read of a long log must not hold the whole history in memory."""
DIGESTS_KEPT = 100_000
"""Seqs per cluster whose record digests a read keeps to tell a duplicate from a fork; an older
seq met again is taken for a fork (it cannot be a retry)."""


OPENING = frozenset({"TopologyRegistered", "CommandRejected", "CommandIgnored"})
"""Event types that may come before a cluster's registration: the registration itself, and
refusals (the controller wrote `CommandRejected(no_topology)` for such commands before it
sent them to `rejected` instead)."""


def opens_a_log(event: Event) -> bool:
    """True for an event that may be among the first of a cluster not registered yet."""
    return event.type in OPENING


class LogCorrupt(RuntimeError):
    """A cluster's log breaks the one-event-per-seq rule: nothing may be appended to it."""

    def __init__(self, cluster: str, message: str) -> None:
        super().__init__(message)
        self.cluster = cluster


class ForkDetected(LogCorrupt):
    """Two different events carry one seq."""

    def __init__(self, cluster: str, seq: int, first: int | None, second: int, where: str) -> None:
        at = f"offset {first}" if first is not None else "an offset before this read"
        super().__init__(
            cluster,
            f"event log of cluster {cluster!r} is forked: seq {seq} at {at} and again, "
            f"different, at offset {second} of {where}",
        )
        self.seq, self.first, self.second = seq, first, second


class GapDetected(LogCorrupt):
    """A seq is missing."""

    def __init__(
        self, cluster: str, have: int, got: int, last: int | None, offset: int, where: str
    ) -> None:
        after = f"offset {last}" if last is not None else "the start of this read"
        super().__init__(
            cluster,
            f"event log of cluster {cluster!r} has a gap: seq {have} (at {after}) is followed "
            f"by seq {got} at offset {offset} of {where}",
        )
        self.have, self.got, self.last, self.offset = have, got, last, offset


class Inapplicable(LogCorrupt):
    """An event with the next seq that cannot apply to the state before it (forged, or a bug
    in the writer): the log cannot be folded past it."""

    def __init__(self, cluster: str, seq: int, offset: int, where: str, err: BaseException) -> None:
        super().__init__(
            cluster,
            f"event log of cluster {cluster!r} cannot be folded: seq {seq} at offset {offset} "
            f"of {where} does not apply ({type(err).__name__}: {err})",
        )
        self.seq, self.offset = seq, offset


@dataclass
class ClusterLog:
    """What a read of a partition found for one cluster."""

    state: ClusterState
    events: list[Event] = field(default_factory=list)
    """The newest events applied by this read (at most `EVENTS_KEPT`), oldest first."""
    last_offset: int | None = None
    """Offset of the event at `state.seq` (None: before this read)."""
    duplicates: int = 0
    digests: dict[int, tuple[int, bytes]] = field(default_factory=dict, repr=False)


@dataclass
class PartitionLog:
    """Every cluster of one events partition, read up to `end` (exclusive)."""

    partition: int
    end: int
    clusters: dict[str, ClusterLog]
    broken: dict[str, LogCorrupt]
    skipped: int
    """Records that were not events of this partition (see the module docstring)."""
    forged: int = 0
    """Events skipped as not written by the controller (signed by no trusted key)."""
    signed: bool = False
    """The read met a signed event (or started from a signed checkpoint)."""


@dataclass
class Rebuilt:
    """A state rebuilt from the log and the events that built it (oldest first)."""

    state: ClusterState
    events: list[Event]
    skipped: int
    """Records of this cluster's partition that were not its events."""


Initial = Callable[[str], ClusterState]


class EventLog:
    """Reads partitions of the events topic to their end (one reader per agent)."""

    def __init__(
        self,
        kafka: dict[str, Any],
        topic: str,
        *,
        read_committed: bool = False,
        fetch_wait_ms: int = 50,
        initial: Initial = initial_state,
        trust: LogTrust | None = None,
    ) -> None:
        """Args:
        kafka: connection options (`StreamConfig.kafka_options()`).
        topic: the events topic.
        read_committed: skip aborted transactions (exactly-once mode writes events in
            transactions).
        fetch_wait_ms: the reader's fetch wait (`StreamConfig.fetch_wait_ms`).
        initial: the state of a cluster before its first event.
        trust: the keys events must be signed by (None: every event is taken).
        """
        self.kafka = kafka
        self.trust = trust
        self.topic = topic
        self.read_committed = read_committed
        self.fetch_wait_ms = fetch_wait_ms
        self.initial = initial
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Open the producer the markers go through."""
        if self._producer is None:
            producer = AIOKafkaProducer(**self.kafka, acks="all")
            await producer.start()
            self._producer = producer

    async def stop(self) -> None:
        """Close what `start` opened."""
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def end_of(
        self, partition: int | None = None, *, key: bytes | None = None
    ) -> tuple[int, int]:
        """Append a marker (to `partition`, or where `key` hashes) and return its partition and
        offset: every record of that partition before it is in the log now."""
        await self.start()
        assert self._producer is not None
        token = uuid.uuid4().hex.encode()
        meta = await self._producer.send_and_wait(
            self.topic, value=b"", key=key, partition=partition, headers=[(MARKER_HEADER, token)]
        )
        return int(meta.partition), int(meta.offset)

    async def rebuild_partition(
        self,
        partition: int,
        *,
        start: int = 0,
        states: dict[str, ClusterState] | None = None,
        stall: float = STALL_S,
        signed: bool = False,
    ) -> PartitionLog:
        """Fold every cluster of `partition` from offset `start` to the log's end.

        A long log takes as long as it takes (minutes for 10M events without a checkpoint);
        what fails is a read that stops moving.

        Args:
            partition: the events partition.
            start: the first offset to read (a checkpoint's `covers + 1`).
            states: the clusters' states at `start` (a checkpoint's snapshots).
            stall: seconds without a new record, short of the end, that fail the read.
            signed: `states` come from a signed checkpoint (no unsigned event is taken after
                it, even with `LogTrust.unsigned_prefix`).

        Raises:
            TimeoutError: no record came for `stall` seconds before the end.
        """
        async with self._lock:
            _, end = await self.end_of(partition)
            return await self._read(partition, start, end, dict(states or {}), stall, signed)

    async def rebuild(self, cluster: str, *, timeout: float = STALL_S) -> Rebuilt:
        """Fold every event of `cluster` written so far into a fresh state.

        Raises:
            LogCorrupt: the cluster's log is forked or has a gap.
            TimeoutError: the read stood still for `timeout` seconds.
        """
        async with self._lock:
            partition, end = await self.end_of(key=cluster.encode())
            read = await self._read(partition, 0, end, {}, timeout)
        if cluster in read.broken:
            raise read.broken[cluster]
        found = read.clusters.get(cluster)
        if found is None:
            return Rebuilt(self.initial(cluster), [], read.skipped)
        return Rebuilt(found.state, found.events, read.skipped)

    async def read_range(
        self,
        partition: int,
        *,
        start: int,
        end: int,
        states: dict[str, ClusterState] | None = None,
        stall: float = STALL_S,
        signed: bool = False,
        keep: int | None = EVENTS_KEPT,
    ) -> PartitionLog:
        """Fold every cluster of `partition` from `start` up to `end` (exclusive) without
        writing anything: the caller knows the end (a fetch's high watermark, as the read
        commands take it: `rackplane.streams.live`). `keep`: events per cluster handed back
        (the newest; None: all). Arguments and errors as `rebuild_partition`'s."""
        async with self._lock:
            return await self._read(partition, start, end, dict(states or {}), stall, signed, keep)

    def reader(self) -> AIOKafkaConsumer:
        """A consumer without a group for reading the log (not started)."""
        return AIOKafkaConsumer(
            **self.kafka,
            enable_auto_commit=False,
            group_id=None,
            fetch_max_wait_ms=self.fetch_wait_ms,
            max_partition_fetch_bytes=16 * 1024 * 1024,
            isolation_level="read_committed" if self.read_committed else "read_uncommitted",
        )

    async def records(
        self, partition: int, start: int, end: int, *, stall: float = STALL_S
    ) -> list[Any]:
        """The raw records of `partition` from `start` up to `end` (exclusive)."""
        out: list[Any] = []
        if start >= end:
            return out
        tp = TopicPartition(self.topic, partition)
        consumer = self.reader()
        await _started(consumer)
        try:
            consumer.assign([tp])
            consumer.seek(tp, start)
            moved = time.monotonic()
            while start < end:
                batch = await consumer.getmany(tp, timeout_ms=500)
                moved = _moving(batch.get(tp), moved, stall, self.topic, partition, start, end)
                for record in batch.get(tp, []):
                    if record.offset >= end:
                        return out
                    out.append(record)
                    start = record.offset + 1
        finally:
            await consumer.stop()
        return out

    async def _read(
        self,
        partition: int,
        start: int,
        end: int,
        states: dict[str, ClusterState],
        stall: float,
        signed: bool = False,
        keep: int | None = EVENTS_KEPT,
    ) -> PartitionLog:
        tp = TopicPartition(self.topic, partition)
        where = f"{self.topic}[{partition}]"
        reading = _Reading(partition, where, states, self.initial, self.trust, signed, keep)
        if start >= end:
            return reading.finish(end)
        consumer = self.reader()
        await _started(consumer)
        try:
            consumer.assign([tp])
            consumer.seek(tp, start)
            position = start
            moved = time.monotonic()
            while position < end:
                batch = await consumer.getmany(tp, timeout_ms=500)
                records = batch.get(tp, [])
                moved = _moving(records, moved, stall, self.topic, partition, position, end)
                if records and records[-1].offset >= end:
                    records = [r for r in records if r.offset < end]
                    position = end
                elif records:
                    position = records[-1].offset + 1
                reading.take(records)
        finally:
            await consumer.stop()
        return reading.finish(end)


def _moving(
    records: Sequence[Any] | None,
    moved: float,
    stall: float,
    topic: str,
    partition: int,
    position: int,
    end: int,
) -> float:
    """When the read last moved; raises TimeoutError when that was `stall` seconds ago."""
    now = time.monotonic()
    if records:
        return now
    if now - moved > stall:
        raise TimeoutError(
            f"reading {topic}[{partition}] stood still for {stall:.0f} s at offset {position} "
            f"(the end is {end})"
        )
    return moved


async def _started(consumer: AIOKafkaConsumer) -> None:
    """Start a group-less consumer. One tick of the loop afterwards: aiokafka's stop() right
    after start() cancels a task that never ran, and the CancelledError escapes (0.14.0)."""
    await consumer.start()
    await asyncio.sleep(0)


class _Reading:
    """One read of a partition: checks each record's seq, folds runs of events per cluster."""

    def __init__(
        self,
        partition: int,
        where: str,
        states: dict[str, ClusterState],
        initial: Initial,
        trust: LogTrust | None = None,
        signed: bool = False,
        keep: int | None = EVENTS_KEPT,
    ) -> None:
        self.partition = partition
        self.keep = keep
        self.trust = trust
        self.signed = signed
        self.forged = 0
        self.where = where
        self.initial = initial
        self.logs = {c: ClusterLog(s) for c, s in states.items()}
        self.pending: dict[str, list[Event]] = {}
        """Per cluster, events checked and not folded yet (folded once per fetched batch)."""
        self.offsets: dict[str, list[int]] = {}
        """The offsets of `pending`."""
        self.broken: dict[str, LogCorrupt] = {}
        self.skipped = 0

    def take(self, records: Sequence[Any]) -> None:
        for record in records:
            self._one(record)
        self._fold()

    def _one(self, record: Any) -> None:
        if record.headers and is_marker(record.headers):
            return
        raw = record.value or b""
        try:
            event = decode_event(raw)
        except (ValidationError, ValueError):
            self._skip(record, "not an event")
            return
        cluster = event.cluster
        if record.key != cluster.encode():
            self._skip(record, f"keyed {record.key!r}, not by its cluster {cluster!r}")
            return
        why, self.signed = judge(self.trust, event, self.signed)
        if why is not None:
            self.forged += 1
            log.error(
                "event log %s@%d: %s %s@%d ignored, not written by the controller: %s",
                self.where, record.offset, event.type, cluster, event.seq, why,
            )  # fmt: skip
            return
        if cluster in self.broken:
            return
        found = self.logs.get(cluster)
        queued = self.pending.get(cluster)
        registered = (found is not None and found.state.registered) or any(
            e.type == "TopologyRegistered" for e in queued or ()
        )
        if not registered and not opens_a_log(event):
            self._skip(record, f"cluster {cluster!r} is not registered: not one of its events")
            return
        if found is None:
            found = self.logs[cluster] = ClusterLog(self.initial(cluster))
        seq = queued[-1].seq if queued else found.state.seq
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        if event.seq == seq + 1:
            found.digests[event.seq] = (record.offset, digest)
            if len(found.digests) > DIGESTS_KEPT:
                del found.digests[next(iter(found.digests))]
            self.pending.setdefault(cluster, []).append(event)
            self.offsets.setdefault(cluster, []).append(record.offset)
            return
        if event.seq <= seq:
            first = found.digests.get(event.seq)
            if first is not None and first[1] == digest:
                found.duplicates += 1
                return
            self._break(
                ForkDetected(
                    cluster, event.seq, first[0] if first else None, record.offset, self.where
                )
            )
            return
        last = self.offsets[cluster][-1] if queued else found.last_offset
        self._break(GapDetected(cluster, seq, event.seq, last, record.offset, self.where))

    def _skip(self, record: Any, why: str) -> None:
        self.skipped += 1
        log.warning("event log %s@%d skipped: %s", self.where, record.offset, why)

    def _break(self, err: LogCorrupt, *, fold: bool = True) -> None:
        if fold:
            self._fold()
        if err.cluster in self.broken:
            return
        self.broken[err.cluster] = err
        log.error("%s; the cluster takes no more commands until an operator repairs it", err)

    def _fold(self) -> None:
        pending, offsets = self.pending, self.offsets
        self.pending, self.offsets = {}, {}
        for cluster, events in pending.items():
            found = self.logs[cluster]
            try:
                found.state = fold(found.state, events)
            except Exception:  # an event that does not apply: forged, or a bug; find it
                self._fold_each(found, events, offsets[cluster])
                continue
            found.events.extend(events)
            if self.keep is not None and len(found.events) > 2 * self.keep:
                del found.events[: -self.keep]
            found.last_offset = offsets[cluster][-1]

    def _fold_each(self, found: ClusterLog, events: list[Event], offsets: list[int]) -> None:
        for event, offset in zip(events, offsets, strict=True):
            try:
                found.state = evolve(found.state, event)
            except Exception as err:
                self._break(
                    Inapplicable(event.cluster, event.seq, offset, self.where, err), fold=False
                )
                return
            found.events.append(event)
            found.last_offset = offset

    def finish(self, end: int) -> PartitionLog:
        self._fold()
        if self.keep is not None:
            for found in self.logs.values():
                del found.events[: -self.keep]
        return PartitionLog(
            self.partition, end, self.logs, self.broken, self.skipped, self.forged, self.signed
        )
