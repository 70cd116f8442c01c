"""SVG snapshots of each view on the seeded story (update with `pytest --snapshot-update`)."""

from __future__ import annotations

import pytest
from textual.pilot import Pilot

from rackplane.tui import MemorySource
from tests.tui.conftest import SIZE, console, steady, story


@pytest.mark.parametrize(
    "keys",
    [
        pytest.param(("1",), id="cluster"),
        pytest.param(("2",), id="jobs"),
        pytest.param(("3",), id="events"),
        pytest.param(("4",), id="alerts"),
        pytest.param(("down", "enter"), id="rack-detail"),
        pytest.param(("g", "4", "0", "enter", "n"), id="time-travel"),
    ],
)
def test_view_snapshot(snap_compare, keys: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    app = console(MemorySource(story()))

    async def settled(pilot: Pilot[None]) -> None:
        await pilot.press(*keys)
        await steady(pilot)

    assert snap_compare(app, run_before=settled, terminal_size=SIZE)
