"""Snapshots: a `ClusterState` as bytes, and back, losslessly. Pure: no clock, no I/O.

Theory of operation: a rebuild reads the newest snapshot of a cluster and folds only the
events after it, so its cost follows the tail of the log, not its history. Snapshots travel
through a Kafka topic, so `decode_state` treats its input as untrusted bytes: nothing in them
is ever executed (no pickle, no eval) and anything that is not a snapshot this build wrote,
truncated, corrupted or out of shape, raises one `SnapshotError`.

Format (version 1), all integers big-endian:

    offset  size  field
    0       4     magic b"RPSN"
    4       2     format version (1)
    6       1     compression (1: zlib)
    7       1     reserved (0)
    8       8     size of the document, uncompressed
    16      32    SHA-256 of bytes 0-15 and the body
    48      ...   body: the document, a JSON object, compressed

The document (`_snapshot_doc.py`) stores the state's facts and derives the indexes `evolve`
keeps (a node's job and slice, a rack's free nodes, the records' static fields from the
topology), storing only where a state departs from them: a state made by `evolve` round-trips
at the cost of its facts, and any other state round-trips too. The topology index is rebuilt
from the topology, as `evolve` does for `TopologyRegistered`.

Equality: `decode_state(encode_state(s)) == s` for every state whose command seqs fit in 64
bits. Datetimes keep their instant and UTC offset (a named zone becomes its fixed offset at
that instant, as it would through an event's JSON).

Safety: the digest catches corruption and truncation, not a forger (anyone who can write the
topic can seal a document); what a well-sealed document may hold is bounded by the decoder's
type checks, so a state that decodes is well-typed, and as true as its writer.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib

from rackplane._gc import cycle_collection_paused
from rackplane.projections._snapshot_doc import to_document
from rackplane.projections._snapshot_read import from_document
from rackplane.projections.state import (
    BlockInfo,
    ClusterState,
    JobState,
    NodeState,
    QueueUsage,
    RackState,
    SeenCommands,
    SliceState,
    Window,
)

__all__ = ["CODEC_FIELDS", "FORMAT_VERSION", "SnapshotError", "decode_state", "encode_state"]

MAGIC = b"RPSN"
FORMAT_VERSION = 1
ZLIB = 1
ZLIB_LEVEL = 1
"""zlib's fastest level: at 4,096 racks and a full id window, level 6 saves ~15% of the bytes
for three times the time (docs/BENCHMARKS.md, snapshots)."""
MAX_DOCUMENT_BYTES = 1 << 28
"""The largest document a snapshot may declare (256 MiB), a bound on what decoding a forged
one may allocate: 4,096 racks with 2,000 jobs and a full id window take 17 MiB."""
_HEAD = struct.Struct(">4sHBBQ")
_DIGEST_BYTES = 32
_BODY_AT = _HEAD.size + _DIGEST_BYTES

CODEC_FIELDS: dict[type, tuple[str, ...]] = {
    ClusterState: (
        "cluster",
        "seq",
        "at",
        "index",
        "settings",
        "nodes",
        "racks",
        "jobs",
        "finished",
        "reservations",
        "interactive_preemption_allowed_by",
        "interactive_preemption_reason",
        "seen",
        "applied",
        "queue_usage",
        "windows",
        "repairs",
    ),
    NodeState: ("id", "rack", "health", "cordoned", "job", "slice", "cause"),
    RackState: ("id", "pod", "size", "gpus_per_node", "free", "health", "cause"),
    JobState: (
        "spec",
        "status",
        "order",
        "submitted_at",
        "slices",
        "placed_at",
        "started_at",
        "run_since",
        "blocked",
        "borrowing",
        "front",
        "preemptions",
        "migrations",
        "swaps",
        "protected_by",
    ),
    SliceState: ("index", "size", "nodes", "racks"),
    BlockInfo: ("reason", "since", "allocatable_nodes", "placeable_slices", "explanation"),
    SeenCommands: ("recent", "older", "window"),
    QueueUsage: ("nodes", "average", "since"),
    Window: ("id", "nodes", "start", "end", "reason", "started", "cordoned", "users", "queues"),
}
"""The fields the codec writes and reads, per record type, in order. A field added to one of
these types must be taught to `_snapshot_doc.py` (writing) and `_snapshot_read.py` (reading)
and listed here: a test compares this with the types' own fields. The pydantic models in the
state (topology, settings, job specs) are written by pydantic, whole."""


class SnapshotError(ValueError):
    """The bytes are not a snapshot this build can read: truncated, corrupted, another
    format version, or a document out of shape."""


def encode_state(state: ClusterState) -> bytes:
    """The snapshot of `state`.

    Args:
        state: any cluster state.

    Returns:
        Bytes that `decode_state` turns back into a state equal to `state`.
    """
    with cycle_collection_paused():  # a document of ~a million acyclic lists and strings
        document = to_document(state)
        raw = json.dumps(document, separators=(",", ":")).encode("ascii")
        del document  # freed while the collector sleeps: it never scans the lists
    body = zlib.compress(raw, ZLIB_LEVEL)
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, ZLIB, 0, len(raw))
    return head + hashlib.sha256(head + body).digest() + body


def decode_state(data: bytes) -> ClusterState:
    """The state a snapshot holds.

    Args:
        data: what `encode_state` returned, read back from anywhere (untrusted).

    Returns:
        The state, equal to the one encoded.

    Raises:
        SnapshotError: `data` is truncated, corrupted, of another format version, or not a
            snapshot; the message says which, in one line.
    """
    data = bytes(data)
    if len(data) < _BODY_AT:
        raise SnapshotError(f"truncated snapshot: {len(data)} bytes, shorter than its header")
    magic, version, compression, _reserved, size = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise SnapshotError("not a rackplane snapshot (bad magic)")
    if version != FORMAT_VERSION:
        raise SnapshotError(
            f"snapshot format version {version}; this build reads version {FORMAT_VERSION}"
        )
    body = memoryview(data)[_BODY_AT:]
    digest = hashlib.sha256(data[: _HEAD.size])
    digest.update(body)
    if digest.digest() != data[_HEAD.size : _BODY_AT]:
        raise SnapshotError("snapshot digest mismatch: truncated or corrupted")
    if compression != ZLIB:
        raise SnapshotError(f"unknown snapshot compression {compression}")
    if size > MAX_DOCUMENT_BYTES:
        raise SnapshotError(f"snapshot declares a {size}-byte document, over the limit")
    raw = _inflate(body, size)
    where: list[str] = ["document"]
    with cycle_collection_paused():
        try:
            return from_document(json.loads(raw), where)
        except Exception as err:  # untrusted input: every failure is one kind of error
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise SnapshotError(f"malformed snapshot ({where[-1]}): {reason}") from err


def _inflate(body: memoryview, size: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(body, size + 1)
    except zlib.error as err:
        raise SnapshotError(f"snapshot body does not decompress: {err}") from err
    if len(raw) != size or not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise SnapshotError(f"snapshot body inflates to {len(raw)} bytes, not {size}")
    return raw
