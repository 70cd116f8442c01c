"""What a policy is: a pure function of the state and the new events to proposed commands."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from rackplane.models import Command, Event
from rackplane.projections.state import ClusterState


class Policy(Protocol):
    """A pure policy: reads the state and the new events, proposes commands."""

    @property
    def name(self) -> str:
        """Short name, used in command ids and actors (`tas`, `spare_swap`, ...)."""
        ...

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        """Commands this policy wants after `events` brought the cluster to `state`."""
        ...


def due(policy: Policy, state: ClusterState) -> datetime | None:
    """When `policy` wants to look at `state` again though no event comes (a time limit that
    passes): its `due(state)` if it has one, else None (event-driven only)."""
    ask = getattr(policy, "due", None)
    return None if ask is None else ask(state)


def warm(policy: Policy, state: ClusterState) -> None:
    """Let `policy` build, for a replica just rebuilt, what its first decision on it would
    (its `warm(state)` if it has one), so that decision costs what later ones do."""
    ask = getattr(policy, "warm", None)
    if ask is not None:
        ask(state)
