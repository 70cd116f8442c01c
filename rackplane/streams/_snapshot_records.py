"""The records of the snapshots topic: keys, chunks and checkpoint records (see snapshots.py),
and what a store knows of a partition's chain of checkpoints (`Head`, `Scan`).

Every record is keyed (a compacted topic refuses null keys) and lives on one partition, the
index of the events partition it describes:

| record     | key                                           | value                          |
|------------|-----------------------------------------------|--------------------------------|
| chunk      | `chunk/<cluster>/<seq>/<digest[:16]>/<i>`     | a head line (JSON), then bytes |
| checkpoint | `checkpoint/<partition>/<slot>`, slot 0 or 1  | JSON (`CheckpointRecord`)      |
| marker     | `marker/<partition>`                          | empty, `rackplane-marker` header |
| tombstone  | a retired chunk's key                         | null                           |

Chunk keys name one snapshot (cluster, seq and digest) and one chunk of it, so a newer
snapshot never overwrites a chunk of an older one that a checkpoint still names; chunks are
removed only by tombstones, once no kept checkpoint names them. Checkpoints alternate between
two keys per partition, so compaction keeps the newest and the one before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from rackplane.models import Signature

Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
CHUNK_PREFIX = b"chunk/"
CHECKPOINT_PREFIX = b"checkpoint/"
_VARINT_SLACK = 10
"""Room for the value's length varint to grow, and rounding, in the size estimate."""
_WIDEST_INDEX = 10**6 - 1
"""Chunk sizes are worked out for the widest index a snapshot may have (a terabyte at 1 MB)."""


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SnapshotRef(Frozen):
    """Where one cluster's snapshot lies: its chunks' offsets, in order."""

    seq: int = Field(ge=0)
    events_offset: int = Field(ge=0)
    digest: Digest
    """SHA-256 of the whole snapshot (`encode_state`'s bytes), hex."""
    size: int = Field(ge=1)
    offsets: tuple[int, ...] = Field(min_length=1)

    def ident(self, cluster: str) -> SnapshotId:
        return SnapshotId(
            cluster=cluster, seq=self.seq, digest=self.digest, count=len(self.offsets)
        )


class SnapshotId(Frozen):
    """One snapshot's identity and chunk count: what its chunk keys are made of."""

    cluster: str = Field(min_length=1)
    seq: int = Field(ge=0)
    digest: Digest
    count: int = Field(ge=1)

    def chunk_keys(self) -> list[bytes]:
        return [chunk_key(self.cluster, self.seq, self.digest, i) for i in range(self.count)]


class CheckpointRecord(Frozen):
    """A checkpoint as written: the snapshots it stands for and its place in the chain."""

    format: Literal[1] = 1
    partition: int = Field(ge=0)
    save: int = Field(ge=0)
    """Saves of this partition before it; its key's slot is `save % 2`."""
    covers: int = Field(ge=0)
    previous: int | None = Field(default=None, ge=0)
    """Offset of the checkpoint record before it (None for the first)."""
    snapshots: dict[str, SnapshotRef]
    retire: tuple[SnapshotId, ...] = ()
    """Snapshots whose chunks the save tombstoned after writing this record (sent again by
    the next writer, in case the save stopped before they were)."""
    signature: Signature | None = None
    """The saving worker's signature (`rackplane.logtrust.checkpoint_payload`)."""

    def idents(self) -> set[SnapshotId]:
        return {ref.ident(cluster) for cluster, ref in self.snapshots.items()}


class ChunkHead(Frozen):
    """The head line of a chunk: which snapshot it belongs to and which part it is."""

    cluster: str = Field(min_length=1)
    seq: int = Field(ge=0)
    digest: Digest
    index: int = Field(ge=0)
    count: int = Field(ge=1)

    def ident(self) -> SnapshotId:
        return SnapshotId(cluster=self.cluster, seq=self.seq, digest=self.digest, count=self.count)


def chunk_key(cluster: str, seq: int, digest: str, index: int) -> bytes:
    return f"chunk/{cluster}/{seq}/{digest[:16]}/{index}".encode()


def checkpoint_key(partition: int, save: int) -> bytes:
    return f"checkpoint/{partition}/{save % 2}".encode()


def marker_key(partition: int) -> bytes:
    return f"marker/{partition}".encode()


def chunk_capacity(cluster: str, seq: int, digest: str, max_message_bytes: int) -> int:
    """Bytes of snapshot one chunk may carry so that its record batch (one record, no
    compression) stays within `max_message_bytes`."""
    head = _head_line(ChunkHead(cluster=cluster, seq=seq, digest=digest, index=0, count=1))
    widest = len(head) + 2 * len(str(_WIDEST_INDEX))
    key = chunk_key(cluster, seq, digest, _WIDEST_INDEX)
    overhead: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, b"x" * widest, [])
    return max_message_bytes - overhead - _VARINT_SLACK


def chunks(
    cluster: str, seq: int, digest: str, data: bytes, max_message_bytes: int
) -> list[tuple[bytes, bytes]]:
    """(key, value) of each chunk of a snapshot, in order.

    Raises:
        ValueError: `max_message_bytes` leaves no room for data.
    """
    room = chunk_capacity(cluster, seq, digest, max_message_bytes)
    if room < 1:
        raise ValueError(f"max_message_bytes {max_message_bytes} leaves no room for a chunk")
    count = max(1, -(-len(data) // room))
    out = []
    for i in range(count):
        head = ChunkHead(cluster=cluster, seq=seq, digest=digest, index=i, count=count)
        out.append(
            (chunk_key(cluster, seq, digest, i), _head_line(head) + data[i * room : (i + 1) * room])
        )
    return out


def _head_line(head: ChunkHead) -> bytes:
    return head.model_dump_json().encode() + b"\n"


def read_chunk(value: bytes | None) -> tuple[ChunkHead, bytes] | None:
    """The head and data of a chunk record's value; None when it is not one."""
    if not value:
        return None
    line, sep, data = value.partition(b"\n")
    if not sep:
        return None
    try:
        return ChunkHead.model_validate_json(line), data
    except ValidationError:
        return None


def read_checkpoint(value: bytes | None) -> CheckpointRecord:
    """The checkpoint record in `value`.

    Raises:
        ValueError: it is not one (pydantic's ValidationError is a ValueError).
    """
    if not value:
        raise ValueError("empty value")
    return CheckpointRecord.model_validate_json(value)


def checkpoint_value(record: CheckpointRecord) -> bytes:
    return json.dumps(record.model_dump(mode="json"), separators=(",", ":")).encode()


# -- what a store knows of a partition's chain of checkpoints ----------------------------


@dataclass
class Head:
    """What a store knows of a partition's checkpoints, for its next save."""

    newest: tuple[int, CheckpointRecord] | None = None
    previous: tuple[int, CheckpointRecord] | None = None
    leftovers: set[SnapshotId] = field(default_factory=set)
    """Snapshots no kept checkpoint names whose chunks may still be there: tombstoned next."""
    next_save: int = 0


@dataclass
class Scan:
    """The newest checkpoint records of a partition (newest first) and the chunks no kept
    checkpoint names."""

    candidates: list[tuple[int, CheckpointRecord]]
    leftovers: set[SnapshotId]
    records: dict[int, Any] = field(default_factory=dict)
    """The records read on the way back from the end, by offset: not fetched again."""
    read_from: int = 0
    """The scan read every record from here to the end."""

    def head(self, used: int | None) -> Head:
        """The head once candidate `used` was loaded (None: none was)."""
        if used == 0:
            newest = self.candidates[0]
            previous = self.candidates[1] if len(self.candidates) > 1 else None
            return Head(newest, previous, set(self.leftovers), newest[1].save + 1)
        dead: set[SnapshotId] = set(self.leftovers)
        for _, record in self.candidates[: used if used is not None else None]:
            dead |= record.idents() | set(record.retire)
        saves = [r.save for _, r in self.candidates]
        if used is None:
            return Head(None, None, dead, max(saves) + 1 if saves else 0)
        chosen = self.candidates[used]
        return Head(chosen, None, dead - chosen[1].idents(), chosen[1].save + 1)
