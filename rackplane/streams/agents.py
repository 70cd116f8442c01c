"""The agents: thin adapters that decode, call the pure core, encode and send.

Every agent keeps replicas of cluster states folded from the event log (`Replicas`: one read
per events partition on first use after a start, a crash or a rebalance). Batches come from
`stream.take_events`, which acks a batch once the agent's body returned; the body returns only
when the broker acknowledged everything it sent, and never returns or raises with work lost:
it retries what the broker refused, and a failure it cannot handle stops the worker before
the batch can be acknowledged (`_fatal`). So an input is never committed before its
consequences are durable (at-least-once; redeliveries are recognised by command position and
id, and by event seq).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from aiokafka.errors import KafkaError

from rackplane.models import (
    COMMANDS,
    TELEMETRY,
    Command,
    CommandPosition,
    Event,
    Health,
    RegisterTopology,
    Rejection,
    ReportNodeHealth,
    ReportRackHealth,
)
from rackplane.policies import decide, refuse_oversized
from rackplane.policies.base import Policy, due, warm
from rackplane.policies.health import HealthClassifier
from rackplane.projections import ClusterState, fold
from rackplane.streams._append import Decision, Fence, ForeignWrite, Stalled, decision_bytes
from rackplane.streams._deliveries import IDLE_S, Holes, RecordReader, filled, old_enough
from rackplane.streams._fatal import Unavailable
from rackplane.streams._inbound import decode
from rackplane.streams.codec import decode_event, encode_command, encode_event
from rackplane.streams.rejected import Sender, reject_all, rejection, rejection_of, send_all
from rackplane.streams.replicas import Replicas
from rackplane.streams.snapshots import Checkpoint, Snapshot, SnapshotStore

log = logging.getLogger("rackplane.agents")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    """Wall-clock time: adapters are where the clock is read."""
    return datetime.now(UTC)


class Appender(Protocol):
    """Where the controller's decisions go (`_append.EventAppender`)."""

    def expect(self, partition: int, offset: int) -> None: ...

    async def append(
        self, partition: int, decisions: Sequence[Decision], check: Callable[[], None]
    ) -> list[int]: ...


class Controller:
    """Commands -> `decide` -> events: the only writer of each cluster's event log.

    The scheduling cycle of one batch of commands:
    0. Put before the batch what the consumer skipped of its partitions (`_deliveries`: the
       core takes a command seen after a later one of its partition for decided); what it
       never delivers, `catch_up` reads and decides the same way.
    1. Split the batch by partition (a cluster's commands and events share a partition
       index: `partition_for(cluster)`), and refuse what may not be decided here, to
       `rejected`: undecodable input; a record whose key is not its command's cluster, or
       that sits in another partition than its cluster's (two workers would write one log);
       a cluster whose log is forked or has a gap; a cluster that does not exist, unless the
       command registers it. None of these costs a read of the log.
    2. Decide each command on its cluster's replica with its position in the commands topic
       (a redelivery of any age decides nothing); a decision too large for one record batch
       becomes one `CommandRejected` instead.
    3. Append each partition's decisions (`EventAppender`: whole decisions, in order, while the
       partition is ours) and only then keep the new states. An event someone else wrote
       among them makes the controller reload the partition, whose read judges it.
    4. Every `checkpoint_every` events of a partition, save a checkpoint of it (snapshots of
       all its clusters, as of its last event) in the background, unless a cluster of it is
       broken: a later rebuild reads that plus the tail.
    5. When the broker fails: drop the batch's partitions (some decisions may have landed),
       wait, rebuild them from the log and go again from step 1; what landed is recognised by
       its position. Past `outage_limit` seconds the worker stops (`Unavailable`). A revoked
       partition stops the worker too (in flight at a rebalance that did not wait for it): a
       supervisor restarts it, and the rebuild judges the log.
    """

    name = "controller"

    def __init__(
        self,
        replicas: Replicas,
        appender: Appender,
        rejected: Sender,
        *,
        topic: str,
        limit: int,
        max_decision_bytes: int,
        fence: Fence,
        clock: Clock = utcnow,
        outage_limit: float = 300.0,
        stall_wait: float = 6.0,
        snapshots: SnapshotStore | None = None,
        checkpoint_every: int = 10_000,
        holes: Holes | None = None,
        reader: RecordReader | None = None,
        released: Callable[[int, int, int], Awaitable[None]] | None = None,
        seal: Callable[[Event], Event] | None = None,
    ) -> None:
        self.replicas = replicas
        self.appender = appender
        self.rejected = rejected
        self.topic = topic
        self.limit = limit
        self.max_decision_bytes = max_decision_bytes
        self.fence = fence
        self.clock = clock
        self.outage_limit = outage_limit
        self.stall_wait = stall_wait
        self.applied = 0
        self.retries = 0
        self.failing_since: float | None = None
        """When the current run of failed appends began (None: appending works)."""
        self.snapshots = snapshots
        self.checkpoint_every = checkpoint_every
        self.since_checkpoint: dict[int, int] = defaultdict(int)
        self.checkpoints = 0
        self._saving: dict[int, asyncio.Task[None]] = {}
        self.holes = holes
        """The offsets expected next per commands partition (None: trust the consumer)."""
        self.reader = reader
        self.undelivered = 0
        """Commands read from the topic because the consumer did not deliver them."""
        self.released = released
        """Told (partition, lo, hi) once the records [lo, hi) it read itself (what the consumer
        skipped or never delivered) are decided, so the consumer may commit past them: it
        never acks what it never delivered, and its commit would stop there for good."""
        self.seal = seal
        """Signs each event before it is appended (`KeyFile.sign_event`; None: unsigned)."""
        self._read_here: list[tuple[int, int, int]] = []
        """Ranges read from the topic by the batch in hand, released once it is decided."""
        self._lock = asyncio.Lock()

    @property
    def forged(self) -> int:
        """Events its rebuilds passed over: not signed by a trusted key."""
        return self.replicas.forged

    async def process(self, batch: Sequence[Any]) -> None:
        """Decide every command of the batch, in order; return when its events are durable."""
        async with self._lock:
            await self._process(batch)

    async def catch_up(self, partition: int, *, older_than: float = IDLE_S) -> int:
        """Decide what the commands topic holds at and after `partition`'s expected offset
        and was written over `older_than` seconds ago (what the consumer did not deliver:
        `_deliveries.CatchUp`; younger records are left to the consumer, which may be about
        to deliver them); return how many records that was."""
        assert self.holes is not None and self.reader is not None
        # The look (a fetch, which waits up to half a second when nothing is there) is not
        # made under the controller's lock: held there, it kept every command of the worker
        # waiting, ~0.5 s of each `IDLE_S` per idle partition (issue 20: a submit's answer).
        try:
            async with self._lock:
                if partition not in self.fence.owned:
                    return 0
                lo = await self._expected(partition)
            peeked = await self.reader.peek(partition, lo)
        except (KafkaError, OSError, TimeoutError) as err:  # the broker away: next time
            log.info("looking at commands[%d] failed (%s: %s)", partition, _name(err), err)
            return 0
        records = old_enough(peeked, time.time() - older_than)
        if not records:
            return 0
        async with self._lock:
            if partition not in self.fence.owned:
                return 0
            lo = await self._expected(partition)  # the consumer may have delivered some since
            records = [r for r in records if r.offset >= lo]
            if not records:
                return 0
            log.warning(
                "commands[%d] offsets %d..%d were not delivered by the consumer: read from "
                "the topic and decided",
                partition,
                records[0].offset,
                records[-1].offset,
            )
            self.undelivered += len(records)
            self._read_here.append((partition, lo, records[-1].offset + 1))
            await self._process(records)
            return len(records)

    def forget_deliveries(self) -> None:
        """A rebalance: expect each partition after its last decided command (as its events
        say) when it comes back."""
        if self.holes is not None:
            self.holes.forget()

    async def _expected(self, partition: int) -> int:
        """The offset of commands partition `partition` to decide next: after the last batch,
        else after the last command the partition's events name (see `_deliveries`)."""
        assert self.holes is not None
        got = self.holes.next.get(partition)
        if got is not None:
            return got
        await self._ensure_loaded(partition)
        r = self.replicas
        decided = [r.states[c].applied.get(partition) for c in r.members(partition)]
        known = [o for o in decided if o is not None]
        got = max(known) + 1 if known else 0
        self.holes.next[partition] = got
        return got

    async def _with_holes_filled(self, batch: Sequence[Any]) -> list[Any]:
        """`batch` with the records the consumer skipped read back and put in their place."""
        if self.holes is None or self.reader is None:
            return list(batch)
        expected = {p: await self._expected(p) for p in _partitions(batch)}
        whole, ranges = await filled(
            batch, self.holes, expected, self.reader.read, topic="commands", whose="decided"
        )
        self._read_here.extend(ranges)
        self.undelivered += len(whole) - len(batch)
        return whole

    async def _process(self, batch: Sequence[Any]) -> None:
        epoch = self.fence.epoch
        delay = 0.1
        filled: list[Any] | None = None
        while True:
            try:
                if filled is None:
                    filled = await self._with_holes_filled(batch)
                await self._once(filled, epoch)
            except ForeignWrite as err:
                log.error("%s; reloading the partitions to judge them", err)
                self.replicas.forget(_partitions(batch))
                continue  # what this writer appended is recognised by position
            except Stalled as err:
                log.warning("%s; waiting %.0f s for the group to settle", err, self.stall_wait)
                self.replicas.forget(_partitions(batch))
                await asyncio.sleep(self.stall_wait)
                epoch = self.fence.epoch if self.fence.epoch == epoch else -1
                continue
            except (KafkaError, OSError, TimeoutError) as err:
                self.replicas.forget(_partitions(batch))
                now = time.monotonic()
                if self.failing_since is None:
                    self.failing_since = now
                    log.warning("appending events failed (%s: %s); retrying", _name(err), err)
                if now - self.failing_since > self.outage_limit:
                    raise Unavailable(
                        f"the broker refused or lost appends for {now - self.failing_since:.0f}"
                        f" s (limit {self.outage_limit:.0f} s): {_name(err)}: {err}"
                    ) from err
                self.retries += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if self.failing_since is not None:
                log.warning(
                    "appending events works again after %.1f s and %d retries",
                    time.monotonic() - self.failing_since,
                    self.retries,
                )
                self.failing_since = None
                self.retries = 0
            if self.holes is not None and self.fence.epoch == epoch:
                self.holes.decided(filled, now=time.monotonic())
                if self.released is not None:
                    for partition, lo, hi in self._read_here:
                        await self.released(partition, lo, hi)
            self._read_here = []
            return

    async def _once(self, batch: Sequence[Any], epoch: int) -> None:
        rejections: list[Rejection] = []
        by_partition: dict[int, list[tuple[Any, Command]]] = defaultdict(list)
        for ev in batch:
            d = decode(
                ev, COMMANDS.validate_json, agent=self.name, topic=self.topic, limit=self.limit
            )
            if d is None:
                continue
            if d.rejected is not None:
                rejections.append(d.rejected)
                continue
            command = d.value
            assert command is not None
            message = getattr(ev, "message", ev)
            why = self._misplaced(message, command)
            if why is not None:
                rejections.append(self._rejection(message, why))
                continue
            by_partition[message.partition].append((message, command))
        for partition, commands in by_partition.items():
            await self._partition(partition, commands, epoch, rejections)
        await reject_all(self.rejected, rejections)

    def _misplaced(self, message: Any, command: Command) -> str | None:
        key = message.key if isinstance(message.key, bytes) else None
        if key != command.cluster.encode():
            return (
                f"record key {key!r} is not the command's cluster {command.cluster!r}: "
                "commands are keyed by their cluster id"
            )
        home = self.replicas.partition_of(command.cluster)
        if message.partition != home:
            return (
                f"cluster {command.cluster!r} lives in partition {home}, "
                f"not {message.partition}: commands go where their key hashes"
            )
        return None

    async def _partition(
        self,
        partition: int,
        commands: list[tuple[Any, Command]],
        epoch: int,
        rejections: list[Rejection],
    ) -> None:
        self.fence.check(epoch, partition)
        await self._ensure_loaded(partition)
        states: dict[str, ClusterState] = {}
        decisions: list[Decision] = []
        decided: list[str] = []
        for message, command in commands:
            cluster = command.cluster
            broken = self.replicas.broken.get(cluster)
            if broken is not None:
                rejections.append(self._rejection(message, f"{broken}: not decided"))
                continue
            state = states.get(cluster) or self.replicas.states.get(cluster)
            if state is None:
                if not isinstance(command, RegisterTopology):
                    rejections.append(
                        self._rejection(
                            message,
                            f"cluster {cluster!r} does not exist: register its topology first",
                        )
                    )
                    continue
                state = self.replicas.eventlog.initial(cluster)
            position = CommandPosition(partition, message.offset)
            now = self.clock()
            events = decide(state, command, now=now, position=position)
            if not events:
                continue  # decided before (a redelivery)
            key = cluster.encode()
            if self.seal is not None:
                events = [self.seal(e) for e in events]
            records = [(key, encode_event(e)) for e in events]
            size = decision_bytes(records)
            if size > self.max_decision_bytes:
                events = refuse_oversized(
                    state, command, now=now, size=size, limit=self.max_decision_bytes,
                    position=position,
                )  # fmt: skip
                if self.seal is not None:
                    events = [self.seal(e) for e in events]
                records = [(key, encode_event(e)) for e in events]
            states[cluster] = fold(state, events)
            decisions.append(records)
            decided.append(cluster)
        if not decisions:
            return
        ends = await self.appender.append(
            partition, decisions, lambda: self.fence.check(epoch, partition)
        )
        last: dict[str, int] = dict(zip(decided, ends, strict=True))
        for cluster, state in states.items():
            self.replicas.put(state, offset=last[cluster])
        self.applied += len(decisions)
        self.since_checkpoint[partition] += sum(len(d) for d in decisions)
        if self.snapshots is not None and self.since_checkpoint[partition] >= self.checkpoint_every:
            self._checkpoint(partition, epoch)

    async def _ensure_loaded(self, partition: int) -> None:
        if not self.replicas.loaded(partition):
            await self.replicas.load(partition)
            self.appender.expect(partition, self.replicas.ends[partition] + 1)

    def _checkpoint(self, partition: int, epoch: int) -> None:
        """Save a checkpoint of `partition` in the background (one at a time per partition)."""
        running = self._saving.get(partition)
        if running is not None and not running.done():
            return
        r = self.replicas
        members = r.members(partition)
        if any(c in r.broken for c in members):
            return  # a checkpoint would hide the fork or gap from later rebuilds
        offsets = {c: r.last_offsets.get(c) for c in members}
        known = {c: o for c, o in offsets.items() if o is not None}
        if len(known) != len(members) or not known:
            return
        checkpoint = Checkpoint(
            partition=partition,
            covers=max(known.values()),
            snapshots={c: Snapshot(c, r.states[c], o) for c, o in known.items()},
        )
        self.since_checkpoint[partition] = 0
        self._saving[partition] = asyncio.get_running_loop().create_task(
            self._save_checkpoint(checkpoint, epoch)
        )

    async def _save_checkpoint(self, checkpoint: Checkpoint, epoch: int) -> None:
        assert self.snapshots is not None
        if self.fence.epoch != epoch:
            return  # no longer ours: the new owner saves its own
        started = time.monotonic()
        try:
            await self.snapshots.save(checkpoint)
        except Exception as err:  # a lost checkpoint costs a longer rebuild, nothing else
            log.warning(
                "checkpoint of events partition %d failed (%s: %s); the next one is tried "
                "after %d more events",
                checkpoint.partition,
                type(err).__name__,
                err,
                self.checkpoint_every,
            )
            return
        self.checkpoints += 1
        log.info(
            "checkpoint of events partition %d at offset %d: %d clusters in %.2f s",
            checkpoint.partition,
            checkpoint.covers,
            len(checkpoint.snapshots),
            time.monotonic() - started,
        )

    def _rejection(self, message: Any, reason: str) -> Rejection:
        return rejection_of(message, reason, agent=self.name, topic=self.topic)


def _partitions(batch: Sequence[Any]) -> set[int]:
    return {getattr(ev, "message", ev).partition for ev in batch}


def _name(err: BaseException) -> str:
    return type(err).__name__


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
        sign: Callable[[Command], Command] = lambda c: c,
    ) -> None:
        """`sign`: the worker's signature on each proposal (`KeyFile.sign`; none by default,
        which only a cluster without keys takes)."""
        self.sign = sign
        self.policy = policy
        self.name = policy.name
        self.replicas = replicas
        self.commands = commands
        self.clock = clock
        self.monotonic = monotonic
        self.inflight: dict[tuple[str, ...], tuple[str, float]] = {}
        self.suppressed = 0
        self.warmed: set[str] = set()
        """Clusters the policy was offered to warm (`policies.base.warm`)."""

    async def process(self, batch: Sequence[Any]) -> None:
        """Fold the batch per cluster, then let the policy propose once per cluster."""
        by_cluster = _events_by_cluster(batch)
        out: list[tuple[bytes, bytes]] = []
        for cluster, events in by_cluster.items():
            state, history = await self.replicas.follow(cluster)
            if cluster in self.replicas.broken:
                continue  # its log is forked or has a gap: the controller decides nothing
            state, applied = self.replicas.advance(state, events)
            new = [*history, *applied]  # just rebuilt: catch up on everything (proposals dedupe)
            self.replicas.put(state)
            if history or cluster not in self.warmed:
                # Just rebuilt (or first seen): its first decision should cost what later
                # ones do, not build the policy's tables on the clock.
                self.warmed.add(cluster)
                try:
                    warm(self.policy, state)
                except Exception:
                    log.exception("policy %s failed to warm on %s", self.name, cluster)
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
                out.append((cluster.encode(), encode_command(self.sign(command))))
        await send_all(self.commands, out, what=f"{self.name}'s proposals")

    async def tick(self) -> None:
        """Offer each cluster's state again, with no events, where the policy is due
        (`policies.base.due`: a time limit passed): no event marks such a moment. Proposal
        ids are the state's, so two workers that tick on one cluster propose the same."""
        if getattr(self.policy, "due", None) is None:
            return
        now = self.clock()
        out: list[tuple[bytes, bytes]] = []
        for cluster, state in list(self.replicas.states.items()):
            if cluster in self.replicas.broken:
                continue
            when = due(self.policy, state)
            if when is None or when > now:
                continue
            try:
                proposals = self.policy.propose(state, [], now=now)
            except Exception:
                log.exception("policy %s failed on %s at seq %d", self.name, cluster, state.seq)
                continue
            for command in proposals:
                if not self._in_flight(command):
                    out.append((cluster.encode(), encode_command(self.sign(command))))
        await send_all(self.commands, out, what=f"{self.name}'s proposals")

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


class Ticker:
    """Calls each policy runner's `tick` every `every` seconds while the worker runs (a
    `Loop` of the worker: started and stopped with the app)."""

    def __init__(self, runners: Sequence[PolicyRunner], every: float = 1.0) -> None:
        self.runners = [r for r in runners if getattr(r.policy, "due", None) is not None]
        self.every = every
        self.joined = asyncio.Event()
        self.joined.set()  # nothing to join: it reads the runners' replicas
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.runners:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            for runner in self.runners:
                try:
                    await runner.tick()
                except (KafkaError, Unavailable) as err:  # the next tick tries again
                    log.warning("policy %s could not send its proposals: %s", runner.name, err)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


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


SAID_IDS = 8
"""How many of its latest report ids per node a GPU Manager knows as its own."""


class Said(NamedTuple):
    """What a GPU Manager last reported of a node."""

    health: Health
    seen: int
    """The seq of the view it reported on."""
    ids: tuple[str, ...]
    """The ids of its latest reports of the node (at most `SAID_IDS`): the events they cause
    are not news to it."""


class GpuManager:
    """Telemetry -> health verdicts -> `ReportNodeHealth` on transitions only, and
    `ReportRackHealth` when the verdict says the node's rack is at fault (the rack rule)."""

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
        sign: Callable[[Command], Command] = lambda c: c,
    ) -> None:
        """`sign`: the worker's signature on each report (see `PolicyRunner`)."""
        self.sign = sign
        self.classifier = classifier
        self.replicas = replicas
        self.commands = commands
        self.rejected = rejected
        self.topic = topic
        self.limit = limit
        self.reported: dict[tuple[str, str], Said] = {}
        """(cluster, node) -> what this manager last reported of the node."""
        self.samples = 0
        self.folded: dict[int, int] = {}
        """The highest telemetry offset handled, per partition."""
        self.redelivered = 0
        """Records passed over because they were handled already."""

    async def on_events(self, batch: Sequence[Any]) -> None:
        """Keep the replica current (the verdict compares with what the controller knows)."""
        for cluster, events in _events_by_cluster(batch).items():
            state = self.replicas.states.get(cluster)
            if state is None:
                if not self.replicas.loaded(self.replicas.partition_of(cluster)):
                    continue  # its partition is read on the cluster's first sample
                state = self.replicas.eventlog.initial(cluster)  # new on a loaded partition
            state, applied = self.replicas.advance(state, events)
            for e in applied:
                node = getattr(e, "node", None)
                if node is None or not e.type.startswith("Node"):
                    continue
                said = self.reported.get((cluster, node))
                if said is not None and e.causation_id not in said.ids:
                    # The controller's view changed (a repair, another reporter, another
                    # worker's manager): compare the next verdict with that, not with what
                    # this manager last said. Its own reports are not such news: it may have
                    # said more since (a node it reported degraded, then failed, is not
                    # reported failed a second time when the degrade's event arrives).
                    del self.reported[(cluster, node)]
            self.replicas.put(state)

    async def on_telemetry(self, batch: Sequence[Any]) -> None:
        """Classify each sample; report a node whose verdict changed.

        A record at or below the highest offset handled on its partition is passed over: the
        loop reads again from its last commit after the group moved (at-least-once), and
        folding a sample twice is not harmless. A node's state moves with each sample (a
        sticky XID is new only if the one before differs), so an older sample read again
        after a repair (no XID yet) would make the sticky XID 79 that followed look like a
        new incident and fail the repaired node again.
        """
        out: list[tuple[bytes, bytes]] = []
        rejections: list[Rejection] = []
        states = self.replicas.states
        folded = self.folded
        for ev in batch:
            message = getattr(ev, "message", ev)
            if message.offset <= folded.get(message.partition, -1):
                self.redelivered += 1
                continue
            folded[message.partition] = message.offset
            d = decode(
                ev, TELEMETRY.validate_json, agent=self.name, topic=self.topic, limit=self.limit
            )
            if d is None:
                continue
            if d.rejected is not None:
                rejections.append(d.rejected)
                continue
            sample = d.value
            assert sample is not None
            self.samples += 1
            state = states.get(sample.cluster)  # known: no await per sample
            if state is None:  # one read of its partition, then a short one a second at most
                state = await self.replicas.lookup(sample.cluster)
            node = state.nodes.get(sample.node) if state is not None else None
            if node is None or state is None:
                rejections.append(
                    rejection(
                        raw=message.value,
                        reason=(
                            f"node {sample.node} is not in cluster {sample.cluster!r}"
                            if state is not None and state.registered
                            else f"cluster {sample.cluster!r} does not exist (sample of node "
                            f"{sample.node})"
                        ),
                        agent=self.name,
                        topic=self.topic,
                        partition=d.partition,
                        offset=d.offset,
                        key=message.key,
                    )
                )
                continue
            key = (sample.cluster, sample.node)
            rack = state.racks.get(node.rack)
            repaired_at = state.repairs.get(sample.node, 0)
            verdict = self.classifier.classify(
                sample,
                known=node.health,
                overrides=state.settings.xid_actions,
                rack=None if rack is None else (rack.id, rack.health),
                repaired_at=repaired_at,
            )
            if verdict.rack is not None:
                report = ReportRackHealth(
                    id=f"gpu_manager:rack:{verdict.rack.rack}:{sample.at.isoformat()}",
                    cluster=sample.cluster,
                    actor="gpu_manager",
                    rack=verdict.rack.rack,
                    health=verdict.rack.health,
                    cause=verdict.rack.cause,
                )
                out.append((sample.cluster.encode(), encode_command(self.sign(report))))
            # What it said before the node's last repair says nothing now (the classifier and
            # the controller go by the repair in the view too, however the view learnt of it).
            said = self.reported.get(key)
            if verdict.health is (
                node.health if said is None or said.seen < repaired_at else said.health
            ):
                continue
            command = ReportNodeHealth(
                id=f"gpu_manager:{sample.node}:{sample.at.isoformat()}",
                cluster=sample.cluster,
                actor="gpu_manager",
                node=sample.node,
                health=verdict.health,
                cause=verdict.cause,
                seen=state.seq,
            )
            ids = () if said is None else said.ids[1 - SAID_IDS :]
            self.reported[key] = Said(verdict.health, state.seq, (*ids, command.id))
            out.append((sample.cluster.encode(), encode_command(self.sign(command))))
        await reject_all(self.rejected, rejections)
        await send_all(self.commands, out, what="health reports")
