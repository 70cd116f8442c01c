"""`state_at(events, seq=..., at=...)`: the exact cluster state at a point of its history.

Pure (no duckdb, no clock): it folds the recorded events with the same `evolve` the
controller, the policies and the simulator use, so the state is the live state at that seq.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rackplane.models import Event
from rackplane.projections import ClusterState, evolve, initial_state


def state_at(
    events: Sequence[Event], *, seq: int | None = None, at: datetime | None = None
) -> ClusterState:
    """Fold `events` (one cluster, in seq order) up to `seq` and/or `at` (both inclusive).

    Args:
        events: the cluster's events from seq 1 (or more: the fold stops at the bounds).
        seq: the last event to apply.
        at: apply only events that happened at or before this (aware) time.

    Raises:
        ValueError: no events, or events of more than one cluster.
        rackplane.projections.EventGap: a seq is missing.
    """
    if not events:
        raise ValueError("no events to replay")
    cluster = events[0].cluster
    state = initial_state(cluster)
    for event in events:
        if (seq is not None and event.seq > seq) or (at is not None and event.at > at):
            break
        state = evolve(state, event)
    return state
