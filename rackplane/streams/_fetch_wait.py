"""Adaptive fetch wait for aiokafka's consumers: a fetch answered empty while data waits is
asked again with a longer wait.

Why (issue 4's stall): on Tansu 0.6.0 a fetch that gathers records costs time in proportion
to the number of record batches the partition holds (measured here: 5.8 ms at 10,000
one-record batches, 18 ms at 30,000, 36 ms at 60,000, 55-62 ms at 100,000; a partition of
100-record batches answers in 1 ms; `python -m bench.tansu_cost`, 2026-12-07: 2.6 ms of the
broker's CPU per record tailed at 1,000 batches, 24 ms at 40,000, while a fetch that waits
at the end and gets nothing stays at ~0.6 ms and ListOffsets grows as the gathering fetch
does). Tansu answers when the fetch's `max_wait_ms` runs out with what it gathered by then,
and once the cost passes the wait that is nothing: no error, the right high watermark, an
empty record set. aiokafka then asks again at the same offset, for ever; Faust's stream
stops without a word. Commands arrive one per batch, so the controller's commands partition
reached that point after ~10,000 commands at a 5 ms wait; at the 50 ms default it comes
after ~90,000.

The rule, per consumer: an empty answer although the partition's end (high watermark, or
last stable offset under read_committed) lay past the fetch position when the fetch was
sent doubles the next fetch's wait, up to `MAX_WAIT_MS`; an empty answer with nothing to
read halves it back towards the configured wait; an answer with data keeps it. Apache Kafka
answers as soon as data is there, so it never sees the doubling outside read_committed's
open transactions, where a longer wait costs nothing either (Kafka still answers on new
data).

`apply()` patches aiokafka's `Fetcher` class (idempotent; done on `import rackplane.streams`):
every consumer of the process gets it, Faust's included.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.consumer import fetcher as _fetcher
from aiokafka.structs import TopicPartition

log = logging.getLogger("rackplane.fetch")

MAX_WAIT_MS = 5_000
"""Ceiling of the raised wait: Tansu's fetch cost reaches it at ~8 million batches in one
partition; request timeouts (aiokafka 40 s, Faust 90 s) stay far above it."""
_PATCHED = "_rackplane_adaptive_wait"
_FLOOR = "_rackplane_floor_wait_ms"


def next_wait(wait: int, floor: int, *, got_data: bool, behind: bool) -> int:
    """The fetch wait after an answer: doubled if it came back empty with data waiting,
    halved towards `floor` if empty with nothing to read, unchanged if it brought data."""
    if got_data:
        return wait
    if behind:
        return min(max(wait * 2, 1), max(MAX_WAIT_MS, floor))
    return max(floor, wait // 2)


def ends(fetcher: Any, assignment: Any, request: Any) -> dict[TopicPartition, int]:
    """The end of each partition of `request` as last known (high watermark, or last stable
    offset under read_committed): taken before the fetch is sent."""
    committed_only = fetcher._isolation_level == _fetcher.READ_COMMITTED
    out: dict[TopicPartition, int] = {}
    for topic, partitions in request.topics:
        for partition, _offset, _max_bytes in partitions:
            tp = TopicPartition(topic, partition)
            state = assignment.state_value(tp)
            end = None if state is None else (state.lso if committed_only else state.highwater)
            if end is not None:
                out[tp] = end
    return out


def _behind(fetcher: Any, assignment: Any, request: Any, before: dict[TopicPartition, int]) -> bool:
    """Whether a partition of `request` got no records though data past the fetch offset was
    there when the fetch was sent. (Data that arrives during the wait does not count: Tansu
    does not wake a waiting fetch, and that is the wait doing its job, not starving.)"""
    for topic, partitions in request.topics:
        for partition, offset, _max_bytes in partitions:
            tp = TopicPartition(topic, partition)
            if tp in fetcher._records:
                continue
            state = assignment.state_value(tp)
            if state is None or not state.has_valid_position or state.position != offset:
                continue
            if before.get(tp, offset) > offset:
                return True
    return False


def adapt(
    fetcher: Any,
    assignment: Any,
    request: Any,
    got_data: bool,
    before: dict[TopicPartition, int],
) -> int:
    """Set `fetcher`'s wait for its next fetch after the answer to `request` (`before`: the
    partitions' ends when it was sent, from `ends`); return the wait."""
    floor = fetcher.__dict__.setdefault(_FLOOR, fetcher._fetch_max_wait_ms)
    wait: int = fetcher._fetch_max_wait_ms
    if not assignment.active:
        return wait
    behind = not got_data and _behind(fetcher, assignment, request, before)
    new = next_wait(wait, floor, got_data=got_data, behind=behind)
    if new != wait:
        fetcher._fetch_max_wait_ms = new
        if behind:
            log.debug("fetch answered empty with data waiting: wait %d -> %d ms", wait, new)
    return new


def apply() -> None:
    """Install the adaptive wait in aiokafka's `Fetcher` (idempotent)."""
    cls = _fetcher.Fetcher
    if getattr(cls, _PATCHED, False):
        return
    original = cls._proc_fetch_request

    async def proc_fetch_request(self: Any, assignment: Any, node_id: Any, request: Any) -> Any:
        before = ends(self, assignment, request)
        got_data = await original(self, assignment, node_id, request)
        adapt(self, assignment, request, bool(got_data), before)
        return got_data

    cls._proc_fetch_request = proc_fetch_request
    setattr(cls, _PATCHED, True)
