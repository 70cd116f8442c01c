"""`state_at(events, seq=..., at=...)`: the exact cluster state at a point of its history.

Pure (no duckdb, no clock): it folds the recorded events with the same `evolve` the
controller, the policies and the simulator use (`fold`: one builder for the run), so the
state is the live state at that seq.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime

from rackplane.models import Event
from rackplane.projections import ClusterState, fold, initial_state


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
    within = itertools.takewhile(
        lambda e: (seq is None or e.seq <= seq) and (at is None or e.at <= at), events
    )
    return fold(initial_state(cluster), within)
