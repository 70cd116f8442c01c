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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from faust.types.tuples import ConsumerMessage

from rackplane.streams import audit_agent
from rackplane.streams.audit_agent import AuditAgent, leave_unacked
from rackplane.streams.eventlog import MARKER_HEADER

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


async def test_a_batch_is_acknowledged_only_once_it_is_stored() -> None:
    clock, consumer = Clock(), Offsets()
    record = FailingRecord(failures=3)
    acked_during_failures: list[list[int]] = []
    record.on_call = lambda: acked_during_failures.append(list(consumer.acked))
    agent = agent_for(record, clock)
    await agent(FakeStream([batch(range(0, 3)), batch(range(3, 6))], consumer))
    assert acked_during_failures[:4] == [[], [], [], []]  # the first batch, failing then stored
    assert acked_during_failures[4] == [0, 1, 2]
    assert consumer.acked == [0, 1, 2, 3, 4, 5]
    assert record.stored == ["m0", "m1", "m2", "m3", "m4", "m5"]


async def test_a_worker_that_stops_while_writes_fail_acknowledges_nothing_unstored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, consumer = Clock(), Offsets()
    stopping = False
    record = FailingRecord(failing=lambda: len(record.calls) > 1)  # the first batch is stored
    released: list[bool] = []

    def calls() -> None:
        nonlocal stopping
        stopping = len(record.calls) >= 4  # the worker stops during the retries

    record.on_call = calls
    agent = agent_for(
        record, clock, stopping=lambda: stopping, release=lambda: released.append(True)
    )
    shared = batch(range(3, 6), streams=2)  # also read by another agent of the worker
    await agent(FakeStream([batch(range(0, 3)), shared, batch(range(6, 9))], consumer))
    assert consumer.acked == [0, 1, 2]  # what was stored, nothing after
    assert agent.gave_up and released == [True] and len(record.calls) == 4
    for ev in shared:
        ev.message.ack(consumer)  # the other agent is done with them: still not committable
    assert consumer.acked == [0, 1, 2]
    assert [line["event"] for _, line in lines(caplog)][-1] == "audit.stopped_unstored"


async def test_a_cancelled_agent_leaves_its_batch_unacknowledged() -> None:
    consumer = Offsets()
    record = FailingRecord(failing=lambda: len(record.calls) > 1)
    agent = AuditAgent("audit_events", json.loads, record)  # real sleeps: 0.1 s, 0.2 s, ...
    stream = FakeStream([batch(range(0, 2)), batch(range(2, 4))], consumer)
    task = asyncio.create_task(agent(stream))
    async with asyncio.timeout(10):
        while len(record.calls) < 3 and not task.done():
            await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await stream.gen.aclose()  # what the loop does to the abandoned generator: its finally acks
    assert consumer.acked == [0, 1]


def test_markers_and_garbage_are_skipped_and_the_rest_kept_in_order() -> None:
    agent = AuditAgent("audit_events", json.loads, FailingRecord())
    evs = batch(range(0, 4))
    evs[1].message.headers = [(MARKER_HEADER, b"token")]
    evs[2].message.value = b"{not json"
    assert agent.decodable(evs) == ["m0", "m3"]


def test_leaving_a_batch_unacked_makes_later_acks_of_it_no_ops() -> None:
    consumer = Offsets()
    evs = batch(range(0, 2))
    leave_unacked(evs)
    for ev in evs:
        assert ev.message.ack(consumer) is False
    assert consumer.acked == []
    assert audit_agent.MAX_BACKOFF == 5.0 and audit_agent.FIRST_BACKOFF == 0.1
