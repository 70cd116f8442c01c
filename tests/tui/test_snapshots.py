"""SVG snapshots of each view on the seeded story (update with `pytest --snapshot-update`)."""

from __future__ import annotations

import pytest

from rackplane.tui import MemorySource
from tests.tui.conftest import SIZE, console, story


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
    assert snap_compare(app, press=keys, terminal_size=SIZE)
