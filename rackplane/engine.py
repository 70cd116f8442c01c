"""The in-process engine: the controller and the policies in one loop, no broker.

Theory of operation: `handle(command)` runs one external command to quiescence.

1. Decide the command against the current state and fold its events (`decide` + `evolve`).
2. Drain every pending command the same way (policy proposals waiting their turn).
3. When nothing is pending, offer each policy, in order, the events it has not seen yet.
   The first policy that proposes commands gets them queued; go back to step 2 so every
   later policy sees the state those commands made.
4. When no policy proposes anything, the cluster is quiet: return every event produced.

The controller re-validates each proposal, so a stale one becomes a `CommandRejected` event,
exactly as in the streaming shell. The clock is injected; the simulator passes virtual time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from rackplane.models import ClusterId, Command, Event
from rackplane.policies.base import Policy, due
from rackplane.policies.controller import decide
from rackplane.projections.evolve import evolve
from rackplane.projections.state import ClusterState, initial_state

Clock = Callable[[], datetime]
EventSink = Callable[[Event], None]


class PolicyLoop(RuntimeError):
    """Policies kept proposing past the cascade limit: a policy never reaches a fixed point."""


class Engine:
    """Runs commands through `decide`, folds the events, and lets policies react.

    Args:
        cluster: the cluster id, when starting from nothing.
        clock: returns "now" for each decision; injected so tests and the simulator control it.
        policies: reacted to in this order after every quiet point.
        state: a state to start from (a replay), instead of `initial_state(cluster)`.
        sinks: called with every event in order (an event log, a history writer, a metric).
        max_cascade: commands one external command may cause before `PolicyLoop` is raised.
    """

    def __init__(
        self,
        cluster: ClusterId,
        *,
        clock: Clock,
        policies: Sequence[Policy] = (),
        state: ClusterState | None = None,
        sinks: Iterable[EventSink] = (),
        max_cascade: int = 100_000,
    ) -> None:
        self.clock = clock
        self.policies = tuple(policies)
        self.state = state if state is not None else initial_state(cluster)
        self.sinks = list(sinks)
        self.max_cascade = max_cascade
        self.commands_applied = 0

    def handle(self, command: Command) -> list[Event]:
        """Apply `command` and every policy proposal it leads to; return all events, in order."""
        produced: list[Event] = []
        unseen: list[list[Event]] = [[] for _ in self.policies]
        pending: deque[Command] = deque([command])
        steps = 0
        while True:
            while pending:
                steps += 1
                if steps > self.max_cascade:
                    raise PolicyLoop(
                        f"command {command.id} caused more than {self.max_cascade} commands"
                    )
                events = self._apply(pending.popleft())
                produced.extend(events)
                for seen in unseen:
                    seen.extend(events)
            for i, policy in enumerate(self.policies):
                if not unseen[i]:
                    continue
                events, unseen[i] = unseen[i], []
                proposals = policy.propose(self.state, events, now=self.clock())
                if proposals:
                    pending.extend(proposals)
                    break
            else:
                return produced

    def wake(self) -> list[Event]:
        """Offer the state, with no events, to every policy whose `due` time has come
        (`policies.base.due`), and run what they propose to quiescence; the events."""
        now = self.clock()
        produced: list[Event] = []
        for policy in self.policies:
            when = due(policy, self.state)
            if when is None or when > now:
                continue
            for command in policy.propose(self.state, [], now=now):
                produced.extend(self.handle(command))
        return produced

    def next_due(self) -> datetime | None:
        """The earliest time a policy wants to look again without events (None: never)."""
        times = [t for p in self.policies if (t := due(p, self.state)) is not None]
        return min(times, default=None)

    def run(self, commands: Iterable[Command]) -> list[Event]:
        """Handle several commands one after another; return all events."""
        out: list[Event] = []
        for command in commands:
            out.extend(self.handle(command))
        return out

    def _apply(self, command: Command) -> list[Event]:
        events = decide(self.state, command, now=self.clock())
        for event in events:
            self.state = evolve(self.state, event)
            for sink in self.sinks:
                sink(event)
        self.commands_applied += 1
        return events
