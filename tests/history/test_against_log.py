"""The store against the event log (`compare`), each kind of difference on its own.

The log side is built as `history verify --against-log` builds it: `LogIndex.add` per record
(partition, offset, value); the store side is what `HistoryReader.event_digests` yields.
The broker end of it runs in tests/streams/test_history_pipeline.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from rackplane.history._writer import to_json
from rackplane.history.against_log import ClusterDiff, LogIndex, compare, digest
from rackplane.models import Event
from rackplane.streams.codec import encode_event
from tests.history.conftest import Recorded


def log_of(events: Iterable[Event], *, first_offset: int = 0) -> LogIndex:
    index = LogIndex("t.events")
    for offset, e in enumerate(events, start=first_offset):
        index.add(0, offset, encode_event(e))
    return index


def stored(events: Sequence[Event]) -> list[tuple[str, int, bytes]]:
    return sorted((e.cluster, e.seq, digest(to_json(e))) for e in events)


def one(diffs: list[ClusterDiff]) -> ClusterDiff:
    (d,) = diffs
    return d


@pytest.fixture
def events(long_recorded: Recorded) -> list[Event]:
    return long_recorded.events[:200]  # seqs 1..200


def test_a_store_equal_to_the_log_is_in_step(events: list[Event]) -> None:
    d = one(compare(log_of(events), stored(events)))
    assert d.ok(strict=True) and d.verdict() == "in step"
    assert (d.in_log, d.stored) == (200, 200)


def test_a_store_that_lacks_only_the_newest_events_is_behind_and_passes(
    events: list[Event],
) -> None:
    d = one(compare(log_of(events), stored(events[:188])))
    assert d.counts["behind"] == 12 and d.verdict() == "behind by 12"
    assert d.ok() and not d.ok(strict=True)


def test_events_lost_inside_the_store_are_missing_and_fail(events: list[Event]) -> None:
    kept = [e for e in events if not 40 <= e.seq < 52]
    d = one(compare(log_of(events), stored(kept)))
    assert d.counts["missing"] == 12 and not d.ok()
    assert d.examples["missing"][0] == "seq 40: in the log (t.events[0]@39), not stored"


def test_a_stored_event_the_log_lacks_is_extra(events: list[Event]) -> None:
    log = log_of(e for e in events if e.seq != 77)
    d = one(compare(log, stored(events)))
    assert d.counts["extra"] == 1 and d.counts["log_gaps"] == 1 and not d.ok()
    assert d.examples["extra"] == ["seq 77: stored, not in the log"]


def test_one_seq_with_other_content_is_different(events: list[Event]) -> None:
    changed = [e.model_copy(update={"actor": "someone"}) if e.seq == 9 else e for e in events]
    d = one(compare(log_of(events), stored(changed)))
    assert d.counts["different"] == 1 and not d.ok()
    assert "seq 9" in d.examples["different"][0]


def test_two_events_with_one_seq_in_the_log_are_a_fork_and_a_repeat_is_a_duplicate(
    events: list[Event],
) -> None:
    other = events[20].model_copy(update={"actor": "another-writer"})
    log = log_of([*events, events[30], other])
    d = one(compare(log, stored(events)))
    assert d.duplicates == 1 and d.counts["forks"] == 1 and not d.ok()
    assert d.examples["forks"] == [
        "seq 21: two different events in the log, t.events[0]@20 and @201"
    ]
    repeat_only = one(compare(log_of([*events, events[30]]), stored(events)))
    assert repeat_only.duplicates == 1 and repeat_only.ok(strict=True)


def test_stored_events_older_than_a_trimmed_log_are_not_extra(events: list[Event]) -> None:
    d = one(compare(log_of(events[50:], first_offset=50), stored(events)))
    assert d.before_log == 50 and d.counts["extra"] == 0 and d.ok(strict=True)


def test_a_cluster_only_in_the_log_is_behind_and_one_only_in_the_store_is_extra(
    events: list[Event],
) -> None:
    other = [e.model_copy(update={"cluster": "zz"}) for e in events[:5]]
    diffs = compare(log_of(events), stored(other))
    by = {d.cluster: d for d in diffs}
    assert by[events[0].cluster].counts["behind"] == 200 and by[events[0].cluster].ok()
    assert by["zz"].counts["extra"] == 5 and not by["zz"].ok()


def test_records_that_are_not_events_are_counted_not_compared(events: list[Event]) -> None:
    log = log_of(events)
    log.add(0, 999, b"not json")
    d = one(compare(log, stored(events)))
    assert log.undecodable == 1 and d.ok(strict=True)
