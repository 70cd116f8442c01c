"""Read-only reads of the running pipeline: the state of its clusters now, from the log.

The read commands (`rackplane status`, `jobs`, `job`, `racks`, `rack`) answer from here, on
any machine that can read the topics, whichever worker owns a cluster: what they show is the
event log itself, folded, so it is what every worker would show, never a cache that can be
stale or empty after a rebalance.

Theory of operation:
1. The end. A read must see every event written before it started, and it must not write
   (an operator's credentials may only read the events and snapshots topics: no marker
   records as the workers' rebuilds append, eventlog.py). ListOffsets is not trusted (Tansu
   answers it wrongly after multi-record batches, STACK_NOTES); a fetch's high watermark is
   right on both brokers, so one fetch of the partition says where its end is.
2. A snapshot plus the tail. The newest checkpoint of the cluster's partition (snapshots.py,
   loaded read-only the same way) gives the states at its `covers`; only the events after it
   are folded, so a read costs the tail of the log, not its history. No checkpoint (none
   written yet, the topic missing, or one that does not check out): the partition is read
   from offset 0, which is always right, only slower.
3. Judged as the workers judge. With `log_keys` set, an event or a checkpoint not signed by
   one of them is passed over (`rackplane.logtrust`); a forked or gapped log is reported, not
   shown as if it were whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer

from rackplane.logtrust import LogTrust
from rackplane.models import Event
from rackplane.projections import ClusterState
from rackplane.streams._partition_reader import highwater
from rackplane.streams.config import StreamConfig
from rackplane.streams.eventlog import EventLog, LogCorrupt, partition_for
from rackplane.streams.snapshots import SnapshotStore

__all__ = ["ClusterView", "LiveLog", "NoSuchTopic"]


class NoSuchTopic(LookupError):
    """The events topic is not on the broker (no worker ever ran with this prefix)."""


@dataclass
class ClusterView:
    """One cluster as its log says now."""

    state: ClusterState
    partition: int
    end: int
    """The partition's end when it was read (exclusive)."""
    tail: list[Event] = field(default_factory=list)
    """The events this read folded (after the checkpoint; all of them without one)."""
    from_checkpoint: bool = False
    broken: LogCorrupt | None = None
    """Set when the cluster's log is forked or has a gap: `state` stops before it."""


class LiveLog:
    """Reads clusters' states from the events topic (`async with LiveLog(config) as live:`)."""

    def __init__(
        self, config: StreamConfig, *, timeout: float = 10.0, trust: LogTrust | None = None
    ) -> None:
        """Args:
        config: the pipeline's connection and topic settings.
        timeout: seconds a read may stand still before it fails (TimeoutError).
        trust: the keys events and checkpoints are taken from (None: `config.log_trust()`;
            a worker passes its own, which holds its key too).
        """
        self.config = config
        self.timeout = timeout
        trust = trust if trust is not None else config.log_trust()
        kafka = config.kafka_options()
        self.topic = config.topic("events")
        self.events = EventLog(
            kafka,
            self.topic,
            read_committed=config.exactly_once,
            fetch_wait_ms=config.fetch_wait_ms,
            trust=trust,
        )
        self.store = SnapshotStore(
            kafka,
            config.topic("snapshots"),
            max_message_bytes=config.max_event_bytes,
            fetch_wait_ms=config.fetch_wait_ms,
            timeout=timeout,
            trust=trust,
            read_only=True,
        )
        self._probe = AIOKafkaConsumer(
            **kafka,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=config.fetch_wait_ms,
            max_partition_fetch_bytes=1024,
        )
        self.partitions = 0
        self._snapshots = False

    async def __aenter__(self) -> LiveLog:
        """Raises:
        NoSuchTopic: the events topic is not there."""
        await self._probe.start()
        try:
            # One metadata request for every topic this user may see (what `topics()` asks,
            # with the partitions kept: `partitions_for_topic` knows only what the client's
            # own metadata happened to hold, nothing under ACLs).
            cluster: Any = await self._probe._client.fetch_all_metadata()
            topics = cluster.topics()
            if self.topic not in topics:
                raise NoSuchTopic(
                    f"no topic {self.topic} on {self.config.bootstrap} (has a worker run with "
                    f"prefix {self.config.prefix!r}?)"
                )
            self.partitions = len(cluster.partitions_for_topic(self.topic) or ())
            self._snapshots = self.store.topic in topics
        except BaseException:
            await self._probe.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.store.stop()
        await self._probe.stop()

    def partition_of(self, cluster: str) -> int:
        return partition_for(cluster, self.partitions)

    async def end_of(self, partition: int) -> int:
        """The partition's end now (its high watermark, from one fetch)."""
        return await highwater(self._probe, self.topic, partition, self.timeout)

    async def read(self, partition: int) -> dict[str, ClusterView]:
        """Every cluster of `partition` as its log says now."""
        checkpoint = await self.store.load(partition) if self._snapshots else None
        start = checkpoint.covers + 1 if checkpoint else 0
        states = {c: s.state for c, s in checkpoint.snapshots.items()} if checkpoint else {}
        end = max(start, await self.end_of(partition))
        read = await self.events.read_range(
            partition,
            start=start,
            end=end,
            states=states,
            stall=self.timeout,
            signed=checkpoint.signed if checkpoint else False,
        )
        views = {
            c: ClusterView(found.state, partition, end, found.events, checkpoint is not None)
            for c, found in read.clusters.items()
        }
        for c, err in read.broken.items():
            if c in views:
                views[c].broken = err
        return {c: v for c, v in views.items() if v.state.registered}

    async def cluster(self, name: str) -> ClusterView | None:
        """The cluster as its log says now (None: no such cluster)."""
        return (await self.read(self.partition_of(name))).get(name)

    async def clusters(
        self, progress: Callable[[int, int], Awaitable[None] | None] | None = None
    ) -> list[ClusterView]:
        """Every registered cluster, by id (`progress(done, partitions)` after each one)."""
        found: dict[str, ClusterView] = {}
        for p in range(self.partitions):
            found.update(await self.read(p))
            if progress is not None:
                step = progress(p + 1, self.partitions)
                if step is not None:
                    await step
        return [found[c] for c in sorted(found)]

    async def history(self, name: str) -> list[Event]:
        """Every event of the cluster from its first (the whole partition is read)."""
        p = self.partition_of(name)
        end = await self.end_of(p)
        read = await self.events.read_range(p, start=0, end=end, stall=self.timeout, keep=None)
        found = read.clusters.get(name)
        return [] if found is None else found.events
