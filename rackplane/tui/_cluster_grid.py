"""The cluster grid: every rack as a row of node cells, in as many columns as the width allows.

A Line API widget: it renders only the visible lines, from a cache of one rendered row per
rack. `show(state)` diffs the new state against the one on screen (node by node, by identity:
the state shares every unchanged node) and re-renders and repaints only the racks that changed,
which is what keeps a refresh after one event cheap on 1,024 racks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.segment import Segment
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from rackplane.projections import ClusterState
from rackplane.tui._cells import (
    CELL,
    CURSOR,
    LABEL_SEGMENTS,
    RackRow,
    RowLayout,
    layout_of,
    render_rack,
)

GAP = 2


@dataclass(frozen=True, slots=True)
class Totals:
    """Counters summed over every rack row."""

    free: int
    allocated: int
    spares: int
    failed: int
    racks_out_of_spares: int


class ClusterGrid(ScrollView, can_focus=True):
    """Racks in columns (column-major: r0, r1, ... down the first column, then the next)."""

    BINDINGS = [  # noqa: RUF012
        Binding("up", "move(-1, 0)", "rack up", show=False),
        Binding("down", "move(1, 0)", "rack down", show=False),
        Binding("left", "move(0, -1)", "node left", show=False),
        Binding("right", "move(0, 1)", "node right", show=False),
        Binding("enter", "select", "detail"),
    ]

    class NodeSelected(Message):
        """The operator chose a node (enter or click): open its rack's detail."""

        def __init__(self, rack: str, node: str) -> None:
            self.rack = rack
            self.node = node
            super().__init__()

    class CursorMoved(Message):
        """The cursor is on another node."""

        def __init__(self, rack: str, node: str) -> None:
            self.rack = rack
            self.node = node
            super().__init__()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: ClusterState | None = None
        self.racks: list[str] = []
        self.rows: dict[str, RackRow] = {}
        self.layout_: RowLayout = RowLayout(4, 3, 18)
        self.columns = 1
        self.lines = 0
        self.cursor = (0, 0)
        self.repainted = 0
        """Racks re-rendered by the last `show` (for tests and the benchmark)."""

    # -- data ---------------------------------------------------------------------------------

    def show(self, state: ClusterState, touched: Iterable[str] | None = None) -> None:
        """Put `state` on screen, re-rendering only the racks that changed: those in `touched`
        when given (the racks the events since the shown state touched), else found by a diff
        of the whole state."""
        old = self.state
        self.state = state
        if state.index is None:
            self.racks, self.rows = [], {}
            self._relayout()
            self.refresh()
            return
        racks = [r.id for r in state.index.racks]
        if old is None or racks != self.racks or old.index is not state.index:
            self.racks = racks
            self.layout_ = layout_of(state)
            self.rows = {r: render_rack(state, r, self.layout_) for r in racks}
            self.repainted = len(racks)
            self._relayout()
            self.refresh()
            return
        if old.settings is not state.settings:
            changed = set(racks)  # spares per rack: every rack's roles may change
        elif touched is not None:
            changed = set(touched).intersection(self.rows)
        else:
            changed = self._changed(old, state)
        for rack in changed:
            self.rows[rack] = render_rack(state, rack, self.layout_)
            self.refresh_line(self._line_of(self.racks.index(rack)))
        self.repainted = len(changed)

    @staticmethod
    def _changed(old: ClusterState, new: ClusterState) -> set[str]:
        """Racks with a node, rack state or reservation that differs (identity first: a state
        folded from the other shares every unchanged object)."""
        changed = set()
        if old.nodes is not new.nodes:
            old_nodes = old.nodes
            for n, ns in new.nodes.items():
                o = old_nodes.get(n)
                if o is not ns and o != ns:  # states folded apart share no objects
                    changed.add(ns.rack)
        if old.racks is not new.racks:
            old_racks = old.racks
            changed.update(
                r for r, rs in new.racks.items() if (q := old_racks.get(r)) is not rs and q != rs
            )
        if old.reservations is not new.reservations:
            held = {*old.reservations.keys(), *new.reservations.keys()}
            changed.update(r for r in held if old.reservations.get(r) != new.reservations.get(r))
        # A job's borrowing flag colours its cells: only placements change it, and those change
        # nodes too; nothing more to look at.
        return changed

    def totals(self) -> Totals:
        """Counters of every rack, from the cached rows."""
        rows = self.rows.values()
        return Totals(
            free=sum(r.counts.free for r in rows),
            allocated=sum(r.counts.allocated for r in rows),
            spares=sum(r.counts.spares for r in rows),
            failed=sum(r.counts.failed for r in rows),
            racks_out_of_spares=sum(1 for r in rows if r.counts.spares == 0 and r.counts.allocated),
        )

    @property
    def selected(self) -> tuple[str, str] | None:
        """(rack, node) under the cursor."""
        if not self.racks:
            return None
        i, j = self.cursor
        row = self.rows[self.racks[i]]
        return row.rack, row.nodes[min(j, len(row.nodes) - 1)]

    def select(self, rack: str, node: str | None = None) -> None:
        """Move the cursor to a rack (and node)."""
        if rack not in self.rows:
            return
        i = self.racks.index(rack)
        nodes = self.rows[rack].nodes
        j = nodes.index(node) if node in nodes else 0
        self._set_cursor(i, j)

    # -- geometry -----------------------------------------------------------------------------

    def _column_width(self) -> int:
        return self.layout_.width + GAP

    def _relayout(self) -> None:
        width = max(self.size.width, 1)
        self.columns = max(1, min(len(self.racks) or 1, width // self._column_width()))
        self.lines = -(-len(self.racks) // self.columns) if self.racks else 0
        self.virtual_size = Size(self.columns * self._column_width(), self.lines)

    def _line_of(self, index: int) -> int:
        return index % self.lines if self.lines else 0

    def on_resize(self, event: events.Resize) -> None:
        self._relayout()
        self.refresh()

    # -- rendering ----------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        line = y + self.scroll_offset.y
        if line >= self.lines:
            return Strip.blank(self.size.width)
        segs: list[Segment] = []
        width = self._column_width()
        for col in range(self.columns):
            index = col * self.lines + line
            if index >= len(self.racks):
                break
            row = self.rows[self.racks[index]]
            if index == self.cursor[0]:
                segs += self._with_cursor(row, self.cursor[1])
            else:
                segs += row.segments
            segs.append(Segment(" " * (width - self.layout_.width)))
        strip = Strip(segs, self.columns * width)
        return strip.crop_extend(self.scroll_offset.x, self.scroll_offset.x + self.size.width, None)

    @staticmethod
    def _with_cursor(row: RackRow, node: int) -> list[Segment]:
        out = list(row.segments)
        k = LABEL_SEGMENTS + min(node, len(row.nodes) - 1)
        text, style, _ = out[k]
        out[k] = Segment(text, (style + CURSOR) if style else CURSOR)
        return out

    # -- interaction --------------------------------------------------------------------------

    def _set_cursor(self, i: int, j: int) -> None:
        if not self.racks:
            return
        before = self.cursor
        i = max(0, min(i, len(self.racks) - 1))
        j = max(0, min(j, len(self.rows[self.racks[i]].nodes) - 1))
        self.cursor = (i, j)
        self.refresh_line(self._line_of(before[0]))
        self.refresh_line(self._line_of(i))
        line, col = self._line_of(i), i // self.lines
        self.scroll_to_region(self._region(col, line), animate=False, immediate=True, force=True)
        sel = self.selected
        if sel is not None:
            self.post_message(self.CursorMoved(*sel))

    def _region(self, col: int, line: int):  # type: ignore[no-untyped-def]
        from textual.geometry import Region

        return Region(col * self._column_width(), line, self._column_width(), 1)

    def action_move(self, di: int, dj: int) -> None:
        i, j = self.cursor
        self._set_cursor(i + di, j + dj)

    def action_select(self) -> None:
        sel = self.selected
        if sel is not None:
            self.post_message(self.NodeSelected(*sel))

    def on_click(self, event: events.Click) -> None:
        x = event.x + self.scroll_offset.x
        line = event.y + self.scroll_offset.y
        col, within = divmod(x, self._column_width())
        index = col * self.lines + line
        if line >= self.lines or index >= len(self.racks):
            return
        node = max(0, (within - self.layout_.cells_at) // CELL)
        self._set_cursor(index, node)
        self.action_select()
