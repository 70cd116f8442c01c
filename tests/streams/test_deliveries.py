"""Commands the consumer skipped or never delivered are read from the topic and decided, in
offset order (`_deliveries`): faust-streaming 0.15 commits past jumps in what it delivers,
and the core takes a command seen after a later one of its partition for decided."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from rackplane.models import Command
from rackplane.streams._deliveries import CatchUp, Holes, RecordReader, merged
from rackplane.streams.topics import ensure_topics
from tests.conftest import BrokerUnderTest
from tests.streams.conftest import new_config
from tests.streams.test_controller import (
    Rig,
    assert_one_decision_each,
    cluster_on,
    cordon,
    register,
    rig,
)


@dataclass
class TopicReader:
    """The commands topic as written: what `RecordReader.read` would return."""

    written: dict[int, list[Any]] = field(default_factory=dict)
    reads: list[tuple[int, int, int]] = field(default_factory=list)
    peeks: list[tuple[int, int]] = field(default_factory=list)

    async def read(self, partition: int, lo: int, hi: int) -> list[Any]:
        self.reads.append((partition, lo, hi))
        return [m.message for m in self.written.get(partition, []) if lo <= m.message.offset < hi]

    async def peek(self, partition: int, lo: int) -> list[Any]:
        self.peeks.append((partition, lo))
        return [m.message for m in self.written.get(partition, []) if m.message.offset >= lo]


def with_holes() -> tuple[Rig, TopicReader, Holes]:
    r = rig()
    reader = TopicReader()
    holes = Holes()
    r.controller.holes = holes
    r.controller.reader = reader  # type: ignore[assignment]
    return r, reader, holes


def written(r: Rig, reader: TopicReader, commands: Sequence[Command]) -> list[Any]:
    messages = [r.message(c) for c in commands]
    for m in messages:
        m.message.timestamp = 0  # written long ago
        reader.written.setdefault(m.message.partition, []).append(m)
    return messages


async def test_commands_skipped_between_two_batches_are_read_and_decided_before_the_next() -> None:
    r, reader, _ = with_holes()
    c = cluster_on(0)
    commands: list[Command] = [register(c), *(cordon(c, f"r0-n{i}") for i in range(6))]
    m = written(r, reader, commands)
    await r.send(*m[:2])
    await r.send(*m[5:])  # offsets 2..4 never delivered: faust committed past them
    assert reader.reads == [(0, 2, 5)]
    assert_one_decision_each(r.log, c, commands)
    seqs = [e.causation_id for e in r.log.events(c)]
    assert seqs.index(commands[2].id) < seqs.index(commands[5].id), "in offset order"
    assert r.controller.undelivered == 3
    await r.send(*m[2:5])  # delivered late after all: recognised by position
    assert_one_decision_each(r.log, c, commands)


async def test_what_the_controller_read_itself_is_released_to_the_consumer_once_decided() -> None:
    r, reader, holes = with_holes()
    released: list[tuple[int, int, int]] = []

    async def release(partition: int, lo: int, hi: int) -> None:
        released.append((partition, lo, hi))

    r.controller.released = release
    c = cluster_on(0)
    m = written(r, reader, [register(c), *(cordon(c, f"r0-n{i}") for i in range(5))])
    await r.send(*m[:2])
    assert released == []  # all delivered: the consumer acks them itself
    await r.send(m[4])  # 2 and 3 skipped by the consumer, read and decided
    assert released == [(0, 2, 4)]
    assert await r.controller.catch_up(0) == 1  # 5, never delivered
    assert released == [(0, 2, 4), (0, 5, 6)]
    assert holes.next[0] == 6


async def test_commands_skipped_inside_a_batch_are_read_and_decided_in_their_place() -> None:
    r, reader, _ = with_holes()
    c = cluster_on(0)
    commands: list[Command] = [register(c), *(cordon(c, f"r0-n{i}") for i in range(5))]
    m = written(r, reader, commands)
    await r.send(m[0], m[1], m[4], m[5])  # 2 and 3 missing from the middle of the batch
    assert reader.reads == [(0, 2, 4)]
    assert_one_decision_each(r.log, c, commands)
    order = [e.causation_id for e in r.log.events(c)]
    assert order.index(commands[3].id) < order.index(commands[4].id)


async def test_a_first_batch_past_the_last_decided_command_reads_from_there() -> None:
    r, reader, holes = with_holes()
    c = cluster_on(1)
    commands: list[Command] = [register(c), cordon(c), cordon(c, "r1-n1"), cordon(c, "r1-n2")]
    m = written(r, reader, commands)
    await r.send(m[0])  # decided (by an earlier owner): its events say offset 0
    r.controller.forget_deliveries()  # a rebalance; the partition comes back
    r.controller.replicas.forget()
    await r.send(m[3])  # the consumer starts at offset 3: 1 and 2 were never decided
    assert reader.reads == [(1, 1, 3)]
    assert_one_decision_each(r.log, c, commands)
    assert holes.next == {1: 4}


async def test_without_a_hole_nothing_is_read() -> None:
    r, reader, _ = with_holes()
    c = cluster_on(0)
    m = written(r, reader, [register(c), cordon(c), cordon(c, "r0-n1")])
    await r.send(m[0])
    await r.send(m[1], m[2])
    await r.send(m[1])  # a redelivery (an offset before the expected one) is no hole
    r.controller.forget_deliveries()  # a restart whose consumer starts at a lagging commit
    r.controller.replicas.forget()
    await r.send(m[1], m[2])
    assert reader.reads == []


async def test_what_the_consumer_never_delivers_is_caught_up_after_the_idle_time() -> None:
    r, reader, holes = with_holes()
    c = cluster_on(0)
    commands: list[Command] = [register(c), cordon(c), cordon(c, "r0-n1")]
    m = written(r, reader, commands)
    await r.send(m[0])
    ready = True
    catch_up = CatchUp(
        holes,
        owned=lambda: set(r.fence.owned),
        ready=lambda: ready,
        read_and_decide=r.controller.catch_up,
        idle_s=3.0,
    )
    now = holes.last_delivery[0]
    await catch_up.once(now + 1.0)  # the consumer had no time yet: not looked at
    await catch_up.once(now + 2.0)
    assert reader.peeks == []
    ready = False
    await catch_up.once(now + 5.0)  # a rebalance in progress: never
    assert reader.peeks == []
    ready = True
    await catch_up.once(now + 6.0)  # ready again: the consumer gets its idle time first
    assert reader.peeks == []
    await catch_up.once(now + 9.5)
    # partition 0: offsets 1-2, then nothing more; partition 1 holds nothing
    assert reader.peeks == [(0, 1), (0, 3), (1, 0)]
    assert_one_decision_each(r.log, c, commands)
    assert catch_up.caught_up == 2 and r.controller.undelivered == 2
    await catch_up.once(now + 10.0)  # looked at just now: not again before idle_s
    assert len(reader.peeks) == 3
    await catch_up.once(now + 13.0)
    assert reader.peeks[3:] == [(0, 3), (1, 0)]
    await r.send(m[1], m[2])  # the consumer delivers them after all: decided once
    assert_one_decision_each(r.log, c, commands)


async def test_a_catch_up_leaves_records_younger_than_the_idle_time_to_the_consumer() -> None:
    r, reader, holes = with_holes()
    c = cluster_on(0)
    m = written(r, reader, [register(c), cordon(c), cordon(c, "r0-n1")])
    m[2].message.timestamp = int(time.time() * 1000)  # written just now
    await r.send(m[0])
    assert await r.controller.catch_up(0) == 1  # offset 1 only
    assert holes.next[0] == 2
    assert await r.controller.catch_up(0, older_than=0.0) == 1
    r.fence.revoke({0})
    assert await r.controller.catch_up(0) == 0  # no longer ours: nothing read
    assert len(reader.peeks) == 2


def test_holes_before_a_batch_and_inside_it_are_found_and_filled_in_place() -> None:
    a = [_rec(0, 5), _rec(1, 9), _rec(0, 6), _rec(0, 9), _rec(1, 10)]
    holes = Holes()
    assert holes.missing(a, {0: 3, 1: 9}) == [(0, 3, 5), (0, 7, 9)]
    assert holes.missing(a, {1: 8}) == [(1, 8, 9)]  # partition 0's expected offset unknown
    assert holes.missing(a, {0: 6, 1: 11}) == [(0, 7, 9)]  # 5 and 6, 9 and 10: redelivered
    found = {(0, 5): [_rec(0, 3), _rec(0, 4)], (0, 9): [_rec(0, 7), _rec(0, 8)]}
    assert [(x.partition, x.offset) for x in merged(a, found)] == [
        (0, 3), (0, 4), (0, 5), (1, 9), (0, 6), (0, 7), (0, 8), (0, 9), (1, 10)
    ]  # fmt: skip
    holes.decided(a, now=0.0)
    assert holes.next == {0: 10, 1: 11}
    holes.forget()
    assert holes.next == {}


def _rec(partition: int, offset: int) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(partition=partition, offset=offset)


@pytest.mark.broker
async def test_the_command_reader_reads_a_range_of_a_real_partition(
    broker: BrokerUnderTest,
) -> None:
    config = new_config(broker, partitions=1)
    await ensure_topics(config)
    topic = config.topic("commands")
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await producer.start()
    try:
        batch = producer.create_batch()  # one multi-record batch, then single records
        for i in range(3):
            batch.append(key=b"k", value=f"{i}".encode(), timestamp=None)
        batch.close()
        await (await producer.send_batch(batch, topic, partition=0))
        for i in range(3, 6):
            await producer.send_and_wait(topic, key=b"k", value=f"{i}".encode(), partition=0)
    finally:
        await producer.stop()
    reader = RecordReader(config.kafka_options(), topic, fetch_wait_ms=20, stall=30.0)
    try:
        assert [r.value for r in await reader.read(0, 2, 5)] == [b"2", b"3", b"4"]
        assert [r.offset for r in await reader.read(0, 0, 6)] == list(range(6))
        assert await reader.read(0, 4, 4) == []
        assert [r.offset for r in await reader.peek(0, 4)] == [4, 5]
        assert await reader.peek(0, 6, wait_ms=100) == []  # the end: nothing there yet
        peeked = await reader.peek_many({0: 3}, wait_ms=100)
        assert {p: [r.offset for r in rs] for p, rs in peeked.items()} == {0: [3, 4, 5]}
        assert await reader.peek_many({0: 6}, wait_ms=100) == {}
    finally:
        await reader.stop()


async def test_a_catch_up_with_the_broker_away_tries_again_later() -> None:
    r, reader, _ = with_holes()
    c = cluster_on(0)
    m = written(r, reader, [register(c), cordon(c)])
    await r.send(m[0])

    async def away(partition: int, lo: int) -> list[Any]:
        raise KafkaConnectionError("broker went away")

    reader.peek = away  # type: ignore[method-assign]
    assert await r.controller.catch_up(0) == 0  # no exception: the loop goes on
    del reader.peek
    assert await r.controller.catch_up(0) == 1


def test_metrics_count_the_commands_the_controller_read_back() -> None:
    from types import SimpleNamespace as NS

    from rackplane.streams.projection_agent import Metrics

    m = Metrics()
    controller = NS(applied=12, undelivered=3, checkpoints=1, failing_since=None, forged=2)
    followers = [NS(name="tas", read_back=0, forged=0), NS(name="projections", read_back=0,
                                                            forged=1)]  # fmt: skip
    m.watch(controller, followers)
    text = m.render().decode()
    assert "rackplane_controller_decisions_total 12.0" in text
    assert "rackplane_controller_commands_read_back_total 3.0" in text
    assert "rackplane_controller_checkpoints_total 1.0" in text
    assert "rackplane_controller_appends_failing_seconds 0.0" in text
    assert 'rackplane_follower_events_read_back_total{agent="tas"} 0.0' in text
    assert 'rackplane_events_forged_total{reader="controller"} 2.0' in text
    assert 'rackplane_events_forged_total{reader="projections"} 1.0' in text
    controller.undelivered = 5
    followers[1].read_back = 7
    controller.failing_since = time.monotonic() - 10.0
    text = m.render().decode()
    assert "rackplane_controller_commands_read_back_total 5.0" in text  # read at each scrape
    assert 'rackplane_follower_events_read_back_total{agent="projections"} 7.0' in text
    failing = next(
        line for line in text.splitlines() if line.startswith("rackplane_controller_appends_fail")
    )
    assert 9.0 <= float(failing.split()[-1]) < 60.0


@dataclass
class SlowReader(TopicReader):
    """A peek that waits (a fetch with nothing there waits up to half a second) until let go."""

    go: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: asyncio.Event = field(default_factory=asyncio.Event)

    async def peek(self, partition: int, lo: int) -> list[Any]:
        self.waiting.set()
        await self.go.wait()
        return await super().peek(partition, lo)


async def test_commands_are_decided_while_the_controller_looks_at_an_idle_partition() -> None:
    """The look's fetch used to be made under the controller's lock: every command of the
    worker waited for it (in `rackplane up`, ~0.5 s of every 3 s per idle partition)."""
    r = rig()
    reader = SlowReader()
    r.controller.holes = Holes()
    r.controller.reader = reader  # type: ignore[assignment]
    c, idle = cluster_on(0), cluster_on(1)
    m = written(r, reader, [register(c), register(idle)])
    await r.send(m[0], m[1])
    looking = asyncio.create_task(r.controller.catch_up(1))
    await reader.waiting.wait()
    command = cordon(c, "r0-n1")
    try:
        await asyncio.wait_for(r.send(r.message(command)), timeout=2.0)
    finally:
        reader.go.set()
    assert await looking == 0
    assert_one_decision_each(r.log, c, [command])


async def test_what_the_consumer_delivers_during_a_look_is_not_decided_twice() -> None:
    r = rig()
    reader = SlowReader()
    r.controller.holes = Holes()
    r.controller.reader = reader  # type: ignore[assignment]
    c = cluster_on(0)
    commands: list[Command] = [register(c), cordon(c, "r0-n1"), cordon(c, "r0-n2")]
    m = written(r, reader, commands)
    await r.send(m[0])
    looking = asyncio.create_task(r.controller.catch_up(0))
    await reader.waiting.wait()  # it looks from offset 1 ...
    try:
        await asyncio.wait_for(r.send(*m[1:]), timeout=2.0)  # ... while 1 and 2 are delivered
    finally:
        reader.go.set()
    assert await looking == 0
    assert_one_decision_each(r.log, c, commands)
