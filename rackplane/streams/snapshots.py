"""Snapshots of cluster states on a compacted topic: a rebuild reads a snapshot plus the tail.

Theory of operation
-------------------
The worker that owns an events partition saves now and then a *checkpoint* of it: for each
cluster of the partition, its state at some seq and the events offset of that seq's event,
and `covers`, an events offset such that no cluster of the partition has an event between
its snapshot and `covers`. A rebuild loads the newest checkpoint and folds only the events
after it: its cost follows the tail of the log, not its history. The records (chunks,
checkpoint records, markers, tombstones) are described in `_snapshot_records.py`; they go to
`<prefix>.snapshots`, to the partition index of the events partition they describe.

A save:
1. encodes each snapshot that changed since the partition's last checkpoint (an unchanged
   one, same seq and events offset, is named again where it lies) and writes its chunks,
   each within `max_message_bytes`; waits until the broker acknowledged them (their offsets);
2. writes the checkpoint record (key slot `save % 2`), naming per cluster the seq, events
   offset, digest, size and chunk offsets, and the offset of the checkpoint before it;
   waits for its acknowledgement;
3. tombstones the chunks that neither this checkpoint nor the one before it names: those of
   the checkpoint before that, and those of saves cut off half way.

A load:
1. writes a marker to the partition: its offset is the partition's true end (Tansu answers
   ListOffsets wrongly after multi-record batches; eventlog.py does the same);
2. reads back from the end, in growing windows, to the newest checkpoint record;
3. reads the chunks it names at their offsets, checks that each is the chunk it should be
   (cluster, seq, digest, index, count), the snapshot's size and SHA-256, decodes it
   (`decode_state` checks its own digest and shape) and checks its cluster and seq;
4. on anything missing or wrong logs one WARNING and tries the checkpoint before it (named
   by offset); when that fails too, one more WARNING, and None.
With a key, the worker signs each checkpoint record (`rackplane.logtrust`): it names every
snapshot's SHA-256, so its signature covers the states. With a `LogTrust`, a load passes over
a record not signed by a trusted key (an ERROR line) as if it were not there.

What `load` promises: a checkpoint it returns was written completely (every chunk was
acknowledged before its record was sent), and each of its states is the one the saving
worker encoded, byte for byte: never chunks of two snapshots, never another cluster's or
another seq's state. It returns the newest checkpoint when that one is readable, else the one
before it, else None (the caller then reads the partition's events from offset 0, which is
always correct, only slower). What it cannot promise: that a checkpoint is still there.
Compaction keeps the newest value of every key, so it keeps both checkpoint slots and every
chunk they name (chunks are removed only by tombstones); but compaction is no backup. A
broker that lost data, a topic deleted or recreated, another writer on the partition
(tombstoning what this one names), or Tansu's memory storage after a restart, leave the older
checkpoint or None. Cost: the tail from the newest checkpoint to the end plus its chunks,
not the topic: on Tansu, which never compacts, the topic only grows.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code

from rackplane.logtrust import LogTrust, checkpoint_payload
from rackplane.models import Signature
from rackplane.projections import ClusterState
from rackplane.projections.snapshot import SnapshotError, decode_state, encode_state
from rackplane.streams._partition_reader import PartitionReader, highwater
from rackplane.streams._snapshot_records import (
    CHECKPOINT_PREFIX,
    CHUNK_PREFIX,
    CheckpointRecord,
    ChunkHead,
    Head,
    Scan,
    SnapshotId,
    SnapshotRef,
    checkpoint_key,
    checkpoint_value,
    chunk_key,
    chunks,
    marker_key,
    read_checkpoint,
    read_chunk,
)
from rackplane.streams.describe import DescribeError, describe_settled
from rackplane.streams.eventlog import MARKER_HEADER

__all__ = [
    "Checkpoint",
    "Snapshot",
    "SnapshotStore",
    "SnapshotTopicError",
    "ensure_snapshots_topic",
    "snapshot_topic_configs",
]

log = logging.getLogger("rackplane.snapshots")

MIN_MESSAGE_BYTES = 4_096
_FETCH_FLOOR = 1_048_576
_FIRST_WINDOW = 64
"""Records read back from the end first: a save's tombstones and the markers since."""


@dataclass(frozen=True)
class Snapshot:
    """One cluster's state and where in the events partition it stands."""

    cluster: str
    state: ClusterState
    """`state.seq` is the seq it reflects."""
    events_offset: int
    """Offset, in the events partition, of the event at `state.seq`."""


@dataclass(frozen=True)
class Checkpoint:
    """Snapshots of every cluster of one events partition, as of `covers`."""

    partition: int
    covers: int
    """An events offset: every cluster of the partition that has events at or below it has
    its snapshot in `snapshots`, and no event between its snapshot and `covers`."""
    snapshots: dict[str, Snapshot]
    signed: bool = False
    """Its record was signed by a trusted log key (`rackplane.logtrust`)."""


class SnapshotTopicError(RuntimeError):
    """The snapshots topic could not be created, or exists with another partition count."""


class _Unusable(Exception):
    """A checkpoint that cannot be assembled (why, in one line)."""


def snapshot_topic_configs(max_message_bytes: int) -> dict[str, str]:
    """Topic configs of the snapshots topic: compacted, records up to `max_message_bytes`,
    the active segment rolled hourly (compaction never cleans the active segment)."""
    return {
        "cleanup.policy": "compact",
        "max.message.bytes": str(max_message_bytes),
        "segment.ms": str(3_600_000),
    }


async def ensure_snapshots_topic(
    kafka: dict[str, Any],
    topic: str,
    *,
    partitions: int,
    replication: int,
    max_message_bytes: int,
) -> bool:
    """Create the snapshots topic if it is missing.

    Args:
        kafka: connection options (`StreamConfig.kafka_options()`).
        topic: its name (`<prefix>.snapshots`).
        partitions: the events topic's partition count.
        replication: the replication factor.
        max_message_bytes: what the store's chunks are cut to.

    Returns:
        True when it created the topic, False when it was there.

    Raises:
        SnapshotTopicError: the broker refused to create it (the reason), or it exists
            with another partition count.
    """
    admin = AIOKafkaAdminClient(**kafka)
    await admin.start()
    try:
        new = NewTopic(
            name=topic,
            num_partitions=partitions,
            replication_factor=replication,
            topic_configs=snapshot_topic_configs(max_message_bytes),
        )
        response = await admin.create_topics([new])
        [(_, code, *message)] = response.topic_errors  # the broker answers per topic
        if code == 0:
            return True
        if code != TopicAlreadyExistsError.errno:
            name = for_code(code).__name__
            raise SnapshotTopicError(f"creating topic {topic}: {name} {''.join(message)}".strip())
        try:  # made a moment ago by another worker, perhaps: the broker may not know it yet
            [described] = await describe_settled(admin, [topic])
        except DescribeError as err:
            raise SnapshotTopicError(str(err)) from err
        found = len(described.get("partitions") or ())
        if found != partitions:
            raise SnapshotTopicError(
                f"topic {topic} has {found} partitions; the events topic has {partitions}"
            )
        return False
    finally:
        await admin.close()


class SnapshotStore:
    """Saves and loads checkpoints of events partitions on the snapshots topic."""

    def __init__(
        self,
        kafka: dict[str, Any],
        topic: str,
        *,
        max_message_bytes: int,
        fetch_wait_ms: int = 20,
        timeout: float = 60.0,
        sign: Callable[[bytes], Signature] | None = None,
        trust: LogTrust | None = None,
        read_only: bool = False,
    ) -> None:
        """Args:
        kafka: connection options (`StreamConfig.kafka_options()`).
        topic: the snapshots topic (`ensure_snapshots_topic`).
        max_message_bytes: the topic's `max.message.bytes`: no record batch is larger.
        fetch_wait_ms: the reader's fetch wait (`StreamConfig.fetch_wait_ms`).
        timeout: seconds a read of the topic may take before it raises TimeoutError.
        sign: signs each checkpoint record's payload (`KeyFile.signature`; None: unsigned).
        trust: the keys a checkpoint record must be signed by to be loaded (None: any).
        read_only: load only, and write nothing, not even the marker that finds the end (a
            fetch's high watermark does, `_partition_reader.highwater`): for readers whose
            credentials may not write the topic (the read commands).
        """
        if max_message_bytes < MIN_MESSAGE_BYTES:
            raise ValueError(f"max_message_bytes must be at least {MIN_MESSAGE_BYTES}")
        self.kafka = kafka
        self.topic = topic
        self.max_message_bytes = max_message_bytes
        self.fetch_wait_ms = fetch_wait_ms
        self.timeout = timeout
        self.sign = sign
        self.trust = trust
        self.read_only = read_only
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._heads: dict[int, Head] = {}
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Open the producer (unless read-only) and the reader."""
        if self._producer is None and not self.read_only:
            producer = AIOKafkaProducer(
                **self.kafka,
                acks="all",
                enable_idempotence=False,  # Tansu has no idempotent producer
                max_request_size=max(_FETCH_FLOOR, self.max_message_bytes + 4_096),
                # no batch over the topic's limit: one chunk fills a batch on its own
                max_batch_size=self.max_message_bytes,
            )
            await producer.start()
            self._producer = producer
        if self._consumer is None:
            fetch = max(_FETCH_FLOOR, self.max_message_bytes + 65_536)
            consumer = AIOKafkaConsumer(
                **self.kafka,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=self.fetch_wait_ms,
                max_partition_fetch_bytes=fetch,
                fetch_max_bytes=max(52_428_800, fetch),
            )
            await consumer.start()
            self._consumer = consumer

    async def stop(self) -> None:
        """Close what `start` opened."""
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def save(self, checkpoint: Checkpoint) -> None:
        """Write the snapshots that changed since the last save of this partition, then the
        checkpoint record; returns when the broker acknowledged all of it.

        Raises:
            ValueError: the checkpoint contradicts itself (a snapshot under another
                cluster's name, an events offset past `covers`), or its record would not
                fit in one message (too many clusters in one partition).
        """
        _check(checkpoint)
        if self.read_only:
            raise ValueError("a read-only snapshot store saves nothing")
        async with self._lock:
            await self.start()
            p = checkpoint.partition
            head = self._heads.pop(p, None)  # learnt again from the topic if the save fails
            if head is None:
                scan = await self._scan(p)
                head = scan.head(0 if scan.candidates else None)
            self._heads[p] = await self._save(checkpoint, head)

    async def load(self, partition: int) -> Checkpoint | None:
        """The newest complete checkpoint of the partition, or None (see the module
        docstring for what that promises)."""
        async with self._lock:
            await self.start()
            scan = await self._scan(partition)
            for n, (offset, record) in enumerate(scan.candidates):
                try:
                    checkpoint = await self._assemble(partition, record, scan)
                except _Unusable as err:
                    then = (
                        "trying the checkpoint before it"
                        if n + 1 < len(scan.candidates)
                        else "no snapshot: the events are read from offset 0"
                    )
                    log.warning(
                        "snapshots %s[%d]: checkpoint at offset %d unusable (%s); %s",
                        self.topic,
                        partition,
                        offset,
                        err,
                        then,
                    )
                    continue
                self._heads[partition] = scan.head(n)
                return checkpoint
            self._heads[partition] = scan.head(None)
            return None

    # -- saving -----------------------------------------------------------------------------

    async def _save(self, checkpoint: Checkpoint, head: Head) -> Head:
        assert self._producer is not None
        p, producer = checkpoint.partition, self._producer
        newest = head.newest[1] if head.newest else None
        refs: dict[str, SnapshotRef] = {}
        written: list[tuple[str, Snapshot, str, int, list[Any]]] = []
        for cluster, snap in checkpoint.snapshots.items():
            old = newest.snapshots.get(cluster) if newest else None
            if old and (old.seq, old.events_offset) == (snap.state.seq, snap.events_offset):
                refs[cluster] = old
                continue
            data = await asyncio.to_thread(encode_state, snap.state)
            digest = hashlib.sha256(data).hexdigest()
            parts = chunks(cluster, snap.state.seq, digest, data, self.max_message_bytes)
            sent = [
                await producer.send(self.topic, key=key, value=value, partition=p)
                for key, value in parts
            ]
            written.append((cluster, snap, digest, len(data), sent))
        for cluster, snap, digest, size, sent in written:
            acks = await asyncio.gather(*sent)
            refs[cluster] = SnapshotRef(
                seq=snap.state.seq,
                events_offset=snap.events_offset,
                digest=digest,
                size=size,
                offsets=tuple(a.offset for a in acks),
            )
        record = CheckpointRecord(
            partition=p,
            save=head.next_save,
            covers=checkpoint.covers,
            previous=head.newest[0] if head.newest else None,
            snapshots=refs,
        )
        live = record.idents() | (newest.idents() if newest else set())
        dead = (head.previous[1].idents() if head.previous else set()) | head.leftovers
        retire = sorted(dead - live, key=lambda i: (i.cluster, i.seq, i.digest))
        record = record.model_copy(update={"retire": tuple(retire)})
        if self.sign is not None:
            signature = self.sign(checkpoint_payload(record))
            record = record.model_copy(update={"signature": signature})
        value = checkpoint_value(record)
        key = checkpoint_key(p, record.save)
        if len(value) + len(key) + 128 > self.max_message_bytes:
            raise ValueError(
                f"the checkpoint of partition {p} ({len(refs)} clusters) takes {len(value)} "
                f"bytes, over max_message_bytes ({self.max_message_bytes})"
            )
        ack = await producer.send_and_wait(self.topic, key=key, value=value, partition=p)
        tombstones = [
            await producer.send(self.topic, key=k, value=None, partition=p)
            for ident in retire
            for k in ident.chunk_keys()
        ]
        await asyncio.gather(*tombstones)
        return Head((ack.offset, record), head.newest, set(), record.save + 1)

    # -- reading ----------------------------------------------------------------------------

    async def _scan(self, p: int) -> Scan:
        """Find the newest checkpoint record (and the one it names as its previous)."""
        if self.read_only:
            assert self._consumer is not None
            end = await highwater(self._consumer, self.topic, p, self.timeout)
        else:
            end = await self._mark(p)
        prefix = CHECKPOINT_PREFIX + f"{p}/".encode()
        above: list[tuple[int, SnapshotId]] = []  # chunks after the newest checkpoint
        read: dict[int, Any] = {}
        newest: tuple[int, CheckpointRecord] | None = None
        hi, step = end, _FIRST_WINDOW
        while hi > 0 and newest is None:
            lo = max(0, hi - step)
            records = await self._reader().read_range(p, lo, hi)
            read.update((r.offset, r) for r in records)
            for rec in reversed(records):
                key = rec.key or b""
                if key.startswith(CHUNK_PREFIX):
                    chunk = read_chunk(rec.value)
                    if chunk is not None:
                        above.append((rec.offset, chunk[0].ident()))
                elif key.startswith(prefix):
                    record = self._checkpoint_in(p, rec.offset, rec.value)
                    if record is not None:
                        newest = (rec.offset, record)
                        break
            hi, step = lo, step * 4
        if newest is None:
            return Scan([], {ident for _, ident in above})
        candidates = [newest]
        before = newest[1].previous
        if before is not None:
            got = await self._reader().read_at(p, [before])
            record = self._checkpoint_in(p, before, got[before].value) if before in got else None
            if record is not None and record.save < newest[1].save:
                candidates.append((before, record))
        live: set[SnapshotId] = set().union(*(r.idents() for _, r in candidates))
        leftovers = {ident for _, ident in above} | set(newest[1].retire)
        return Scan(candidates, leftovers - live, read, hi)

    def _checkpoint_in(self, p: int, offset: int, value: bytes | None) -> CheckpointRecord | None:
        try:
            record = read_checkpoint(value)
        except ValueError as err:
            log.warning(
                "snapshots %s[%d]: record at offset %d is not a checkpoint (%s); ignored",
                self.topic,
                p,
                offset,
                str(err).splitlines()[0],
            )
            return None
        if record.partition != p:
            return None
        why = self.trust.problem(record, checkpoint_payload(record)) if self.trust else None
        if why is not None:
            log.error(
                "snapshots %s[%d]: checkpoint at offset %d ignored, not written by a "
                "controller: %s",
                self.topic, p, offset, why,
            )  # fmt: skip
            return None
        return record

    async def _assemble(self, p: int, record: CheckpointRecord, scan: Scan) -> Checkpoint:
        """The checkpoint `record` stands for, every chunk and digest checked."""
        offsets = [o for ref in record.snapshots.values() for o in ref.offsets]
        got = {o: scan.records[o] for o in offsets if o in scan.records}
        got |= await self._reader().read_at(p, [o for o in offsets if o < scan.read_from])
        snapshots: dict[str, Snapshot] = {}
        for cluster, ref in record.snapshots.items():
            name = f"{cluster}@{ref.seq}"
            parts = []
            count = len(ref.offsets)
            for i, offset in enumerate(ref.offsets):
                rec = got.get(offset)
                if rec is None:
                    raise _Unusable(f"chunk {i + 1}/{count} of {name} at offset {offset} is gone")
                chunk = read_chunk(rec.value)
                want = ChunkHead(
                    cluster=cluster, seq=ref.seq, digest=ref.digest, index=i, count=count
                )
                if (
                    rec.key != chunk_key(cluster, ref.seq, ref.digest, i)
                    or chunk is None
                    or chunk[0] != want
                ):
                    raise _Unusable(f"offset {offset} is not chunk {i + 1}/{count} of {name}")
                parts.append(chunk[1])
            data = b"".join(parts)
            if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.digest:
                raise _Unusable(f"the chunks of {name} do not match its digest")
            try:
                state = await asyncio.to_thread(decode_state, data)
            except SnapshotError as err:
                raise _Unusable(f"{name}: {err}") from err
            if (state.cluster, state.seq) != (cluster, ref.seq):
                raise _Unusable(f"{name} holds the state of {state.cluster}@{state.seq}")
            snapshots[cluster] = Snapshot(cluster, state, ref.events_offset)
        return Checkpoint(p, record.covers, snapshots, signed=record.signature is not None)

    def _reader(self) -> PartitionReader:
        assert self._consumer is not None, "start() first"
        return PartitionReader(self._consumer, self.topic, timeout=self.timeout)

    async def _mark(self, p: int) -> int:
        """Append a marker to partition `p`; its offset is the partition's true end."""
        assert self._producer is not None
        token = uuid.uuid4().hex.encode()
        meta = await self._producer.send_and_wait(
            self.topic, key=marker_key(p), value=b"", partition=p, headers=[(MARKER_HEADER, token)]
        )
        return int(meta.offset)


def _check(checkpoint: Checkpoint) -> None:
    if checkpoint.partition < 0 or checkpoint.covers < 0:
        raise ValueError("a checkpoint's partition and covers are offsets (>= 0)")
    for cluster, snap in checkpoint.snapshots.items():
        if not cluster or snap.cluster != cluster or snap.state.cluster != cluster:
            raise ValueError(f"the snapshot under {cluster!r} is of {snap.state.cluster!r}")
        if not 0 <= snap.events_offset <= checkpoint.covers:
            raise ValueError(
                f"snapshot of {cluster!r}: events offset {snap.events_offset} is not within "
                f"0..covers ({checkpoint.covers})"
            )
