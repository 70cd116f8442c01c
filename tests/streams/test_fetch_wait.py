"""The adaptive fetch wait: its rule, and that every aiokafka consumer of the process has it.

No broker: the rule is a pure function; `adapt` is driven with a stand-in fetcher and
assignment (the attributes aiokafka 0.14's `Fetcher` and assignment have).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.consumer.fetcher import READ_COMMITTED, Fetcher
from aiokafka.structs import TopicPartition

import rackplane.streams  # noqa: F401  (installs the patch)
from rackplane.streams import _fetch_wait
from rackplane.streams._fetch_wait import MAX_WAIT_MS, adapt, next_wait

TP = TopicPartition("t", 0)


def test_an_empty_answer_with_data_waiting_doubles_the_wait_up_to_the_ceiling() -> None:
    waits = [5]
    while waits[-1] < MAX_WAIT_MS:
        waits.append(next_wait(waits[-1], 5, got_data=False, behind=True))
    assert waits[:5] == [5, 10, 20, 40, 80]
    assert waits[-1] == MAX_WAIT_MS
    assert next_wait(MAX_WAIT_MS, 5, got_data=False, behind=True) == MAX_WAIT_MS


def test_an_answer_with_data_keeps_the_wait_and_an_idle_one_halves_it_to_the_floor() -> None:
    assert next_wait(80, 5, got_data=True, behind=False) == 80
    assert next_wait(80, 5, got_data=False, behind=False) == 40
    assert next_wait(8, 5, got_data=False, behind=False) == 5
    assert next_wait(5, 5, got_data=False, behind=False) == 5


@dataclass
class _State:
    position: int
    highwater: int | None
    lso: int | None = None
    has_valid_position: bool = True


@dataclass
class _Assignment:
    state: _State
    active: bool = True

    def state_value(self, tp: TopicPartition) -> _State:
        return self.state


@dataclass
class _Fetcher:
    _fetch_max_wait_ms: int = 5
    _isolation_level: int = 0
    _records: dict[TopicPartition, Any] = field(default_factory=dict)


@dataclass
class _Request:
    topics: list[tuple[str, list[tuple[int, int, int]]]]


def _request(offset: int) -> _Request:
    return _Request([(TP.topic, [(TP.partition, offset, 1_048_576)])])


def _answer(f: _Fetcher, a: _Assignment, offset: int, got_data: bool, end_before: int) -> int:
    """`adapt` after a fetch at `offset` sent when the partition's end was `end_before`."""
    before = _fetch_wait.ends(
        f, _Assignment(_State(offset, end_before, end_before)), _request(offset)
    )
    return adapt(f, a, _request(offset), got_data, before)


def test_adapt_raises_the_wait_only_while_the_partition_holds_data_past_the_position() -> None:
    f = _Fetcher()
    behind = _Assignment(_State(position=100, highwater=10_000))
    assert [_answer(f, behind, 100, False, 10_000) for _ in range(3)] == [10, 20, 40]
    assert _answer(f, behind, 100, True, 10_000) == 40  # data came: kept
    caught_up = _Assignment(_State(position=10_000, highwater=10_000))
    assert [_answer(f, caught_up, 10_000, False, 10_000) for _ in range(4)] == [20, 10, 5, 5]


def test_data_that_arrived_during_the_wait_is_not_starvation() -> None:
    # Sent at the end (10,000); the answer is empty and says the end is now 10,001: Tansu
    # waited the fetch out (no early wake-up), as asked. The next fetch gets the record.
    f = _Fetcher()
    arrived = _Assignment(_State(position=10_000, highwater=10_001))
    assert _answer(f, arrived, 10_000, False, 10_000) == 5
    f._fetch_max_wait_ms = 40
    assert _answer(f, arrived, 10_000, False, 10_000) == 20  # idle: back towards the floor


def test_the_first_answer_without_a_known_end_changes_nothing() -> None:
    f = _Fetcher()
    fresh = _Assignment(_State(position=0, highwater=10_000))
    assert adapt(f, fresh, _request(0), False, {}) == 5


def test_adapt_ignores_stale_answers_and_lost_assignments() -> None:
    f = _Fetcher()
    moved = _Assignment(_State(position=200, highwater=10_000))  # seeked since the request
    assert _answer(f, moved, 100, False, 10_000) == 5
    gone = _Assignment(_State(position=100, highwater=10_000), active=False)
    assert _answer(f, gone, 100, False, 10_000) == 5


def test_under_read_committed_the_end_is_the_last_stable_offset() -> None:
    f = _Fetcher(_isolation_level=READ_COMMITTED)
    open_txn = _Assignment(_State(position=100, highwater=150, lso=100))
    before = _fetch_wait.ends(f, open_txn, _request(100))
    assert before == {TP: 100}
    assert adapt(f, open_txn, _request(100), False, before) == 5
    committed = _Assignment(_State(position=100, highwater=150, lso=150))
    before = _fetch_wait.ends(f, committed, _request(100))
    assert adapt(f, committed, _request(100), False, before) == 10


@pytest.mark.parametrize("module", ["rackplane.streams.client", "rackplane.streams.app"])
def test_importing_the_streaming_shell_installs_the_patch(module: str) -> None:
    __import__(module)
    assert getattr(Fetcher, _fetch_wait._PATCHED) is True
    assert Fetcher._proc_fetch_request.__qualname__.startswith("apply.")
