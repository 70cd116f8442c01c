"""Every record of the events topic reaches each agent that follows it, in offset order,
whatever Faust's consumer does.

Why: the agents that follow the events topic through Faust (the policies, the GPU Manager's
events side, the projections) fold what they are delivered into a replica and pass over an
event that does not follow the replica's seq (`Replicas.advance`: the rebuild from the log is
the judge). faust-streaming 0.15's consumer skips records (see `_deliveries`), so one skipped
event left a replica behind for good: seen in `make test`, the GPU Manager never learnt of a
`NodeRepaired`, kept its verdict of the node's sticky XID 79 and never reported the node's
next trouble; a policy would stop proposing for the cluster, and the projections would refuse
each later event of it as out of sequence.

So each such agent is fed through a `Follower`, which does for the events topic what the
controller does for the commands topic:
1. It keeps the offset it expects next on each events partition: after an assignment, where
   its replica's read of the partition ended (everything before is in the replica; a
   partition not read yet needs no check, its read from the log will cover the batch); after
   each batch, the batch's last offset + 1.
2. A batch that starts past that offset, or skips offsets inside, has a hole: the records in
   between are read from the topic (`RecordReader`) and handed to the agent in their place.
3. `FollowerCatchUp` looks at the worker's events partitions that reached a follower nothing
   for `IDLE_S` (one fetch for all of them): records older than that were not delivered and
   are handed to the followers behind them. A partition with nothing delivered since the
   assignment is looked at from the group's committed offset, where Faust would have started.
4. What a follower read itself is marked done in Faust's consumer once handed over (a gap in
   its bookkeeping), so the group's commit moves past it.
A record handed over twice (Faust delivers one after it was read) is a redelivery, passed over
by seq as any is.
5. With a `LogTrust` (a worker with a key), an event not signed by a trusted key is not handed
   over (`forged`), as a rebuild skips it: the controller's own event of that seq is the one
   the agent folds. Its offset still counts as delivered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from aiokafka.errors import KafkaError
from pydantic import ValidationError

from rackplane.logtrust import Judge, LogTrust
from rackplane.streams._deliveries import (
    IDLE_S,
    Holes,
    IdleWatch,
    RecordReader,
    filled,
    message_of,
    old_enough,
)
from rackplane.streams.codec import decode_event

log = logging.getLogger("rackplane.agents")

Handle = Callable[[Sequence[Any]], Awaitable[None]]
Release = Callable[[int, int, int], Awaitable[None]]


class Loaded(Protocol):
    """What a follower asks of its agent's replicas (`Replicas`)."""

    ends: dict[int, int]
    signed: dict[int, bool]

    def loaded(self, partition: int) -> bool: ...


class Follower:
    """Feeds one agent of the events topic every record of its partitions, in offset order
    (see the module docstring)."""

    def __init__(
        self,
        name: str,
        handle: Handle,
        replicas: Loaded,
        reader: RecordReader,
        *,
        released: Release | None = None,
        retry_max: float = 5.0,
        trust: LogTrust | None = None,
    ) -> None:
        """Args:
        name: the agent's name (in logs).
        handle: the agent's batch handler.
        replicas: the agent's replicas (where their reads of each partition ended).
        reader: reads the events topic by offset (shared by the worker's followers).
        released: told (partition, lo, hi) once records [lo, hi) this follower read itself
            were handed over (`app._release`).
        retry_max: the longest wait between two tries of a read the broker refused.
        trust: the keys an event must be signed by to be handed over (None: all are).
        """
        self.name = name
        self.handle = handle
        self.replicas = replicas
        self.reader = reader
        self.released = released
        self.retry_max = retry_max
        self.trust = trust
        self.judge: Judge[int] = Judge(trust, lambda p: replicas.signed.get(p, False))
        self.holes = Holes()
        self.read_back = 0
        """Records read from the topic because the consumer did not deliver them."""
        self._lock = asyncio.Lock()

    async def process(self, batch: Sequence[Any]) -> None:
        """Hand `batch` to the agent, with whatever the consumer skipped before and inside it."""
        async with self._lock:
            expected: dict[int, int] = {}
            for item in batch:
                p = message_of(item).partition
                if p not in expected:
                    got = self.expected(p)
                    if got is not None:
                        expected[p] = got
            await self._hand_over(batch, expected, read=[])

    def expected(self, partition: int) -> int | None:
        """The offset of `partition` expected next (None: its replica is not read yet)."""
        got = self.holes.next.get(partition)
        if got is not None:
            return got
        if self.replicas.loaded(partition):
            return self.replicas.ends[partition]
        return None

    async def catch_up(self, partition: int, records: Sequence[Any], *, start: int) -> int:
        """Hand over what `records` (read from the topic, in offset order) hold from the
        offset this follower expects on `partition` on (`start` where it expects nothing:
        the group's committed offset); return how many records that was."""
        async with self._lock:
            lo = self.start(partition, start)
            mine = [r for r in records if r.offset >= lo]
            if not mine:
                return 0
            log.warning(
                "events[%d] offsets %d..%d were not delivered to %s by the consumer: read "
                "from the topic and handed over",
                partition,
                mine[0].offset,
                mine[-1].offset,
                self.name,
            )
            self.read_back += len(mine)
            await self._hand_over(
                mine, {partition: lo}, read=[(partition, lo, mine[-1].offset + 1)]
            )
            return len(mine)

    def start(self, partition: int, committed: int) -> int:
        """Where a look at `partition` starts for this follower: the offset it expects, or the
        group's `committed` offset where it expects none (nothing delivered since the
        assignment and its replica not read)."""
        got = self.expected(partition)
        return committed if got is None else got

    def forget(self) -> None:
        """A rebalance: the replicas are read again, and expectations start from there."""
        self.holes.forget()
        self.judge.forget()

    async def _hand_over(
        self, batch: Sequence[Any], expected: dict[int, int], *, read: list[tuple[int, int, int]]
    ) -> None:
        whole, ranges = await filled(
            batch, self.holes, expected, self._read, topic="events", whose=f"handed to {self.name}"
        )
        self.read_back += len(whole) - len(batch)
        await self.handle(self._trusted(whole) if self.trust is not None else whole)
        self.holes.decided(whole, now=time.monotonic())
        if self.released is not None:
            for partition, lo, hi in [*read, *ranges]:
                await self.released(partition, lo, hi)

    def _trusted(self, batch: Sequence[Any]) -> list[Any]:
        """`batch` without the events a rebuild would skip as forged. What is not an event
        (markers, garbage) stays: the agent deals with it as before."""
        out = []
        for item in batch:
            message = message_of(item)
            try:
                event = decode_event(message.value) if message.value else None
            except (ValidationError, ValueError):
                event = None
            if event is None:
                out.append(item)
                continue
            p = message.partition
            why = self.judge.refuses(p, event)
            if why is None:
                out.append(item)
                continue
            log.warning(
                "events[%d]@%d: %s %s@%d not handed to %s, not written by the controller: %s",
                p, message.offset, event.type, event.cluster, event.seq, self.name, why,
            )  # fmt: skip
        return out

    @property
    def forged(self) -> int:
        """Events not handed over: not signed by a trusted key."""
        return self.judge.forged

    async def _read(self, partition: int, lo: int, hi: int) -> list[Any]:
        """The records [lo, hi), trying again while the broker refuses (nothing the agent
        does is worth more than what it would skip)."""
        delay, failing = 0.1, False
        while True:
            try:
                return await self.reader.read(partition, lo, hi)
            except (KafkaError, OSError, TimeoutError) as err:
                if not failing:
                    log.warning(
                        "reading events[%d] %d..%d for %s failed (%s: %s); retrying",
                        partition,
                        lo,
                        hi,
                        self.name,
                        type(err).__name__,
                        err,
                    )
                    failing = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max)


class FollowerCatchUp(IdleWatch):
    """Looks at the worker's events partitions for the followers that nothing reached for
    `idle_s` (see the module docstring, 3): a loop of the worker, from start to stop."""

    loop_name = "follower_catch_up"

    def __init__(
        self,
        followers: Sequence[Follower],
        reader: RecordReader,
        assigned: Callable[[], set[int]],
        ready: Callable[[], bool],
        committed: Callable[[int], int],
        *,
        idle_s: float = IDLE_S,
        every: float = 1.0,
        wait_ms: int = 200,
    ) -> None:
        """Args:
        followers: the worker's followers of the events topic (read at each look: the
            worker adds its agents' after this loop is built).
        reader: reads the events topic by offset.
        assigned: the events partitions this worker's consumer has now.
        ready: whether the worker has its partitions (no rebalance in progress).
        committed: the group's committed offset of an events partition (0: none).
        wait_ms: how long one look waits for records.
        """
        super().__init__(ready, idle_s=idle_s, every=every)
        self.followers = followers
        self.reader = reader
        self.assigned = assigned
        self.committed = committed
        self.wait_ms = wait_ms
        self.looked: dict[tuple[str, int], float] = {}

    async def _look(self, now: float, ready_since: float) -> None:
        """Look at each assigned partition for the followers it reached nothing for `idle_s`
        (once per `idle_s` each): what the topic holds from where they expect is handed over
        (`caught_up` counts each follower's)."""
        due: dict[int, list[Follower]] = {}
        for partition in sorted(self.assigned()):
            for f in self.followers:
                key = (f.name, partition)
                quiet_since = max(
                    f.holes.last_delivery.get(partition, ready_since),
                    ready_since,
                    self.looked.get(key, ready_since),
                )
                if now - quiet_since >= self.idle_s:
                    self.looked[key] = now
                    due.setdefault(partition, []).append(f)
        starts = {p: min(f.start(p, self.committed(p)) for f in fs) for p, fs in due.items()}
        for _ in range(100):  # a long tail: go on while there is more, within reason
            if not starts:
                return
            try:
                peeked = await self.reader.peek_many(starts, wait_ms=self.wait_ms)
            except (KafkaError, OSError, TimeoutError) as err:  # the broker away: next time
                log.info("looking at the events topic failed (%s: %s)", type(err).__name__, err)
                return
            before = time.time() - self.idle_s
            more: dict[int, int] = {}
            for partition, records in sorted(peeked.items()):
                old = old_enough(records, before)
                if not old or partition not in self.assigned():
                    continue
                for f in due[partition]:
                    self.caught_up += await f.catch_up(
                        partition, old, start=self.committed(partition)
                    )
                if len(old) == len(records):
                    more[partition] = old[-1].offset + 1
            starts = more
