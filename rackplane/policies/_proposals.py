"""How policies build the commands they propose: deterministic ids, a policy actor.

A proposal's id is `<policy>:<seq>:<n>`: the policy, the seq of the state it read, and a
counter. Two replicas of a policy that read the same state propose the same ids, so the
controller applies one and ignores the other as a redelivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from rackplane.models import CommandEnvelope, CommandRejected, Event
from rackplane.projections.state import ClusterState

C = TypeVar("C", bound=CommandEnvelope)


class Proposals:
    """Collects one policy's commands for one state."""

    def __init__(self, policy: str, state: ClusterState) -> None:
        self.policy = policy
        self.state = state
        self.commands: list[Any] = []

    def add(self, cls: type[C], **fields: Any) -> C:
        """Build a command of `cls` with the envelope filled in and keep it."""
        n = len(self.commands) + 1
        command = cls(
            id=f"{self.policy}:{self.state.seq}:{n}",
            cluster=self.state.cluster,
            actor=f"policy:{self.policy}",
            causation_id=f"{self.state.cluster}/{self.state.seq}" if self.state.seq else None,
            **fields,
        )
        self.commands.append(command)
        return command


def own_rejections(policy: str, events: Sequence[Event]) -> bool:
    """True when one of `policy`'s proposals was just rejected (stale): time to look again."""
    # A plain loop, the prefix built only for a rejection: asked after every command.
    for e in events:
        if isinstance(e, CommandRejected) and e.command_id.startswith(f"{policy}:"):
            return True
    return False
