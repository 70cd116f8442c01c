"""Per-agent replicas of cluster states, rebuilt from the event log one partition at a time.

Rules of this file:
- A replica is loaded per events partition, on first use after a start, a crash or a
  rebalance: one read (a snapshot plus the tail when a checkpoint exists) gives every cluster
  on the partition. A cluster absent after its partition was loaded does not exist: asking
  for it costs a dictionary lookup, not another read, a marker or a phantom view.
- A cluster whose log is forked or has a gap (`LogCorrupt`) is held in `broken`: its last good
  state stays readable, and the controller writes nothing more for it.
- `forget` drops partitions (revoked, or in doubt after a failed append): the next use reloads
  them from the log, which is the truth.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from rackplane.models import Event
from rackplane.projections import ClusterState, evolve
from rackplane.streams.eventlog import (
    EventLog,
    Inapplicable,
    LogCorrupt,
    opens_a_log,
    partition_for,
)
from rackplane.streams.snapshots import SnapshotStore

log = logging.getLogger("rackplane.replicas")


@dataclass(frozen=True)
class Resume:
    """Where a partition's read may start: the states at `start - 1` (from snapshots), with
    the offsets of their last events."""

    start: int
    states: dict[str, ClusterState]
    offsets: dict[str, int]
    signed: bool = False
    """The checkpoint was signed by a trusted log key."""


class Checkpoints(Protocol):
    """Where snapshots come from (`rackplane.streams.snapshots`), by events partition."""

    async def resume(self, partition: int) -> Resume | None: ...


class Replicas:
    """The cluster states one agent keeps, by events partition."""

    def __init__(
        self,
        eventlog: EventLog,
        *,
        partitions: int,
        checkpoints: Checkpoints | None = None,
        after_rebuild: Callable[[], object] = lambda: None,
    ) -> None:
        """Args:
        eventlog: where states are rebuilt from.
        partitions: partitions of the events topic (a cluster's partition depends on it).
        checkpoints: snapshots to start a rebuild from (None: read from offset 0).
        after_rebuild: called after each rebuild (the worker settles its heap there).
        """
        self.eventlog = eventlog
        self.partitions = partitions
        self.checkpoints = checkpoints
        self.after_rebuild = after_rebuild
        self.states: dict[str, ClusterState] = {}
        self.broken: dict[str, LogCorrupt] = {}
        self.ends: dict[int, int] = {}
        """Loaded partitions -> the offset their last read stopped at (a marker's)."""
        self.signed: dict[int, bool] = {}
        """Loaded partitions -> whether their read met a signed event or checkpoint."""
        self.forged = 0
        """Events the reads skipped as not written by the controller (`rackplane.logtrust`)."""
        self.last_offsets: dict[str, int | None] = {}
        """Cluster -> offset of its newest event known here."""
        self._tails: dict[str, list[Event]] = {}
        self._members: dict[int, set[str]] = {}
        self._refreshed: dict[int, float] = {}
        self.rebuilds = 0

    def partition_of(self, cluster: str) -> int:
        return partition_for(cluster, self.partitions)

    def loaded(self, partition: int) -> bool:
        return partition in self.ends

    def members(self, partition: int) -> set[str]:
        """The clusters of a loaded partition."""
        return set(self._members.get(partition, ()))

    async def load(self, partition: int) -> None:
        """Read `partition` into the replicas unless it is loaded."""
        if partition in self.ends:
            return
        started = time.monotonic()
        resume = await self.checkpoints.resume(partition) if self.checkpoints else None
        read = await self.eventlog.rebuild_partition(
            partition,
            start=resume.start if resume else 0,
            states=resume.states if resume else None,
            signed=resume.signed if resume else False,
        )
        members = self._members.setdefault(partition, set())
        for cluster, found in read.clusters.items():
            self.states[cluster] = found.state
            self.last_offsets[cluster] = (
                found.last_offset
                if found.last_offset is not None or resume is None
                else resume.offsets.get(cluster)
            )
            self._tails[cluster] = found.events
            members.add(cluster)
        for cluster, err in read.broken.items():
            self.broken[cluster] = err
        self.ends[partition] = read.end
        self.signed[partition] = read.signed
        self.forged += read.forged
        self.rebuilds += 1
        self.after_rebuild()
        log.info(
            "rebuilt events partition %d: %d clusters, %d events read in %.2f s%s",
            partition,
            len(read.clusters),
            sum(len(f.events) for f in read.clusters.values()),
            time.monotonic() - started,
            f" from a checkpoint at offset {resume.start - 1}" if resume else "",
        )

    async def get(
        self, cluster: str, partition: int | None = None
    ) -> tuple[ClusterState | None, list[Event]]:
        """The cluster's state (None: no such cluster), with the events its partition's
        rebuild applied if that rebuild happened just now (they are handed out once)."""
        p = self.partition_of(cluster) if partition is None else partition
        if p not in self.ends:
            await self.load(p)
        return self.states.get(cluster), self._tails.pop(cluster, [])

    async def lookup(self, cluster: str, *, refresh_after: float = 1.0) -> ClusterState | None:
        """For an agent that does not read the events topic itself (the GPU Manager's
        telemetry): the cluster's state, reading what its partition gained since the last read
        when the cluster is not known, at most once per `refresh_after` seconds per partition
        (so a flood of unknown names costs one short read a second, not one each)."""
        state, _ = await self.get(cluster)
        if state is not None:
            return state
        p = self.partition_of(cluster)
        now = time.monotonic()
        if now - self._refreshed.get(p, 0.0) < refresh_after:
            return None
        self._refreshed[p] = now
        members = self._members.get(p, set())
        read = await self.eventlog.rebuild_partition(
            p, start=self.ends[p], states={c: self.states[c] for c in members if c in self.states}
        )
        for found in read.clusters.values():
            self.put(found.state, offset=found.last_offset)
        self.broken.update(read.broken)
        self.ends[p] = read.end
        return self.states.get(cluster)

    async def follow(self, cluster: str) -> tuple[ClusterState, list[Event]]:
        """For an agent that reads the events topic: the cluster's state, or the state before
        its first event when the cluster is new to a loaded partition (its events are coming
        down the stream)."""
        state, tail = await self.get(cluster)
        return (state if state is not None else self.eventlog.initial(cluster)), tail

    def advance(
        self, state: ClusterState, events: Sequence[Event]
    ) -> tuple[ClusterState, list[Event]]:
        """Fold the stream's next events of one cluster into `state` (for agents that read the
        events topic); return the new state and the events it applied. Events already applied
        or out of line are skipped (the rebuild is the judge of the log); one that cannot apply
        (forged) breaks the cluster here, said once at ERROR, instead of killing the agent."""
        applied: list[Event] = []
        for e in events:
            if e.seq != state.seq + 1 or state.cluster in self.broken:
                continue
            if not state.registered and not opens_a_log(e):
                continue  # not an event of any log: the projections agent rejects it
            try:
                state = evolve(state, e)
            except Exception as err:
                broken = Inapplicable(
                    state.cluster, e.seq, -1, f"{self.eventlog.topic} (as streamed)", err
                )
                self.broken[state.cluster] = broken
                log.error("%s; this agent follows it no further", broken)
                break
            applied.append(e)
        return state, applied

    def put(self, state: ClusterState, *, offset: int | None = None) -> None:
        """Keep `state` as the cluster's replica (`offset`: of its newest event, if known)."""
        self.states[state.cluster] = state
        self._members.setdefault(self.partition_of(state.cluster), set()).add(state.cluster)
        if offset is not None:
            self.last_offsets[state.cluster] = offset

    def forget(self, partitions: Iterable[int] | None = None) -> None:
        """Drop the replicas of `partitions` (all when None): they are rebuilt on next use."""
        chosen = list(self.ends) if partitions is None else list(partitions)
        for p in chosen:
            self.ends.pop(p, None)
            self.signed.pop(p, None)
            for cluster in self._members.pop(p, set()):
                self.states.pop(cluster, None)
                self.broken.pop(cluster, None)
                self.last_offsets.pop(cluster, None)
                self._tails.pop(cluster, None)
        if partitions is None:
            self.states.clear()
            self.broken.clear()
            self.last_offsets.clear()
            self._tails.clear()
            self._members.clear()


class StoreCheckpoints:
    """`Checkpoints` from the snapshots topic (`snapshots.SnapshotStore`)."""

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store

    async def resume(self, partition: int) -> Resume | None:
        checkpoint = await self.store.load(partition)
        if checkpoint is None:
            return None
        return Resume(
            start=checkpoint.covers + 1,
            states={c: s.state for c, s in checkpoint.snapshots.items()},
            offsets={c: s.events_offset for c, s in checkpoint.snapshots.items()},
            signed=checkpoint.signed,
        )
