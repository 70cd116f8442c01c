"""The console's cluster view: the cost of showing one new event on 128 and 1,024 racks.

One step = what the console does when an event arrives (the event is made beforehand by
`decide`, as the controller would): fold it (`evolve`), diff the new state
against the one on screen and re-render the racks that changed (`ClusterGrid.show`), then
render every visible line of the grid as the compositor would (`render_lines`), in a headless
200x60 app on a fragmented cluster. The events alternate cordoning and uncordoning a random
node. The racks to redraw come from the event (`racks_touched`, the live tail's path); the
`diff_` columns take the whole-state diff instead (the path of a long jump in time). For
contrast, a full re-render of every rack row (what a non-incremental view would do).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from textual.app import App, ComposeResult
from textual.geometry import Region

from bench._clusters import T0, cluster
from bench.placement import pct
from rackplane.models import CordonNode, Event, UncordonNode
from rackplane.policies import decide
from rackplane.projections import ClusterState, evolve
from rackplane.tui._cells import render_rack
from rackplane.tui._cluster_grid import ClusterGrid
from rackplane.tui._describe import racks_touched

Progress = Callable[[str], None]


class _GridApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ClusterGrid(id="grid")


def _next_events(state: ClusterState, node: str, n: str) -> list[Event]:
    make = UncordonNode if state.nodes[node].cordoned else CordonNode
    command = make(id=f"b{n}", cluster=state.cluster, actor="bench", node=node)
    return decide(state, command, now=(state.at or T0) + timedelta(seconds=1))


async def _measure(racks: int, steps: int) -> dict[str, Any]:
    state = cluster(racks, "fragmented")
    rng = random.Random(racks)
    app = _GridApp()
    async with app.run_test(size=(200, 60)) as pilot:
        grid = app.query_one(ClusterGrid)
        grid.show(state)
        await pilot.pause()
        region = Region(0, 0, grid.size.width, grid.size.height)
        incremental, diffed, full, repainted = [], [], [], []
        nodes = sorted(state.nodes)
        for n in range(steps):
            events = _next_events(state, rng.choice(nodes), f"{n}e")  # the event arrives
            t = time.perf_counter()
            before = state
            for event in events:
                state = evolve(state, event)
            grid.show(state, racks_touched(events, before, state))
            grid.render_lines(region)
            incremental.append((time.perf_counter() - t) * 1e3)
            repainted.append(grid.repainted)
            # The same step through the whole-state diff (scrubbing far, or no events at hand).
            events = _next_events(state, rng.choice(nodes), f"{n}d")
            t = time.perf_counter()
            for event in events:
                state = evolve(state, event)
            grid.show(state)
            grid.render_lines(region)
            diffed.append((time.perf_counter() - t) * 1e3)
            assert events and grid.repainted == 1, "each step is one event on one rack"
            t = time.perf_counter()
            for rack in grid.racks:
                render_rack(state, rack, grid.layout_)
            full.append((time.perf_counter() - t) * 1e3)
            await pilot.pause()
        visible = min(racks, grid.columns * grid.size.height)
    return {
        "racks": racks,
        "nodes": len(state.nodes),
        "visible_racks": visible,
        "racks_rerendered": statistics.median(repainted),
        "p50_ms": statistics.median(incremental),
        "p99_ms": pct(incremental, 0.99),
        "max_ms": max(incremental),
        "diff_p50_ms": statistics.median(diffed),
        "diff_p99_ms": pct(diffed, 0.99),
        "full_rerender_p50_ms": statistics.median(full),
    }


def refresh_after_event(
    racks: tuple[int, ...], steps: int, progress: Progress
) -> list[dict[str, Any]]:
    """p50/p99 of one event's refresh of the cluster view per cluster size."""
    rows = []
    for r in racks:
        progress(f"tui: cluster view refresh on {r} racks")
        rows.append(asyncio.run(_measure(r, steps)))
    return rows
