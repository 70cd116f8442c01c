"""What every reader of the event log needs to know of a record before it decodes it: is it
a marker, and which partition holds a cluster. Kept apart from `eventlog` (which pulls in the
projections) so a one-shot client loads only this.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka.partitioner import murmur2

MARKER_HEADER = "rackplane-marker"
"""The header of a marker record (see `rackplane.streams.eventlog`): not an event."""


def is_marker(headers: Sequence[tuple[str, bytes]] | None) -> bool:
    """True for a marker record (see `rackplane.streams.eventlog`)."""
    return any(k == MARKER_HEADER for k, _ in headers or ())


def partition_for(cluster: str, partitions: int) -> int:
    """The partition a cluster's commands and events live in: the Kafka default partitioner
    (murmur2 of the key, as every Kafka client computes it) over `partitions`."""
    return int(murmur2(cluster.encode()) & 0x7FFFFFFF) % partitions
