"""Agents that follow the events topic get every record, in offset order, whatever the consumer
skips (`_following`): a replica that missed one event stays behind for good.

The events log is written by the controller of `test_controller`'s rig (in memory, offsets
are list positions); the topic reader below reads it back as the broker would.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from aiokafka.errors import KafkaConnectionError

from rackplane.keyfiles import KeyFile
from rackplane.logtrust import LogTrust
from rackplane.models import (
    COMMANDS,
    TELEMETRY,
    Command,
    GpuSample,
    Health,
    NodeTelemetry,
    RepairNode,
    ReportNodeHealth,
)
from rackplane.policies.gpu_health import GpuHealthRules
from rackplane.streams._following import Follower, FollowerCatchUp
from rackplane.streams.agents import GpuManager, Said
from rackplane.streams.codec import decode_event, encode_event
from rackplane.streams.replicas import Replicas
from tests.streams.test_controller import (
    PARTITIONS,
    MemoryLog,
    Rejected,
    Rig,
    cluster_on,
    cordon,
    register,
    rig,
)

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


@dataclass
class EventsTopic:
    """The rig's events log as the topic reader (`RecordReader`) returns it."""

    log: MemoryLog
    reads: list[tuple[int, int, int]] = field(default_factory=list)
    peeks: list[dict[int, int]] = field(default_factory=list)
    stamp: int = 0
    """Record timestamps (ms): 0, long ago."""

    def records(self, partition: int) -> list[Any]:
        return [
            SimpleNamespace(
                key=k, value=v, partition=partition, offset=i, headers=[], timestamp=self.stamp
            )
            for i, (k, v) in enumerate(self.log.records[partition])
        ]

    async def read(self, partition: int, lo: int, hi: int) -> list[Any]:
        self.reads.append((partition, lo, hi))
        return [r for r in self.records(partition) if lo <= r.offset < hi]

    async def peek_many(self, starts: dict[int, int], *, wait_ms: int = 0) -> dict[int, list[Any]]:
        self.peeks.append(dict(starts))
        out = {p: [r for r in self.records(p) if r.offset >= lo] for p, lo in starts.items()}
        return {p: rs for p, rs in out.items() if rs}


@dataclass
class Sent:
    """A commands sender that keeps what it was given."""

    commands: list[Command] = field(default_factory=list)

    async def send(self, *, key: Any = None, value: Any = None) -> Any:
        self.commands.append(COMMANDS.validate_json(value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


@dataclass
class Handed:
    """An agent that records the offsets of what it is handed, per batch."""

    replicas: Replicas
    batches: list[list[tuple[int, int]]] = field(default_factory=list)

    async def handle(self, batch: Any) -> None:
        self.batches.append(
            [(m.partition, m.offset) for m in (getattr(b, "message", b) for b in batch)]
        )

    def offsets(self) -> list[int]:
        return [o for b in self.batches for _, o in b]


def report(cluster: str, node: str, health: Health, n: int) -> ReportNodeHealth:
    return ReportNodeHealth(
        id=f"report-{cluster}-{n}", cluster=cluster, actor="gpu_manager", node=node,
        health=health, cause="test",
    )  # fmt: skip


def repair(cluster: str, node: str) -> RepairNode:
    return RepairNode(id=f"repair-{cluster}-{node}", cluster=cluster, actor="op", node=node)


async def decided(r: Rig, *commands: Command) -> None:
    await r.send(*(r.message(c) for c in commands))


def sample(cluster: str, node: str, seconds: int, **gpu1: Any) -> Any:
    base = {"temperature_c": 60.0, "ecc_uncorrected": 0, "nvlink_down": 0}
    gpus = tuple(GpuSample(index=i, **(base | gpu1 if i == 1 else base)) for i in range(4))
    value = NodeTelemetry(cluster=cluster, node=node, at=T0 + timedelta(seconds=seconds), gpus=gpus)
    return SimpleNamespace(
        key=node.encode(), value=TELEMETRY.dump_json(value), partition=0, offset=seconds, headers=[]
    )


def manager_of(log: MemoryLog) -> tuple[GpuManager, Sent]:
    sent = Sent()
    manager = GpuManager(
        GpuHealthRules(),
        Replicas(log, partitions=PARTITIONS),  # type: ignore[arg-type]
        sent,
        Rejected(),
        topic="t.telemetry",
        limit=1_048_576,
    )
    return manager, sent


async def test_a_repair_the_consumer_skipped_still_reaches_the_gpu_manager() -> None:
    """The failure seen in `make test`: the manager never learnt of the repair, so it kept the
    node's sticky XID 79 as the failure it already reported and said nothing more."""
    r = rig()
    c, n = cluster_on(0), "r0-n0"
    await decided(r, register(c), report(c, n, Health.FAILED, 1))
    topic = EventsTopic(r.log)
    followed, sent = manager_of(r.log)
    unfollowed, unsent = manager_of(r.log)
    for m in (followed, unfollowed):
        m.reported[(c, n)] = Said(Health.FAILED, 1, ())  # it reported the failure itself
        await m.on_telemetry([sample(c, n, 0, xid=79)])  # its first sample reads the partition
    loaded = len(r.log.records[0])
    await decided(r, repair(c, n), cordon(c, "r0-n2"))
    follower = Follower("gpu_manager_events", followed.on_events, followed.replicas, topic)  # type: ignore[arg-type]
    cordoned = topic.records(0)[loaded + 1 :]  # the consumer skipped the repair
    await follower.process(cordoned)
    await unfollowed.on_events(cordoned)
    assert topic.reads == [(0, loaded, loaded + 1)]
    assert follower.read_back == 1
    last = decode_event(r.log.records[0][-1][1]).seq
    assert followed.replicas.states[c].seq == last
    assert unfollowed.replicas.states[c].seq < last  # what the bug left: behind for good
    hot = [sample(c, n, s, xid=79, temperature_c=95.0) for s in (10, 20)]  # hot for a while
    await followed.on_telemetry(hot)
    await unfollowed.on_telemetry(hot)
    assert [(x.type, x.health) for x in sent.commands] == [("ReportNodeHealth", Health.DEGRADED)]  # type: ignore[union-attr]
    assert unsent.commands == []


async def test_holes_before_and_inside_a_batch_are_read_and_handed_over_in_their_place() -> None:
    r = rig()
    c = cluster_on(0)
    await decided(r, register(c), *(cordon(c, f"r0-n{i}") for i in range(6)))
    topic = EventsTopic(r.log)
    records = topic.records(0)
    agent = Handed(Replicas(r.log, partitions=PARTITIONS))  # type: ignore[arg-type]
    released: list[tuple[int, int, int]] = []

    async def release(partition: int, lo: int, hi: int) -> None:
        released.append((partition, lo, hi))

    f = Follower("policy", agent.handle, agent.replicas, topic, released=release)  # type: ignore[arg-type]
    await f.process(records[:2])  # partition not read yet: nothing to check
    assert topic.reads == [] and f.holes.next == {0: 2}
    await f.process([records[4], records[6]])  # 2, 3 and 5 skipped
    assert topic.reads == [(0, 2, 4), (0, 5, 6)]
    assert agent.offsets() == list(range(7))
    assert released == [(0, 2, 4), (0, 5, 6)]
    await f.process(records[3:5])  # a redelivery is no hole
    assert len(topic.reads) == 2 and f.read_back == 3


async def test_after_an_assignment_a_follower_expects_where_its_replica_read_the_log_to() -> None:
    r = rig()
    c = cluster_on(1)
    await decided(r, register(c), cordon(c, "r1-n0"))
    topic = EventsTopic(r.log)
    agent = Handed(Replicas(r.log, partitions=PARTITIONS))  # type: ignore[arg-type]
    f = Follower("projections", agent.handle, agent.replicas, topic)  # type: ignore[arg-type]
    await agent.replicas.load(1)
    ends = agent.replicas.ends[1]
    await decided(r, cordon(c, "r1-n1"), cordon(c, "r1-n2"))
    await f.process(topic.records(1)[ends + 1 :])
    assert topic.reads == [(1, ends, ends + 1)]
    f.forget()  # a rebalance: the replica is read again
    agent.replicas.forget()
    await f.process(topic.records(1)[ends + 1 :])
    assert len(topic.reads) == 1


async def test_a_read_the_broker_refuses_is_tried_again() -> None:
    r = rig()
    c = cluster_on(0)
    await decided(r, register(c), cordon(c), cordon(c, "r0-n2"))
    topic = EventsTopic(r.log)
    agent = Handed(Replicas(r.log, partitions=PARTITIONS))  # type: ignore[arg-type]
    f = Follower("tas", agent.handle, agent.replicas, topic, retry_max=0.01)  # type: ignore[arg-type]
    refusals = iter([KafkaConnectionError("away"), KafkaConnectionError("away")])
    read = topic.read

    async def flaky(partition: int, lo: int, hi: int) -> list[Any]:
        err = next(refusals, None)
        if err is not None:
            raise err
        return await read(partition, lo, hi)

    topic.read = flaky  # type: ignore[method-assign]
    records = topic.records(0)
    await f.process(records[:1])
    await f.process(records[2:])
    assert agent.offsets() == list(range(len(records)))


async def test_what_the_consumer_never_delivers_is_handed_over_after_the_idle_time() -> None:
    r = rig()
    a, b = cluster_on(0), cluster_on(1)
    await decided(r, register(a), register(b), cordon(a, "r0-n0"))
    topic = EventsTopic(r.log)
    spare, tas = (Handed(Replicas(r.log, partitions=PARTITIONS)) for _ in range(2))  # type: ignore[arg-type]
    followers = [
        Follower(n, x.handle, x.replicas, topic) for n, x in (("spare", spare), ("tas", tas))
    ]  # type: ignore[arg-type]
    ready, committed = True, {0: 1, 1: 0}
    loop = FollowerCatchUp(
        followers, topic, assigned=lambda: {0, 1}, ready=lambda: ready,  # type: ignore[arg-type]
        committed=lambda p: committed[p], idle_s=3.0,
    )  # fmt: skip
    p0 = topic.records(0)
    await followers[0].process(p0[:1])  # spare got offset 0 of partition 0; tas got nothing
    now = followers[0].holes.last_delivery[0]
    await loop.once(now + 1.0)
    assert topic.peeks == []  # the consumer had no time yet
    ready = False
    await loop.once(now + 5.0)
    assert topic.peeks == []  # a rebalance in progress: never
    ready = True
    await loop.once(now + 6.0)
    assert topic.peeks == []  # ready again: the consumer gets its idle time first
    await loop.once(now + 9.5)
    # partition 0 from offset 1 (spare's next, tas's committed), partition 1 from 0 (committed)
    assert topic.peeks[0] == {0: 1, 1: 0}
    assert spare.offsets() == [o.offset for o in p0] + [o.offset for o in topic.records(1)]
    assert sorted(tas.offsets()) == sorted(spare.offsets()[1:])
    assert loop.caught_up == len(p0) - 1 + 2 * len(topic.records(1)) + len(p0) - 1
    await loop.once(now + 10.0)  # looked at just now: not again before idle_s
    peeks, handed = len(topic.peeks), len(spare.offsets())
    topic.stamp = 2**62  # the topic's records look young now: left to the consumer
    await decided(r, cordon(a, "r0-n1"))
    await loop.once(now + 13.0)
    assert len(topic.peeks) == peeks + 1
    assert len(spare.offsets()) == handed  # the young record was not handed over


async def test_a_forged_event_is_not_handed_over_but_its_offset_counts_as_delivered() -> None:
    key = KeyFile.new("worker:w1")
    r = rig(key=key)
    c = cluster_on(0)
    await decided(r, register(c))
    forged = decode_event(r.log.records[0][-1][1]).model_copy(update={"signature": None})
    r.log.records[0].append((c.encode(), encode_event(forged)))
    await decided(r, cordon(c, "r0-n3"))
    topic = EventsTopic(r.log)
    agent = Handed(Replicas(r.log, partitions=PARTITIONS))  # type: ignore[arg-type]
    trust = LogTrust.of([key.public_key])
    f = Follower("tas", agent.handle, agent.replicas, topic, trust=trust)  # type: ignore[arg-type]
    records = topic.records(0)
    await f.process(records)
    bad = len(records) - 2
    assert agent.offsets() == [o for o in range(len(records)) if o != bad]
    assert f.forged == 1 and f.holes.next == {0: len(records)} and topic.reads == []


async def test_a_sample_read_again_after_the_group_moved_is_not_folded_twice() -> None:
    """The failure seen in a parallel `make test`: after a repair the node failed again. The
    telemetry loop reads again from its last commit when its group moves; an older sample
    without an XID, folded a second time, cleared the sticky XID 79, and the next sample's
    79 looked like a new incident."""
    r = rig()
    c, n = cluster_on(0), "r0-n0"
    await decided(r, register(c), report(c, n, Health.FAILED, 1))
    topic = EventsTopic(r.log)
    manager, sent = manager_of(r.log)
    manager.reported[(c, n)] = Said(Health.FAILED, 1, ())  # it reported the failure itself
    before = [sample(c, n, 0), sample(c, n, 5, xid=79)]  # clean, then XID 79 (sticky)
    await manager.on_telemetry(before)
    loaded = len(r.log.records[0])
    await decided(r, repair(c, n))
    await manager.on_events(topic.records(0)[loaded:])
    hot = [sample(c, n, s, xid=79, temperature_c=95.0) for s in (10, 15)]  # hot for a while
    await manager.on_telemetry(hot)
    assert [(x.type, x.health) for x in sent.commands] == [("ReportNodeHealth", Health.DEGRADED)]  # type: ignore[union-attr]

    await manager.on_telemetry([*before, *hot, sample(c, n, 20, xid=79, temperature_c=95.0)])
    assert [(x.type, x.health) for x in sent.commands] == [("ReportNodeHealth", Health.DEGRADED)]  # type: ignore[union-attr]
    assert manager.redelivered == 4
