"""The jobs, events and alerts tables: filterable (and the jobs one sortable) DataTables."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Input

from rackplane.models import Event
from rackplane.projections import ClusterState
from rackplane.tui._alerts import Alert
from rackplane.tui._describe import explain, subjects
from rackplane.tui._jobs import COLUMNS, JobRow

EVENT_ROWS = 500
"""The events view shows the latest this many matching events."""
EVENT_COLOURS = {
    "NodeFailed": "bold #ff5f5f",
    "RackFailed": "bold #ff5f5f",
    "RackDegraded": "bold #ff9800",
    "NodeDegraded": "#ff9800",
    "CommandRejected": "#ff9800",
    "NodeSwapped": "#5fd7ff",
    "SliceMigrated": "#5fd7ff",
    "SliceDegraded": "#5fd7ff",
    "JobPreempted": "#d787ff",
    "DefragPlanned": "#d787ff",
    "JobBlocked": "#ffd75f",
    "JobPlaced": "#87d787",
}


class JobsPane(Vertical):
    """Filter box over the jobs table; a header click (or `o`) sorts by that column."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[JobRow] = []
        self.sort_column = 1
        self.reverse = False

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter jobs: words all must appear (e.g. blocked topology)",
                    id="jobs-filter")  # fmt: skip
        table: DataTable[str] = DataTable(cursor_type="row", zebra_stripes=True, id="jobs-table")
        table.add_columns(*COLUMNS)
        yield table

    @property
    def selected_job(self) -> str | None:
        """The job under the table's cursor."""
        return cursor_key(self.query_one(DataTable))

    def show(self, rows: list[JobRow]) -> None:
        """Replace the rows (kept sorted and filtered; the cursor stays on its job)."""
        self.rows = rows
        self._fill()

    def sort_by(self, column: int) -> None:
        """Sort by `column`; the same column again reverses."""
        self.reverse = not self.reverse if column == self.sort_column else False
        self.sort_column = column
        self._fill()

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        keep = self.selected_job
        words = self.query_one(Input).value.lower().split()
        rows = [r for r in self.rows if r.matches(words)]
        col = self.sort_column
        rows.sort(key=lambda r: (r.keys[col], r.job), reverse=self.reverse)
        table.clear()
        for r in rows:
            table.add_row(*r.cells, key=r.job)
        if keep is not None and any(r.job == keep for r in rows):
            table.move_cursor(row=table.get_row_index(keep))

    def on_input_changed(self, event: Input.Changed) -> None:
        self._fill()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self.sort_by(event.column_index)


def cursor_key(table: DataTable[Text | str] | DataTable[str]) -> str | None:
    """The key of the row under a table's cursor (None when the table is empty)."""
    if table.row_count == 0:
        return None
    return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)


def parse_filter(text: str) -> tuple[dict[str, str], list[str]]:
    """`type=NodeFailed rack=r01 job=x node=y words...` -> fields and free words."""
    fields: dict[str, str] = {}
    words = []
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key in ("type", "rack", "job", "node"):
            fields[key] = value.lower()
        else:
            words.append(token.lower())
    return fields, words


def event_matches(event: Event, state: ClusterState | None, text: str) -> bool:
    """Whether `event` passes the events view's filter (see `parse_filter`)."""
    fields, words = parse_filter(text)
    if not fields and not words:
        return True
    s = subjects(event, state)
    if "type" in fields and fields["type"] not in event.type.lower():
        return False
    for key, values in (("rack", s.racks), ("job", s.jobs), ("node", s.nodes)):
        if key in fields and not any(fields[key] in v.lower() for v in values):
            return False
    if words:
        line = f"{event.type} {s.label()} {explain(event)}".lower()
        return all(w in line for w in words)
    return True


class TailTable(DataTable[Text | str]):
    """The events table: its cursor row (the newest event, unless the operator moved it) is
    brought back into view whenever the room for rows changes: a new size, or the horizontal
    scrollbar coming or going (the explanations are wider than the screen). The cursor was
    scrolled to the newest row before the scrollbar came, which then hid that row (seen about
    one time in four when the events tab was opened, in its snapshot on a loaded machine)."""

    def on_resize(self, event: events.Resize) -> None:
        self._cursor_into_view()

    def watch_show_horizontal_scrollbar(self, shown: bool) -> None:
        self._cursor_into_view()

    def _cursor_into_view(self) -> None:
        if self.row_count:
            self.call_after_refresh(lambda: self.move_cursor(row=self.cursor_row))


class EventsPane(Vertical):
    """The event log tail, up to the shown position, with filters and explanations."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.shown_upto = 0
        self.filter_text = ""

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter: type=NodeFailed rack=r001 job=hero node=n03 or words",
                    id="events-filter")  # fmt: skip
        table = TailTable(cursor_type="row", zebra_stripes=True, id="events-table")
        table.add_columns("seq", "at", "type", "who", "why")
        yield table

    def show(self, events: Sequence[Event], state: ClusterState | None) -> None:
        """Show `events` (the timeline up to the position): append when it only grew."""
        table = self.query_one(DataTable)
        text = self.query_one(Input).value
        grew = text == self.filter_text and len(events) >= self.shown_upto
        start = self.shown_upto if grew else 0
        if not grew:
            table.clear()
            start = (
                max(0, len(events) - 20 * EVENT_ROWS) if text else max(0, len(events) - EVENT_ROWS)
            )
        picked = [e for e in events[start:] if event_matches(e, state, text)][-EVENT_ROWS:]
        for e in picked:
            table.add_row(
                str(e.seq),
                e.at.strftime("%m-%d %H:%M:%S"),
                Text(e.type, style=EVENT_COLOURS.get(e.type, "")),
                subjects(e).label(),
                explain(e),
            )
        while table.row_count > EVENT_ROWS:
            table.remove_row(next(iter(table.rows)))
        self.shown_upto, self.filter_text = len(events), text
        if picked:
            table.move_cursor(row=table.row_count - 1)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(FilterChanged())


class FilterChanged(Message):
    """The events filter changed: the app re-shows the events."""


SEVERITY = {"critical": "bold #ff5f5f", "warning": "#ffd75f"}


def fill_alerts(table: DataTable[Text | str], alerts: list[Alert]) -> None:
    """Replace the alert rows (critical first)."""
    table.clear()
    for a in sorted(alerts, key=lambda a: (a.severity != "critical", a.kind, a.subject)):
        table.add_row(
            Text(a.severity, style=SEVERITY.get(a.severity, "")),
            a.kind,
            a.subject,
            a.message,
            a.at.strftime("%m-%d %H:%M:%S") if a.at else "",
        )
