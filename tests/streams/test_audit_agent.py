"""The audit agent: a write that fails is retried until stored, and nothing unstored is
acknowledged, not even when the worker stops.

`FakeStream.take_events` acknowledges each event of a batch in a `finally:` once the body
hands the batch back, as Faust's does (faust/streams.py); the messages are Faust's own
`ConsumerMessage`, acknowledged into `Offsets`, which keeps what Faust's consumer would
commit. The real worker, on a real full disk: tests/streams/test_history_pipeline.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from faust.types.tuples import ConsumerMessage

from rackplane.models import EVENTS
from rackplane.streams.audit_agent import AuditAgent, audit_loop
from rackplane.streams.config import StreamConfig
from rackplane.streams.eventlog import MARKER_HEADER, partition_for
from rackplane.streams.topics import ensure_topics
from tests.broker.test_log_integrity import cluster_events
from tests.conftest import BrokerUnderTest

TOPIC = "t.events"


@dataclass
class Offsets:
    """What Faust's consumer is told: the offsets acknowledged, the ones it may commit."""

    acked: list[int] = field(default_factory=list)

    def ack(self, message: Any) -> bool:
        if message.acked:
            return False
        message.acked = True
        self.acked.append(message.offset)
        return True


@dataclass
class Ev:
    message: Any


def batch(offsets: range, *, streams: int = 1) -> list[Ev]:
    out = []
    for o in offsets:
        m = ConsumerMessage(TOPIC, 0, o, 0.0, 0, [], b"k", f'"m{o}"'.encode(), None)
        m.incref(streams)  # one reference per stream it was delivered to, as Faust counts
        out.append(Ev(m))
    return out


class FakeStream:
    def __init__(self, batches: list[list[Ev]], consumer: Offsets) -> None:
        self.batches = batches
        self.consumer = consumer

    def take_events(self, max_: int, within: float) -> AsyncIterator[list[Ev]]:
        self.gen = self._take()
        return self.gen

    async def _take(self) -> AsyncIterator[list[Ev]]:
        for b in self.batches:
            try:
                yield b
            finally:
                for ev in b:
                    ev.message.ack(self.consumer)


class Clock:
    """Fake time: `sleep` advances it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


class FailingRecord:
    """A sink write that fails `failures` times (or while `failing()` says so)."""

    def __init__(self, failures: int = 0, failing: Callable[[], bool] | None = None) -> None:
        self.failures = failures
        self.failing = failing
        self.calls: list[list[Any]] = []
        self.stored: list[Any] = []
        self.on_call: Callable[[], None] = lambda: None

    def __call__(self, items: list[Any]) -> None:
        self.calls.append(items)
        self.on_call()
        if (self.failing is not None and self.failing()) or len(self.calls) <= self.failures:
            raise OSError(28, "No space left on device")
        self.stored.extend(items)


def agent_for(record: FailingRecord, clock: Clock, **kw: Any) -> AuditAgent:
    return AuditAgent(
        "audit_events", json.loads, record, sleep=clock.sleep, clock=clock, wall=clock, **kw
    )


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, dict[str, Any]]]:
    return [
        (r.levelno, json.loads(r.getMessage()))
        for r in caplog.records
        if r.name == "rackplane.audit"
    ]


async def test_a_failing_write_is_retried_with_doubling_backoff_until_it_is_stored() -> None:
    clock = Clock()
    record = FailingRecord(failures=8)
    attempts: list[float] = []
    record.on_call = lambda: attempts.append(clock.now)
    assert await agent_for(record, clock).store(["a", "b"]) is True
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(attempts)]
    assert gaps == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert record.stored == ["a", "b"] and len(record.calls) == 9


async def test_operators_see_one_warning_then_at_most_one_a_minute_then_the_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rackplane.audit")
    clock = Clock()
    start = clock.now
    record = FailingRecord(failing=lambda: clock.now - start < 200)
    assert await agent_for(record, clock).store(["a"])
    got = lines(caplog)
    kinds = [(level, line["event"]) for level, line in got]
    assert kinds == [
        (logging.WARNING, "audit.write_failed"),
        (logging.WARNING, "audit.still_failing"),
        (logging.WARNING, "audit.still_failing"),
        (logging.WARNING, "audit.still_failing"),
        (logging.INFO, "audit.recovered"),
    ]
    assert "No space left on device" in got[0][1]["error"]
    assert got[0][1]["agent"] == "audit_events" and got[0][1]["batch"] == 1
    recovered = got[-1][1]
    assert recovered["retries"] == len(record.calls) - 1 and recovered["seconds"] >= 200


async def test_the_health_fields_say_since_when_and_why_writes_fail() -> None:
    clock = Clock()
    record = FailingRecord(failures=3)
    agent = agent_for(record, clock)
    seen: list[tuple[float | None, str | None, int]] = []
    record.on_call = lambda: seen.append((agent.failing_since, agent.last_error, agent.retries))
    assert agent.health()["ok"] and agent.failing_since is None
    await agent.store(["a"])
    first_failure = 1000.0
    assert seen[1][0] == seen[3][0] == first_failure and seen[3][2] == 3
    assert "No space left" in (seen[1][1] or "")
    health = agent.health()
    assert health["ok"] and health["failing_since"] is None and health["retries"] == 0
    assert "No space left" in health["last_error"] and health["stored"] == 1


async def test_a_worker_that_stops_while_writes_fail_gives_up_the_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    stopping = False
    record = FailingRecord(failing=lambda: True)

    def calls() -> None:
        nonlocal stopping
        stopping = len(record.calls) >= 3  # the worker stops during the retries

    record.on_call = calls
    agent = agent_for(record, clock, stopping=lambda: stopping)
    assert await agent.store(["a"]) is False  # not stored: the loop commits nothing for it
    assert agent.gave_up and len(record.calls) == 3
    assert [line["event"] for _, line in lines(caplog)][-1] == "audit.stopped_unstored"


@pytest.mark.broker
async def test_the_audit_loop_commits_only_what_is_stored(broker: BrokerUnderTest) -> None:
    config = StreamConfig(broker=f"kafka://{broker.bootstrap}", prefix=f"t{uuid.uuid4().hex[:8]}")
    await ensure_topics(config)
    sink = ListSink(failing=True)
    loop = audit_loop(config, sink, where="memory")  # type: ignore[arg-type]
    events = cluster_events("c", 6)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await producer.start()
    try:
        for e in events[:3]:
            await producer.send_and_wait(config.topic("events"), EVENTS.dump_json(e), key=b"c")
        loop.start()
        await asyncio.wait_for(loop.joined.wait(), 30)
        async with asyncio.timeout(30):
            while sink.calls < 3:  # failing, retried
                await asyncio.sleep(0.05)
        assert await _committed(config, loop.group) == -1  # nothing stored, nothing committed
        sink.failing = False
        async with asyncio.timeout(30):
            while await _committed(config, loop.group) < 3:
                await asyncio.sleep(0.1)
        for e in events[3:]:
            await producer.send_and_wait(config.topic("events"), EVENTS.dump_json(e), key=b"c")
        async with asyncio.timeout(30):
            while await _committed(config, loop.group) < 6:
                await asyncio.sleep(0.1)
    finally:
        await loop.stop()
        await producer.stop()
    assert [e.seq for e in sink.events] == [1, 2, 3, 4, 5, 6]


class ListSink:
    """An `AuditSink` in memory whose writes fail while `failing`."""

    def __init__(self, *, failing: bool) -> None:
        self.failing = failing
        self.calls = 0
        self.events: list[Any] = []

    def record_events(self, events: list[Any]) -> None:
        self.calls += 1
        if self.failing:
            raise OSError(28, "No space left on device")
        self.events.extend(events)

    def record_commands(self, commands: list[Any]) -> None:
        pass

    def record_rejections(self, rejections: list[Any]) -> None:
        pass

    def close(self) -> None:
        pass


async def _committed(config: StreamConfig, group: str) -> int:
    consumer = AIOKafkaConsumer(**config.kafka_options(), group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(config.topic("events"), partition_for("c", config.partitions))
        offset = await consumer.committed(tp)
        return -1 if offset is None else int(offset)
    finally:
        await consumer.stop()


def test_markers_and_garbage_are_skipped_and_the_rest_kept_in_order() -> None:
    agent = AuditAgent("audit_events", json.loads, FailingRecord())
    evs = batch(range(0, 4))
    evs[1].message.headers = [(MARKER_HEADER, b"token")]
    evs[2].message.value = b"{not json"
    assert agent.decodable(evs) == ["m0", "m3"]


def test_the_history_follows_the_log_and_leaves_out_what_no_rebuild_would_fold() -> None:
    from types import SimpleNamespace

    from rackplane.streams.audit_agent import LogFollower

    log = cluster_events("c", 4)  # a registration, then cordons
    ghost = log[1].model_copy(update={"cluster": "ghost", "id": "ghost/1", "seq": 1})
    far = log[1].model_copy(update={"seq": 10**9, "id": f"c/{10**9}"})

    def rec(event: Any, key: str | None = None) -> tuple[Any, Any]:
        return SimpleNamespace(key=(key or event.cluster).encode(), partition=0), event

    follower = LogFollower({"c": 2})  # the history holds c up to seq 2
    kept = follower.follow(
        [rec(log[1]), rec(log[2]), rec(ghost), rec(far), rec(log[3], key="other"), rec(log[3])]
    )
    assert kept == [log[1], log[2], log[3]]  # a stored seq (deduped later), then the next ones
    assert follower.skipped == 3
    fresh = LogFollower({})
    assert fresh.follow([rec(ghost), rec(log[0]), rec(log[1])]) == [log[0], log[1]]


def test_with_log_keys_the_history_leaves_out_events_the_controller_did_not_sign() -> None:
    from types import SimpleNamespace

    from rackplane.keyfiles import KeyFile
    from rackplane.logtrust import LogTrust
    from rackplane.streams.audit_agent import LogFollower

    worker = KeyFile.new("worker:w1")
    log = [worker.sign_event(e) for e in cluster_events("c", 3)]
    forged = log[2].model_copy(update={"actor": "operator:mallory"})  # its signature breaks

    def rec(event: Any) -> tuple[Any, Any]:
        return SimpleNamespace(key=event.cluster.encode(), partition=0, offset=event.seq), event

    follower = LogFollower({}, LogTrust.of([worker.public_key]))
    unsigned = log[1].model_copy(update={"signature": None})
    assert follower.follow([rec(log[0]), rec(unsigned), rec(log[1]), rec(forged), rec(log[2])]) == [
        log[0], log[1], log[2],
    ]  # fmt: skip
    assert follower.forged == 2 and follower.skipped == 0
