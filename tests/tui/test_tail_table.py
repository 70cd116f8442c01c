"""The events table keeps its cursor row in view when the room for rows changes."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import DataTable

from rackplane.tui._tables import TailTable
from tests.tui.conftest import steady


class OneTable(App[None]):
    def __init__(self, table: DataTable[str]) -> None:
        super().__init__()
        self.table = table

    def compose(self) -> ComposeResult:
        yield self.table


def newest_row_shown(table: DataTable[str]) -> bool:
    return table.scroll_y >= table.max_scroll_y


async def scrolled_then_widened(table: DataTable[str]) -> bool:
    """Rows that fit the width, the cursor on the newest; then one row's cell grows wider than
    the screen, so a horizontal scrollbar takes a line of the view: is the newest row shown?"""
    app = OneTable(table)
    async with app.run_test(size=(60, 20)) as pilot:
        keys = table.add_columns("seq", "why")
        rows = [table.add_row(str(i), "short") for i in range(40)]
        table.move_cursor(row=table.row_count - 1)
        await steady(pilot)
        assert newest_row_shown(table) and not table.show_horizontal_scrollbar
        table.update_cell(rows[0], keys[1], "a very long explanation " * 8, update_width=True)
        await steady(pilot)
        assert table.show_horizontal_scrollbar
        return newest_row_shown(table)


async def test_a_scrollbar_that_comes_after_the_scroll_does_not_hide_the_newest_row() -> None:
    assert await scrolled_then_widened(TailTable(cursor_type="row"))
    # What it fixes: a plain table keeps its scroll, and the scrollbar covers the newest row.
    assert not await scrolled_then_widened(DataTable(cursor_type="row"))
