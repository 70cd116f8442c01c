"""The timeline folds any event list: state at any position, jumps to notable events."""

from __future__ import annotations

from datetime import timedelta

from rackplane.projections import fold, initial_state, state_digest
from rackplane.tui._timeline import CHECKPOINT_EVERY, Timeline
from tests.tui.conftest import story


def test_state_at_any_position_equals_folding_that_prefix() -> None:
    events = list(story())
    t = Timeline(events[0].cluster)
    t.append(events)
    assert len(events) > CHECKPOINT_EVERY // 2
    for position in (0, 1, 17, len(events) // 2, len(events) - 1, len(events)):
        want = fold(initial_state(t.cluster), events[:position])
        assert state_digest(t.state_at(position)) == state_digest(want)


def test_redelivered_and_foreign_events_are_skipped() -> None:
    events = list(story())
    t = Timeline(events[0].cluster)
    t.append(events[:10])
    applied = t.append(events[5:12])
    assert [e.seq for e in applied] == [11, 12]
    assert t.skipped == 5
    assert Timeline("other").append(events[:3]) == []


def test_jumps_stop_at_failures_swaps_and_preemptions() -> None:
    events = list(story())
    t = Timeline(events[0].cluster)
    t.append(events)
    first = t.next_notable(0)
    assert first is not None
    assert events[first - 1].type in {"NodeFailed", "NodeDegraded", "RackFailed"}
    assert all(
        e.type not in {"NodeFailed", "NodeSwapped", "JobPreempted"} for e in events[: first - 1]
    )
    second = t.next_notable(first)
    assert second is not None and second > first
    assert t.previous_notable(second) == first
    assert t.next_notable(len(events)) is None


def test_position_at_a_time_is_after_the_last_event_by_then() -> None:
    events = list(story())
    t = Timeline(events[0].cluster)
    t.append(events)
    at = events[40].at
    pos = t.position_at(at)
    assert events[pos - 1].at <= at
    assert pos == len(events) or events[pos].at > at
    assert t.position_at(events[0].at - timedelta(hours=1)) == 0
