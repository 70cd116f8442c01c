"""What a worker's views answer for clusters it does not serve live, without a broker: read
from the log, kept a short time, marked as such; through a revocation too (issue 20).

The clusters of these tests (4 racks x 6 nodes, 2 pods, 1 spare per rack), one on each of
the two events partitions:

    partition 0: `here`  (held by this worker)     partition 1: `there`  (held elsewhere)
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from aiokafka.errors import KafkaConnectionError

from rackplane.streams._views import ClusterViews, LogReads, Unread
from rackplane.streams.eventlog import partition_for
from rackplane.streams.live import ClusterView
from rackplane.streams.projection_agent import Projections
from tests.streams.test_controller import PARTITIONS, MemoryLog, cluster_on
from tests.streams.test_metrics import Story, projections, series


@dataclass
class FakeLog:
    """A `LogReader` answering from the stories' engines, counting reads and openings."""

    stories: dict[str, Story]
    opened: int = 0
    reads: list[int] = field(default_factory=list)
    failing: bool = False
    gate: asyncio.Event | None = None

    async def __aenter__(self) -> FakeLog:
        self.opened += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self, partition: int) -> dict[str, ClusterView]:
        self.reads.append(partition)
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            raise KafkaConnectionError("broker went away")
        return {
            c: ClusterView(s.engine.state, partition, 0)
            for c, s in self.stories.items()
            if partition_for(c, PARTITIONS) == partition
        }


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    here: str
    there: str
    log: FakeLog
    clock: Clock
    projections: Projections
    views: ClusterViews


async def rig() -> Rig:
    """`here` held and loaded by this worker, `there` on a partition held elsewhere; each
    with one job of 4 nodes placed."""
    memory = MemoryLog()
    stories = {}
    for c in (cluster_on(0), cluster_on(1)):
        stories[c] = Story(c, memory)
        stories[c].register()
        stories[c].submit("a", 4)
    p = projections(memory)
    p.hold({0})
    await p.show({0})
    fake, clock = FakeLog(stories), Clock()
    reads = LogReads(lambda: fake, clock=clock, wall=lambda: 1_780_000_000.0)
    return Rig(cluster_on(0), cluster_on(1), fake, clock, p, ClusterViews(p, reads))


async def test_every_cluster_is_listed_saying_whether_it_is_held_and_where_it_was_read() -> None:
    r = await rig()
    found, unread = await r.views.clusters()
    assert unread == []
    rows = {a.state.cluster: a.summary() for a in found}
    assert rows[r.here]["held"] is True and rows[r.here]["source"] == "live"
    assert "read_at" not in rows[r.here]
    assert rows[r.there]["held"] is False and rows[r.there]["source"] == "log"
    assert rows[r.there]["read_at"].startswith("2026-05-28T")  # the wall clock's 1.78e9 s
    assert rows[r.here]["allocated"] == rows[r.there]["allocated"] == 4
    assert r.log.reads == [1]  # the held partition is never read from the log


async def test_a_cluster_held_elsewhere_is_read_once_per_ttl_and_marked_in_the_headers() -> None:
    r = await rig()
    answers = [await r.views.cluster(r.there) for _ in range(5)]
    assert r.log.reads == [1] and r.log.opened == 1  # kept: one read for five requests
    first = answers[0]
    assert first is not None and first.state.seq == r.log.stories[r.there].engine.state.seq
    assert first.headers() == {
        "X-Rackplane-Source": "log",
        "X-Rackplane-Held": "false",
        "X-Rackplane-Read-At": "2026-05-28T20:26:40+00:00",
    }
    r.clock.now += 2.5  # past the 2 s it is kept
    await r.views.cluster(r.there)
    assert r.log.reads == [1, 1]
    here = await r.views.cluster(r.here)
    assert here is not None and here.headers() == {
        "X-Rackplane-Source": "live",
        "X-Rackplane-Held": "true",
    }
    assert await r.views.cluster(cluster_on(1, 5)) is None  # in no log: a 404


async def test_requests_arriving_together_share_one_read() -> None:
    r = await rig()
    r.log.gate = asyncio.Event()
    waiting = [asyncio.ensure_future(r.views.cluster(r.there)) for _ in range(4)]
    await asyncio.sleep(0)
    waiting[0].cancel()  # one client hangs up: the others still get the read
    r.log.gate.set()
    got = await asyncio.gather(*waiting[1:])
    assert r.log.reads == [1] and all(a is not None and a.source == "log" for a in got)


async def test_during_a_rebalance_every_cluster_is_answered_from_the_log() -> None:
    r = await rig()
    r.projections.replicas.forget()  # what the worker does at a revocation
    r.projections.revoke()
    found, _ = await r.views.clusters()
    assert {a.state.cluster: (a.held, a.source) for a in found} == {
        r.here: (False, "log"),
        r.there: (False, "log"),
    }
    # the figures stay through the rebalance (every controller is fenced: the log stands)
    assert series(r.projections, "rackplane_nodes", cluster=r.here)
    # assigned again, before its load: held, still from the log; after it: live
    r.projections.hold({0})
    answer = await r.views.cluster(r.here)
    assert answer is not None and (answer.held, answer.source) == (True, "log")
    await r.projections.show({0})
    answer = await r.views.cluster(r.here)
    assert answer is not None and (answer.held, answer.source) == (True, "live")


async def test_a_log_that_cannot_be_read_answers_503_and_the_list_names_what_is_missing() -> None:
    r = await rig()
    r.log.failing = True
    with pytest.raises(Unread, match="broker went away"):
        await r.views.cluster(r.there)
    found, unread = await r.views.clusters()
    assert [a.state.cluster for a in found] == [r.here] and unread == [1]
    r.log.failing = False  # a failure is not kept: the next request reads again
    found, unread = await r.views.clusters()
    assert {a.state.cluster for a in found} == {r.here, r.there} and unread == []


async def test_metrics_say_which_partitions_a_worker_holds_and_shows() -> None:
    r = await rig()

    def holding() -> tuple[float, float, set[str]]:
        held = series(r.projections, "rackplane_events_partitions_held")
        total = series(r.projections, "rackplane_events_partitions")
        shown = series(r.projections, "rackplane_events_partition_shown")
        return (
            next(iter(held.values())),
            next(iter(total.values())),
            {dict(k)["partition"] for k in shown},
        )

    assert holding() == (1.0, 2.0, {"0"})
    r.projections.replicas.forget()
    r.projections.revoke()
    assert holding() == (0.0, 2.0, {"0"})  # nothing held; what it shows stays until assigned
    r.projections.hold({1})  # partition 0 went elsewhere: its clusters leave at once
    assert holding() == (1.0, 2.0, set())
    assert not series(r.projections, "rackplane_nodes", cluster=r.here)
    await r.projections.show({1})
    assert holding() == (1.0, 2.0, {"1"})
    assert series(r.projections, "rackplane_nodes", cluster=r.there)  # idle, yet shown


async def test_a_read_is_let_go_once_it_is_too_old_to_answer() -> None:
    r = await rig()
    reads = LogReads(lambda: r.log, ttl=0.05)
    await reads.partition(1)
    assert reads.kept == {1}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    while reads.kept:  # a large cluster's state is not held for a dashboard that went away
        assert loop.time() < deadline, "the read was kept past its ttl"
        await asyncio.sleep(0.01)
