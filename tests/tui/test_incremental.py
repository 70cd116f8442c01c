"""The cluster view redraws only changed racks, and the racks events touch cover every change."""

from __future__ import annotations

import pytest

from rackplane.projections import evolve
from rackplane.tui import MemorySource
from rackplane.tui._cluster_grid import ClusterGrid
from rackplane.tui._describe import racks_touched
from rackplane.tui._timeline import Timeline
from tests.tui.conftest import SIZE, console, story


@pytest.mark.parametrize("defrag", [True, False], ids=["with-defrag", "without-defrag"])
def test_the_racks_events_touch_include_every_rack_that_changed(defrag: bool) -> None:
    events = list(story(16, defrag))
    t = Timeline(events[0].cluster)
    t.append(events)
    before = t.state_at(1)
    for position in range(2, len(events) + 1):
        after = evolve(before, events[position - 1])
        if position % 16 == 0:  # folded apart or one from the other: the same racks differ
            apart = ClusterGrid._changed(t.state_at(position - 1), t.state_at(position))
            assert apart == ClusterGrid._changed(before, after)
        changed = ClusterGrid._changed(before, after)
        touched = racks_touched(events[position - 1 : position], before, after)
        assert changed <= touched, (position, events[position - 1].type)
        before = after


async def test_one_event_redraws_only_its_rack() -> None:
    events = story()
    app = console(MemorySource(events[:-1]))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.query_one(ClusterGrid)
        last = events[-1]
        assert last.type == "NodeCordoned"
        app.source.push([last])  # type: ignore[attr-defined]
        # The app flushes arrived events every REFRESH_S; on a loaded machine one flush may
        # come late, so wait for the cordon to be on screen rather than for a fixed time.
        for _ in range(200):
            await pilot.pause(0.05)
            if grid.state is not None and grid.state.nodes[last.node].cordoned:  # type: ignore[union-attr]
                break
        assert grid.state is not None and grid.state.nodes[last.node].cordoned  # type: ignore[union-attr]
        assert grid.repainted == 1
