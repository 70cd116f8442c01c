"""How long a client waits for the rest of a command's chain (`client._collect`).

A fake consumer hands out the log's records at set times after the command was sent: the
direct event, then a policy's placement. The wait for more of the chain is `SETTLE_S` after
the last chain event, longer when the direct answer came late (a worker that was slow to
answer is slow to react), and never longer than `SETTLE_MAX_S`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rackplane.models import PlaceJob, SliceAssignment, SubmitJob
from rackplane.streams import client
from rackplane.streams.codec import encode_event
from tests.builders import Harness, cmd, job, node, rack, register


class Timed:
    """A consumer whose records become readable `at` seconds after it was made."""

    def __init__(self, records: list[tuple[float, bytes]]) -> None:
        self.start = time.monotonic()
        self.records = sorted(records, key=lambda r: r[0])

    async def getmany(self, timeout_ms: int) -> dict[str, list[Any]]:
        now = time.monotonic() - self.start
        ready = [v for at, v in self.records if at <= now]
        if ready:
            self.records = self.records[len(ready) :]
            return {"p": [Record(v) for v in ready]}
        wait = timeout_ms / 1000
        if self.records:
            wait = min(wait, max(0.0, self.records[0][0] - now))
        await asyncio.sleep(wait)
        return {}


class Record:
    def __init__(self, value: bytes) -> None:
        self.value = value
        self.headers: list[tuple[str, bytes]] = []


def submitted_then_placed() -> tuple[client._Chain, bytes, bytes]:
    h = Harness().given(register(rack("r1", nodes=8)))
    submit = cmd(SubmitJob, job=job("j", 2))
    (sub,) = h.when(submit)
    place = cmd(
        PlaceJob,
        id=f"tas:{sub.seq}:0",
        actor="policy:tas",
        job="j",
        slices=(SliceAssignment(nodes=(node("r1", 1), node("r1", 2))),),
    )
    (placed,) = h.when(place)
    assert placed.type == "JobPlaced"
    return client._Chain(submit, follow=True), encode_event(sub), encode_event(placed)


def collect(records: list[tuple[float, bytes]], chain: client._Chain) -> list[str]:
    events = asyncio.run(client._collect(Timed(records), chain, 20.0, client.SETTLE_S))
    return [e.type for e in events]


def test_a_reaction_within_the_settle_joins_the_chain_and_one_after_it_does_not() -> None:
    chain, sub, placed = submitted_then_placed()
    early = client.SETTLE_S * 0.5
    assert collect([(0.01, sub), (0.01 + early, placed)], chain) == ["JobSubmitted", "JobPlaced"]
    chain, sub, placed = submitted_then_placed()
    late = client.SETTLE_S + 0.4
    assert collect([(0.01, sub), (0.01 + late, placed)], chain) == ["JobSubmitted"]


def test_a_late_direct_answer_makes_the_wait_for_the_chain_longer() -> None:
    # The direct answer after 0.5 s: the chain may stay quiet for 4 x 0.5 = 2 s.
    chain, sub, placed = submitted_then_placed()
    gap = client.SETTLE_S + 0.5
    assert collect([(0.5, sub), (0.5 + gap, placed)], chain) == ["JobSubmitted", "JobPlaced"]


def test_the_wait_is_bounded_however_slow_the_direct_answer() -> None:
    chain, sub, placed = submitted_then_placed()
    started = time.monotonic()
    assert collect([(2.0, sub), (2.0 + client.SETTLE_MAX_S + 0.5, placed)], chain) == [
        "JobSubmitted"
    ]
    assert time.monotonic() - started < 2.0 + client.SETTLE_MAX_S + 0.5


def test_the_direct_outcome_is_the_fetch_that_brought_the_commands_decision() -> None:
    # A decision is one record batch, handed over whole by one fetch: without `follow`
    # (`--no-wait`) the outcome is what that fetch brought: an event of the command fetched
    # later (which a real log never holds) is not waited for.
    h = Harness().given(register(rack("r1", nodes=8)))
    submit = cmd(SubmitJob, job=job("j", 2))
    (event,) = h.when(submit)
    one, two, three = (
        encode_event(event.model_copy(update={"seq": event.seq + k})) for k in range(3)
    )
    got = asyncio.run(
        client._collect(
            Timed([(0.01, one), (0.01, two), (0.04, three)]),
            client._Chain(submit, follow=False),
            20.0,
            client.SETTLE_S,
        )
    )
    assert [e.seq for e in got] == [event.seq, event.seq + 1]
