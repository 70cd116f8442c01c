"""The console's timeline: the events it knows, and the state at any point of them.

Theory of operation: the console never asks a source for "the state"; it keeps the event list
and folds it. `Timeline.append` folds new events into the head state (a live tail) and keeps a
checkpoint state every `CHECKPOINT_EVERY` events, so `state_at(position)` folds at most that
many events from the nearest checkpoint: scrubbing through a long history stays cheap. A
position is a count of events applied (0 = before the first event, `len(timeline)` = head).
Nothing here knows where events come from: the broker, a DuckDB file, or a test list.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from datetime import datetime

from rackplane.models import Event
from rackplane.projections import ClusterState, evolve, initial_state

CHECKPOINT_EVERY = 256

NOTABLE: dict[str, frozenset[str]] = {
    "failure": frozenset({"NodeFailed", "NodeDegraded", "RackFailed", "RackDegraded"}),
    "swap": frozenset({"NodeSwapped", "SliceMigrated", "SliceDegraded"}),
    "preemption": frozenset({"JobPreempted", "DefragPlanned"}),
}
"""What "jump to the next failure, swap or preemption" stops at."""
NOTABLE_TYPES = frozenset().union(*NOTABLE.values())


class Timeline:
    """The ordered events of one cluster and the states they fold to."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.events: list[Event] = []
        self.head = initial_state(cluster)
        self._checkpoints: list[ClusterState] = [self.head]
        """`_checkpoints[k]` is the state after `k * CHECKPOINT_EVERY` events."""
        self.skipped = 0
        """Events not applied: of another cluster, already seen, or after a gap."""

    def __len__(self) -> int:
        return len(self.events)

    def append(self, events: Iterable[Event]) -> list[Event]:
        """Fold the next events into the head; return those applied (redeliveries, other
        clusters and events after a gap are counted in `skipped`)."""
        applied = []
        for event in events:
            if event.cluster != self.cluster or event.seq != self.head.seq + 1:
                self.skipped += 1
                continue
            self.head = evolve(self.head, event)
            self.events.append(event)
            applied.append(event)
            if len(self.events) % CHECKPOINT_EVERY == 0:
                self._checkpoints.append(self.head)
        return applied

    def state_at(self, position: int) -> ClusterState:
        """The state after the first `position` events (clamped to the timeline)."""
        position = max(0, min(position, len(self.events)))
        if position == len(self.events):
            return self.head
        k = position // CHECKPOINT_EVERY
        state = self._checkpoints[k]
        for event in self.events[k * CHECKPOINT_EVERY : position]:
            state = evolve(state, event)
        return state

    def position_at(self, at: datetime) -> int:
        """The position just after the last event at or before `at`."""
        return bisect_right([e.at for e in self.events], at)

    def position_of_seq(self, seq: int) -> int:
        """The position after the event with this seq (seq is gapless from 1)."""
        return max(0, min(seq, len(self.events)))

    def next_notable(self, position: int, kinds: Sequence[str] = tuple(NOTABLE)) -> int | None:
        """The position just after the next failure/swap/preemption past `position`."""
        types = frozenset().union(*(NOTABLE[k] for k in kinds))
        for i in range(position, len(self.events)):
            if self.events[i].type in types:
                return i + 1
        return None

    def previous_notable(self, position: int, kinds: Sequence[str] = tuple(NOTABLE)) -> int | None:
        """The position just after the last notable event before the one ending at `position`."""
        types = frozenset().union(*(NOTABLE[k] for k in kinds))
        for i in range(min(position, len(self.events)) - 2, -1, -1):
            if self.events[i].type in types:
                return i + 1
        return None
