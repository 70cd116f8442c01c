"""The agents: thin adapters that decode, call the pure core, encode and send.

Every agent keeps, per cluster, a replica of the state folded from the event log, rebuilt on
first use (after a start, a crash or a rebalance) by `EventLog.rebuild`. Batches come from
`stream.take_events`: Faust acks a batch only after the agent's body finished with it, and the
body awaits the broker's acknowledgement of everything it sent, so an input is never committed
before its consequences are durable (at-least-once; redeliveries are deduplicated by command
id and event seq).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from rackplane.models import COMMANDS, TELEMETRY, Command, Event, Health, ReportNodeHealth
from rackplane.policies import decide
from rackplane.policies.base import Policy
from rackplane.policies.health import HealthClassifier
from rackplane.projections import ClusterState, evolve
from rackplane.streams._inbound import decode
from rackplane.streams.codec import decode_event, encode_command, encode_event
from rackplane.streams.eventlog import EventLog
from rackplane.streams.rejected import Sender, reject, rejection

log = logging.getLogger("rackplane.agents")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    """Wall-clock time: adapters are where the clock is read."""
    return datetime.now(UTC)


class Replicas:
    """Per-cluster states of one agent, rebuilt from the event log on first use."""

    def __init__(
        self, eventlog: EventLog, *, after_rebuild: Callable[[], object] = lambda: None
    ) -> None:
        """Args:
        eventlog: where states are rebuilt from.
        after_rebuild: called after each rebuild (the worker settles its heap there).
        """
        self.eventlog = eventlog
        self.after_rebuild = after_rebuild
        self.states: dict[str, ClusterState] = {}

    async def get(self, cluster: str) -> tuple[ClusterState, list[Event]]:
        """The cluster's state; with the events it was rebuilt from if it was just rebuilt."""
        state = self.states.get(cluster)
        if state is not None:
            return state, []
        rebuilt = await self.eventlog.rebuild(cluster)
        self.states[cluster] = rebuilt.state
        self.after_rebuild()
        log.info("rebuilt %s at seq %d from the event log", cluster, rebuilt.state.seq)
        return rebuilt.state, rebuilt.events

    def put(self, state: ClusterState) -> None:
        self.states[state.cluster] = state

    def forget(self) -> None:
        """Drop every replica (partitions moved: another worker may now write)."""
        self.states.clear()


async def _settle(pending: list[Any]) -> None:
    """Wait until the broker acknowledged everything sent (raises if a send failed)."""
    if pending:
        await asyncio.gather(*pending)
        pending.clear()


class Controller:
    """Commands -> `decide` -> events: the only writer of each cluster's event log."""

    name = "controller"

    def __init__(
        self,
        replicas: Replicas,
        events: Sender,
        rejected: Sender,
        *,
        topic: str,
        limit: int,
        clock: Clock = utcnow,
    ) -> None:
        self.replicas = replicas
        self.events = events
        self.rejected = rejected
        self.topic = topic
        self.limit = limit
        self.clock = clock
        self.applied = 0

    async def process(self, batch: Sequence[Any]) -> None:
        """Decide every command of the batch, in order; return when its events are durable."""
        pending: list[Any] = []
        for ev in batch:
            d = decode(
                ev, COMMANDS.validate_json, agent=self.name, topic=self.topic, limit=self.limit
            )
            if d is None:
                continue
            if d.rejected is not None:
                await reject(self.rejected, d.rejected)
                continue
            command = d.value
            assert command is not None
            state, _ = await self.replicas.get(command.cluster)
            for event in decide(state, command, now=self.clock()):
                pending.append(
                    await self.events.send(key=event.cluster.encode(), value=encode_event(event))
                )
                state = evolve(state, event)
            self.replicas.put(state)
            self.applied += 1
        await _settle(pending)


class PolicyRunner:
    """Folds the event log and runs one policy on what is new; sends its proposals.

    A policy reads a replica that lags the controller by the proposals still in flight, so it
    would propose the same thing again on every batch until the outcome comes back (a stale
    storm: seen, 40 `BlockJob`s per batch after a restart). At most one proposal per subject
    (command type and the job, slice or node it is about) is in flight: the next waits until
    an event caused by the first arrives, or `INFLIGHT_TIMEOUT` passes.
    """

    INFLIGHT_TIMEOUT = 30.0

    def __init__(
        self,
        policy: Policy,
        replicas: Replicas,
        commands: Sender,
        *,
        clock: Clock = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.name = policy.name
        self.replicas = replicas
        self.commands = commands
        self.clock = clock
        self.monotonic = monotonic
        self.inflight: dict[tuple[str, ...], tuple[str, float]] = {}
        self.suppressed = 0

    async def process(self, batch: Sequence[Any]) -> None:
        """Fold the batch per cluster, then let the policy propose once per cluster."""
        by_cluster = _events_by_cluster(batch)
        pending: list[Any] = []
        for cluster, events in by_cluster.items():
            state, history = await self.replicas.get(cluster)
            new = list(history)  # just rebuilt: catch up on everything (proposals dedupe)
            for e in events:
                if e.seq == state.seq + 1:
                    state = evolve(state, e)
                    new.append(e)
            self.replicas.put(state)
            if not new:
                continue
            self._settled(new)
            try:
                proposals = self.policy.propose(state, new, now=self.clock())
            except Exception:
                log.exception("policy %s failed on %s at seq %d", self.name, cluster, state.seq)
                continue
            for command in proposals:
                if self._in_flight(command):
                    self.suppressed += 1
                    continue
                pending.append(
                    await self.commands.send(key=cluster.encode(), value=encode_command(command))
                )
        await _settle(pending)

    def _settled(self, events: Sequence[Event]) -> None:
        done = {e.causation_id for e in events}
        if self.inflight and done:
            self.inflight = {k: v for k, v in self.inflight.items() if v[0] not in done}

    def _in_flight(self, command: Command) -> bool:
        key = (command.cluster, *subject(command))
        now = self.monotonic()
        held = self.inflight.get(key)
        if held is not None and now - held[1] < self.INFLIGHT_TIMEOUT:
            return True
        self.inflight[key] = (command.id, now)
        return False


def subject(command: Command) -> tuple[str, ...]:
    """What a command is about: its type and the job (slice, node) or node it names."""
    parts: list[str] = [command.type]
    for field in ("job", "slice", "old_node", "node", "rack"):
        value = getattr(command, field, None)
        if value is not None:
            parts.append(str(value))
    parts.extend(getattr(command, "jobs", ()) or ())
    return tuple(parts)


def _events_by_cluster(batch: Sequence[Any]) -> dict[str, list[Event]]:
    """Decodable events of a batch by cluster, markers and garbage skipped (the projections
    agent reports garbage on the events topic)."""
    out: dict[str, list[Event]] = defaultdict(list)
    for ev in batch:
        message = getattr(ev, "message", ev)
        if any(k == "rackplane-marker" for k, _ in message.headers or ()):
            continue
        try:
            event = decode_event(message.value or b"")
        except ValueError:
            continue
        out[event.cluster].append(event)
    return out


class GpuManager:
    """Telemetry -> health verdicts -> `ReportNodeHealth` on transitions only."""

    name = "gpu_manager"

    def __init__(
        self,
        classifier: HealthClassifier,
        replicas: Replicas,
        commands: Sender,
        rejected: Sender,
        *,
        topic: str,
        limit: int,
    ) -> None:
        self.classifier = classifier
        self.replicas = replicas
        self.commands = commands
        self.rejected = rejected
        self.topic = topic
        self.limit = limit
        self.reported: dict[tuple[str, str], Health] = {}
        self.samples = 0

    async def on_events(self, batch: Sequence[Any]) -> None:
        """Keep the replica current (the verdict compares with what the controller knows)."""
        for cluster, events in _events_by_cluster(batch).items():
            if cluster not in self.replicas.states:
                continue  # rebuilt on its first sample
            state = self.replicas.states[cluster]
            for e in events:
                if e.seq == state.seq + 1:
                    state = evolve(state, e)
                    node = getattr(e, "node", None)
                    if node is not None and e.type.startswith("Node"):
                        # The controller's view changed (a repair, another reporter): compare
                        # the next verdict with that, not with what this manager last said.
                        self.reported.pop((cluster, node), None)
                        if e.type == "NodeRepaired":
                            self.classifier.forget(cluster, node)
            self.replicas.put(state)

    async def on_telemetry(self, batch: Sequence[Any]) -> None:
        """Classify each sample; report a node whose verdict changed."""
        pending: list[Any] = []
        states = self.replicas.states
        for ev in batch:
            d = decode(
                ev, TELEMETRY.validate_json, agent=self.name, topic=self.topic, limit=self.limit
            )
            if d is None:
                continue
            if d.rejected is not None:
                await reject(self.rejected, d.rejected)
                continue
            sample = d.value
            assert sample is not None
            self.samples += 1
            state = states.get(sample.cluster)  # known: no await per sample
            if state is None:
                state, _ = await self.replicas.get(sample.cluster)
            node = state.nodes.get(sample.node)
            if node is None:
                message = getattr(ev, "message", ev)
                await reject(
                    self.rejected,
                    rejection(
                        raw=message.value,
                        reason=f"node {sample.node} is not in cluster {sample.cluster!r}",
                        agent=self.name,
                        topic=self.topic,
                        partition=d.partition,
                        offset=d.offset,
                        key=message.key,
                    ),
                )
                continue
            key = (sample.cluster, sample.node)
            verdict = self.classifier.classify(
                sample, known=node.health, overrides=state.settings.xid_actions
            )
            if verdict.health is self.reported.get(key, node.health):
                continue
            self.reported[key] = verdict.health
            command = ReportNodeHealth(
                id=f"gpu_manager:{sample.node}:{sample.at.isoformat()}",
                cluster=sample.cluster,
                actor="gpu_manager",
                node=sample.node,
                health=verdict.health,
                cause=verdict.cause,
            )
            pending.append(
                await self.commands.send(key=sample.cluster.encode(), value=encode_command(command))
            )
        await _settle(pending)
