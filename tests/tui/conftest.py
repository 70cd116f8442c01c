"""The console's fixtures: a seeded story (built once with the in-process engine) and apps on it."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any

import pytest
from textual.pilot import Pilot

from rackplane.models import Event
from rackplane.tui import ConsoleApp, MemorySource

ACTOR = "operator:tester"
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
SIZE = (200, 60)


@cache
def story(racks: int = 16, defrag: bool = True) -> tuple[Event, ...]:
    """The sample story's events (cached: each costs about a second)."""
    from rackplane.tui.sample import sample_events

    return tuple(sample_events(racks, defrag=defrag))


def console(source: MemorySource) -> ConsoleApp:
    """An app with a fixed actor, ids (t-1, t-2, ...) and clock."""
    ids = itertools.count(1)
    return ConsoleApp(source, actor=ACTOR, new_id=lambda: f"t-{next(ids)}", clock=lambda: NOW)


async def steady(pilot: Pilot[Any], *, rounds: int = 3, limit: int = 200) -> None:
    """Pause until the screen shows the same thing `rounds` times in a row: the keys pressed,
    and what they scheduled after the next refreshes (a cursor row scrolled into view once
    the pane is laid out), are all on it. A fixed number of pauses was not enough on a loaded
    machine: the events view's snapshot was taken before its scroll to the newest row."""
    last, same = None, 0
    for _ in range(limit):
        await pilot.pause(0.02)
        await pilot.wait_for_scheduled_animations()
        shot = pilot.app.export_screenshot()
        same = same + 1 if shot == last else 0
        if same >= rounds:
            return
        last = shot
    raise AssertionError(f"the screen still changed after {limit} pauses")


@pytest.fixture
def make_app() -> Callable[..., tuple[ConsoleApp, MemorySource]]:
    def make(
        racks: int = 16, *, defrag: bool = True, live: bool = True
    ) -> tuple[ConsoleApp, MemorySource]:
        source = MemorySource(story(racks, defrag), live=live)
        return console(source), source

    return make
