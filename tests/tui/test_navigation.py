"""Pilot tests: views, the cluster grid's cursor and detail, time travel."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input, TabbedContent

from rackplane.tui._cluster_grid import ClusterGrid
from rackplane.tui._dialogs import DetailScreen, GotoScreen
from rackplane.tui.app import STEP_TIME, VIEW_FOCUS, ConsoleApp
from tests.tui.conftest import SIZE, console, story


async def test_number_keys_switch_between_the_four_views(make_app) -> None:  # type: ignore[no-untyped-def]
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        tabs = app.query_one(TabbedContent)
        assert tabs.active == "cluster"
        for key, view in (("2", "jobs"), ("3", "events"), ("4", "alerts"), ("1", "cluster")):
            await pilot.press(key)
            await pilot.pause()
            assert tabs.active == view
        await pilot.press("2")
        await pilot.pause()
        jobs = app.query_one("#jobs-table", DataTable)
        assert jobs.row_count == len(app.timeline.head.jobs)  # type: ignore[union-attr]


async def test_arrows_move_the_cursor_and_enter_opens_the_rack_detail(make_app) -> None:  # type: ignore[no-untyped-def]
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.query_one(ClusterGrid)
        assert grid.selected == ("r000", "r000n00")
        await pilot.press("down", "down", "right", "right", "right")
        assert grid.selected == ("r002", "r002n03")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        assert app.screen.title_ == "rack r002 (node r002n03)"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen)


async def test_after_switching_views_and_back_the_arrows_and_enter_drive_the_grid(make_app) -> None:  # type: ignore[no-untyped-def]
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        tabs = app.query_one(TabbedContent)
        grid = app.query_one(ClusterGrid)
        trip = ("2", "jobs"), ("3", "events"), ("4", "alerts"), ("2", "jobs"), ("1", "cluster")
        for key, view in (*trip, ("3", "events"), ("1", "cluster")):
            await pilot.press(key)
            await pilot.pause()
            assert tabs.active == view
            assert app.focused is app.query_one(VIEW_FOCUS[view]), (key, app.focused)
        await pilot.press("down", "down", "right")
        assert grid.selected == ("r002", "r002n01")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        assert app.screen.title_ == "rack r002 (node r002n01)"
        await pilot.press("escape")
        await pilot.pause()
        # A tab clicked with the mouse hands the keys to its view too, and back again.
        await pilot.click("#--content-tab-jobs")
        await pilot.pause()
        jobs = app.query_one("#jobs-table", DataTable)
        assert tabs.active == "jobs" and app.focused is jobs
        await pilot.press("down")
        assert jobs.cursor_row == 1
        await pilot.press("1")
        await pilot.pause()
        await pilot.press("up")
        assert app.focused is grid and grid.selected == ("r001", "r001n01")


async def test_clicking_a_node_cell_selects_it(make_app) -> None:  # type: ignore[no-untyped-def]
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.query_one(ClusterGrid)
        x = grid.layout_.cells_at + 2 * 4  # the fifth node of the first rack row
        await pilot.click(ClusterGrid, offset=(x, 1))
        await pilot.pause()
        assert grid.selected == ("r001", "r001n04")
        assert isinstance(app.screen, DetailScreen)


def _registered(racks: int) -> list:  # type: ignore[type-arg]
    """Just the registration of `racks` racks of 18 nodes (layout needs nothing more)."""
    from rackplane.engine import Engine
    from rackplane.models import RegisterTopology
    from rackplane.tui.sample import sample_topology
    from tests.tui.conftest import NOW

    topology = sample_topology(racks)
    engine = Engine(topology.cluster, clock=lambda: NOW)
    return engine.handle(RegisterTopology(id="r", cluster=topology.cluster, actor="op",
                                          topology=topology))  # fmt: skip


@pytest.mark.parametrize(("racks", "scrolls"), [(128, False), (1024, True)])
async def test_128_racks_of_18_fit_a_200x60_terminal_and_1024_scroll(
    racks: int, scrolls: bool
) -> None:
    from rackplane.tui import MemorySource

    app = console(MemorySource(_registered(racks)))
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        grid = app.query_one(ClusterGrid)
        assert len(grid.racks) == racks and grid.columns == 3
        assert grid.virtual_size.width <= grid.size.width
        assert (grid.lines > grid.size.height) is scrolls
        assert (grid.max_scroll_y > 0) is scrolls
        if scrolls:  # the cursor keeps the selected rack in view
            grid.select(grid.racks[racks // 3 - 1])
            await pilot.pause()
            assert grid.scroll_offset.y > 0


async def test_the_scrubber_steps_jumps_and_comes_back_to_now(make_app) -> None:  # type: ignore[no-untyped-def]
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        t = app.timeline
        assert t is not None and app.position == len(t)
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GotoScreen)
        await pilot.press(*"10", "enter")
        await pilot.pause()
        assert app.position == 10 and not app.following
        assert app.state is not None and app.state.seq == 10
        await pilot.press("n")
        await pilot.pause()
        assert t.events[app.position - 1].type in {"NodeFailed", "NodeDegraded", "RackFailed"}
        failed_at = app.position
        await pilot.press("right_square_bracket", "right_square_bracket", "left_square_bracket")
        await pilot.pause()
        assert app.position == failed_at + 1
        await pilot.press("p")
        await pilot.pause()
        assert app.position < failed_at + 1
        await pilot.press("l")
        await pilot.pause()
        assert app.position == len(t) and app.following


async def test_every_view_shows_the_state_at_the_scrubbed_position(make_app) -> None:  # type: ignore[no-untyped-def]
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.travel(5)
        await pilot.press("3")
        await pilot.pause()
        events = app.query_one("#events-table", DataTable)
        assert events.row_count == 5
        await pilot.press("2")
        await pilot.pause()
        jobs = app.query_one("#jobs-table", DataTable)
        assert jobs.row_count == len(app.timeline.state_at(5).jobs)  # type: ignore[union-attr]
        grid = app.query_one(ClusterGrid)
        assert grid.state is app.state or grid.state.seq == 5  # type: ignore[union-attr]


async def test_the_events_filter_keeps_only_matching_events(make_app) -> None:  # type: ignore[no-untyped-def]
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("3")
        await pilot.pause()
        app.query_one("#events-filter", Input).value = "type=NodeFailed"
        await pilot.pause()
        table = app.query_one("#events-table", DataTable)
        want = sum(1 for e in app.timeline.events if e.type == "NodeFailed")  # type: ignore[union-attr]
        assert table.row_count == want > 0
        assert {str(table.get_row_at(i)[2]) for i in range(table.row_count)} == {"NodeFailed"}


async def test_live_events_reach_the_views(make_app) -> None:  # type: ignore[no-untyped-def]
    events = story()
    app: ConsoleApp
    app, source = make_app()
    source.events = list(events[:50])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.position == 50
        source.push(events[50:60])
        grid = app.query_one(ClusterGrid)
        for _ in range(200):  # the views are flushed every REFRESH_S, late on a loaded machine
            await pilot.pause(0.05)
            if app.position == 60 and grid.state is not None and grid.state.seq == 60:
                break
        assert app.position == 60
        assert app.query_one(ClusterGrid).state.seq == 60  # type: ignore[union-attr]


async def test_jobs_sort_by_a_header_and_filter_by_words(make_app) -> None:  # type: ignore[no-untyped-def]
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        table = app.query_one("#jobs-table", DataTable)
        pane = app.query_one("#jobs-pane")
        pane.sort_by(4)  # nodes, largest first
        await pilot.pause()
        nodes = [int(table.get_row_at(i)[4]) for i in range(table.row_count)]
        assert nodes == sorted(nodes, reverse=True)
        pane.sort_by(4)  # again: reversed
        await pilot.pause()
        nodes = [int(table.get_row_at(i)[4]) for i in range(table.row_count)]
        assert nodes == sorted(nodes)
        app.query_one("#jobs-filter", Input).value = "blocked topology"
        await pilot.pause()
        assert [table.get_row_at(i)[0] for i in range(table.row_count)] == ["wait-32"]


async def test_the_scrubber_travels_by_time(make_app) -> None:  # type: ignore[no-untyped-def]
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        t = app.timeline
        at = t.events[60].at
        await pilot.press("g")
        await pilot.pause()
        await pilot.press(*at.isoformat(), "enter")
        await pilot.pause()
        assert app.position == t.position_at(at)
        assert app.state.at == at
        await pilot.press("right_curly_bracket")
        await pilot.pause()
        assert app.state.at <= at + STEP_TIME < t.events[app.position].at
        await pilot.press("g")
        await pilot.pause()
        await pilot.press(*"yesterday", "enter")
        await pilot.pause()
        assert app.position == t.position_at(at + STEP_TIME)  # a bad answer changes nothing


async def test_n_and_p_say_so_when_no_failure_swap_or_preemption_lies_that_way(make_app) -> None:  # type: ignore[no-untyped-def]
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        head = len(app.timeline)  # type: ignore[arg-type]
        await pilot.press("n")  # LIVE, at the head
        await pilot.pause()
        assert app.position == head and app.following
        said = [n.message for n in app._notifications]
        assert said == [
            f"no failure, swap or preemption after seq {head}: this is now (LIVE): "
            "the next one shows as it happens; p jumps back"
        ]
        app.travel(1)
        await pilot.press("p")
        await pilot.pause()
        assert app.position == 1
        assert [n.message for n in app._notifications][-1] == (
            "no failure, swap or preemption before seq 1"
        )
    from rackplane.tui import MemorySource

    empty = console(MemorySource([], cluster="c1"))
    async with empty.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("p")
        await pilot.pause()
        assert [n.message for n in empty._notifications] == ["no events yet: nothing to jump to"]
