"""What a worker's cluster views answer: live where it holds the cluster, else from the log.

Theory of operation (issue 20: any worker answers for every cluster, through joins and
restarts):
1. Live. A cluster of an events partition this worker holds, once its projections loaded
   the partition (`Projections.live`), is answered from the replica the worker folds as
   events arrive.
2. From the log. Every other cluster (held by another worker; or this worker's own during a
   rebalance, between revocation and assignment, or before its load) is read from the log
   read-only, as the read commands read it (`live.LiveLog`: the newest checkpoint plus the
   tail), on a connection of the worker's own, opened at the first such request. A
   partition's read is kept `ttl` seconds (2), so a dashboard polling many views costs one
   read per partition per 2 s, not one per request, and requests arriving together share the
   read in flight; a read is let go once it is too old to answer.
3. Marked. Every answer says where it came from: the rows of `/clusters/` and the answer of
   `/clusters/{c}/` carry `held` (this worker holds the cluster's partition now) and
   `source` (`live`, or `log` with `read_at`, the read's wall-clock time, and `broken` when
   the log is forked or has a gap); the list views (`racks/`, `jobs/`) say it in the headers
   `X-Rackplane-Source`, `X-Rackplane-Held` and `X-Rackplane-Read-At`.
4. A read that fails (broker unreachable, no topic) answers 503 for that cluster; `/clusters/`
   lists what it could read and names the partitions it could not in
   `X-Rackplane-Unread-Partitions` (after one failure it tries no further partition, so a
   dead broker costs one timeout, not one per partition).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from aiokafka.errors import KafkaError

from rackplane.projections import ClusterState, cluster_summary
from rackplane.streams.eventlog import partition_for
from rackplane.streams.live import ClusterView, NoSuchTopic
from rackplane.streams.projection_agent import Projections

log = logging.getLogger("rackplane.views")

LOG_READ_TTL_S = 2.0
"""Seconds a partition read from the log answers the views before it is read again."""

READ_ERRORS = (KafkaError, OSError, TimeoutError, NoSuchTopic)
"""What a read from the log may fail with: answered 503, never a traceback."""


class LogReader(Protocol):
    """What the views need of `live.LiveLog` (opened with `async with`)."""

    async def __aenter__(self) -> LogReader: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def read(self, partition: int) -> dict[str, ClusterView]: ...


@dataclass(frozen=True)
class PartitionRead:
    """One partition's clusters as the log said at `read_at` (Unix time)."""

    clusters: dict[str, ClusterView]
    read_at: float
    at: float
    """When it was read, on the monotonic clock (its age)."""


class LogReads:
    """Partitions read from the log for the views, each kept `ttl` seconds."""

    def __init__(
        self,
        open_log: Callable[[], LogReader],
        *,
        ttl: float = LOG_READ_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """Args:
        open_log: a new reader of the log (`LiveLog(config, ...)`), opened at first use.
        ttl: seconds a read is kept.
        clock, wall: the monotonic clock (ages) and the wall clock (`read_at`).
        """
        self.open_log = open_log
        self.ttl = ttl
        self.clock = clock
        self.wall = wall
        self.reads = 0
        """Partition reads done (the cache's misses)."""
        self._reader: LogReader | None = None
        self._opening = asyncio.Lock()
        self._kept: dict[int, PartitionRead] = {}
        self._reading: dict[int, asyncio.Future[PartitionRead]] = {}

    @property
    def kept(self) -> set[int]:
        """The partitions whose last read is still kept."""
        return set(self._kept)

    async def partition(self, partition: int) -> PartitionRead:
        """The partition's clusters, read now unless a read younger than `ttl` is kept.

        Raises:
            KafkaError, OSError, TimeoutError, NoSuchTopic: the log could not be read.
        """
        kept = self._kept.get(partition)
        if kept is not None and self.clock() - kept.at < self.ttl:
            return kept
        pending = self._reading.get(partition)
        if pending is None:
            pending = asyncio.ensure_future(self._read(partition))
            self._reading[partition] = pending
            pending.add_done_callback(lambda done: self._done(partition, done))
        # One request that goes away (its client hung up) does not cancel the others' read.
        return await asyncio.shield(pending)

    def _done(self, partition: int, done: asyncio.Future[PartitionRead]) -> None:
        self._reading.pop(partition, None)
        if not done.cancelled() and done.exception() is not None:
            log.info("reading events partition %d for the views failed: %s", partition, done)

    async def _read(self, partition: int) -> PartitionRead:
        reader = await self._open()
        clusters = await reader.read(partition)
        self.reads += 1
        read = PartitionRead(clusters, read_at=self.wall(), at=self.clock())
        self._kept[partition] = read
        # Let it go once it is too old to answer: a large cluster's state is not kept for
        # a dashboard that stopped asking.
        asyncio.get_running_loop().call_later(self.ttl, self._expire, partition, read)
        return read

    def _expire(self, partition: int, read: PartitionRead) -> None:
        if self._kept.get(partition) is read:
            del self._kept[partition]

    async def _open(self) -> LogReader:
        async with self._opening:
            if self._reader is None:
                reader = self.open_log()
                await reader.__aenter__()  # a failure leaves none: the next request retries
                self._reader = reader
            return self._reader

    async def stop(self) -> None:
        """Close the reader (the worker stops)."""
        for pending in list(self._reading.values()):
            pending.cancel()
        if self._reader is not None:
            reader, self._reader = self._reader, None
            await reader.__aexit__(None, None, None)


@dataclass(frozen=True)
class Answer:
    """A cluster as a view answers it, and where that came from."""

    state: ClusterState
    held: bool
    read_at: float | None = None
    """None: live from this worker's replica; else when it was read from the log."""
    broken: str | None = None

    @property
    def source(self) -> str:
        return "live" if self.read_at is None else "log"

    def marks(self) -> dict[str, Any]:
        """Where the answer came from, as fields of a JSON object."""
        out: dict[str, Any] = {"held": self.held, "source": self.source}
        if self.read_at is not None:
            out["read_at"] = datetime.fromtimestamp(self.read_at, UTC).isoformat()
            out["broken"] = self.broken
        return out

    def headers(self) -> dict[str, str]:
        """Where the answer came from, as the headers of a list view."""
        out = {"X-Rackplane-Source": self.source, "X-Rackplane-Held": str(self.held).lower()}
        if self.read_at is not None:
            out["X-Rackplane-Read-At"] = datetime.fromtimestamp(self.read_at, UTC).isoformat()
        return out

    def summary(self) -> dict[str, Any]:
        """The cluster's totals (`cluster_summary`) with the marks."""
        return {**cluster_summary(self.state).model_dump(), **self.marks()}


class Unread(Exception):
    """The log could not be read for a view (answered 503)."""


class ClusterViews:
    """The answers of `/clusters/` and the per-cluster views of one worker."""

    def __init__(self, projections: Projections, reads: LogReads) -> None:
        self.projections = projections
        self.reads = reads
        self.partitions = projections.replicas.partitions

    async def clusters(self) -> tuple[list[Answer], list[int]]:
        """Every registered cluster in the log, by id, and the partitions that could not be
        read (see 4. above)."""
        found: list[Answer] = []
        unread: list[int] = []
        for p in range(self.partitions):
            if self.projections.live(p):
                found.extend(Answer(s, held=True) for s in self.projections.states_of(p))
                continue
            if unread:
                unread.append(p)
                continue
            try:
                read = await self.reads.partition(p)
            except READ_ERRORS:
                unread.append(p)
                continue
            found.extend(self._from_log(read, c, p) for c in read.clusters)
        return sorted(found, key=lambda a: a.state.cluster), unread

    async def cluster(self, cluster: str) -> Answer | None:
        """The cluster (None: not in the log).

        Raises:
            Unread: it is not live here and the log could not be read.
        """
        p = partition_for(cluster, self.partitions)
        if self.projections.live(p):
            state = self.projections.replicas.states.get(cluster)
            return Answer(state, held=True) if state is not None and state.registered else None
        try:
            read = await self.reads.partition(p)
        except READ_ERRORS as err:
            raise Unread(f"could not read cluster {cluster!r} from the log: {err}") from None
        return self._from_log(read, cluster, p) if cluster in read.clusters else None

    def _from_log(self, read: PartitionRead, cluster: str, partition: int) -> Answer:
        view = read.clusters[cluster]
        return Answer(
            view.state,
            held=self.projections.holds(partition),
            read_at=read.read_at,
            broken=str(view.broken) if view.broken is not None else None,
        )
