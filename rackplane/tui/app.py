"""The operator console: cluster, jobs, events, alerts and queues views over a timeline, and
actions.

Attributes down, messages up: the app owns the timeline and the shown position, folds the
state there and hands it to the views; the views post what the operator chose. The source
(live broker, history, memory) is injected, and so are the actor, the id factory and the
clock, so tests drive the console with fakes and assert the commands it sends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from time import monotonic
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from rackplane.models import Command, Event, Rejection
from rackplane.policies.quotas import queue_rows
from rackplane.projections import ClusterState
from rackplane.tui._actions import ActionsApp
from rackplane.tui._alerts import AlertSettings, alerts
from rackplane.tui._cluster_grid import ClusterGrid
from rackplane.tui._describe import racks_touched
from rackplane.tui._detail import rack_detail
from rackplane.tui._dialogs import DetailScreen, GotoScreen
from rackplane.tui._jobs import job_rows, lost_gpu_hours
from rackplane.tui._lines import RETRY_S, banner, legend, nothing_notable, summary
from rackplane.tui._queues import QueuesPane, queue_detail
from rackplane.tui._tables import EventsPane, FilterChanged, JobsPane, fill_alerts
from rackplane.tui._timeline import Timeline
from rackplane.tui.sources import Source, SourceError

REFRESH_S = 0.25
"""Live events are batched and shown at 4 Hz."""
MODE_STYLE = {"LIVE": "bold #87d787", "DEMO": "bold #5fd7ff"}
"""The status line's mode at the head; PAUSED and HISTORY are yellow."""
STEP_TIME = timedelta(minutes=10)
TOUCHED_MAX = 256
"""Up to this many new events, the racks to redraw come from the events, not a full diff."""
VIEW_FOCUS = {
    "cluster": "#grid",
    "jobs": "#jobs-table",
    "events": "#events-table",
    "alerts": "#alerts-table",
    "queues": "#queues-table",
}
"""What takes the keys when a view is shown. Textual hands the focus of a widget being hidden
to a sibling that is displayed itself, even inside a hidden pane (the jobs filter), and the
tabs then follow that focus back; with nothing to hand it to (the grid) the focus is lost and
the arrows reach nothing. So the console drops the focus before a switch and gives it to the
shown view's widget after."""


class ConsoleApp(ActionsApp):
    """`rackplane tui`."""

    CSS_PATH = "console.tcss"
    TITLE = "rackplane"
    BINDINGS: ClassVar[list[Binding]] = [  # type: ignore[assignment]
        Binding("1", "view('cluster')", "cluster"),
        Binding("2", "view('jobs')", "jobs"),
        Binding("3", "view('events')", "events"),
        Binding("4", "view('alerts')", "alerts"),
        Binding("5", "view('queues')", "queues"),
        Binding("c", "cordon", "cordon"),
        Binding("u", "uncordon", "uncordon"),
        Binding("f", "rack_fault", "rack fault"),
        Binding("s", "submit", "submit"),
        Binding("x", "cancel_job", "cancel job"),
        Binding("d", "defrag", "defrag"),
        Binding("i", "allow_interactive", "allow interactive"),
        Binding("left_square_bracket", "step(-1)", "-1 event", show=False),
        Binding("right_square_bracket", "step(1)", "+1 event", show=False),
        Binding("left_curly_bracket", "step_time(-1)", "-10 min", show=False),
        Binding("right_curly_bracket", "step_time(1)", "+10 min", show=False),
        Binding("n", "notable(1)", "next failure/swap/preempt"),
        Binding("p", "notable(-1)", "previous", show=False),
        Binding("g", "goto", "go to"),
        Binding("l", "live", "now"),
        Binding("o", "sort", "sort", show=False),
        Binding("q", "quit", "quit"),
    ]

    def __init__(
        self,
        source: Source,
        *,
        actor: str,
        new_id: Callable[[], str] | None = None,
        clock: Callable[[], datetime] | None = None,
        alert_settings: AlertSettings | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.actor = actor
        self.new_id = new_id or (lambda: f"tui-{uuid.uuid4().hex}")
        self.clock = clock or (lambda: datetime.now(UTC))
        self.alert_settings = alert_settings or AlertSettings()
        self.timeline = Timeline(source.cluster) if source.cluster else None
        self.rejections: list[Rejection] = []
        self.position = 0
        self.following = True
        self.interactive_once = False
        self._dirty = False
        self.sent: list[Command] = []
        self.source_error: str | None = None
        """Why the source last failed (shown in the banner until it is tried again)."""
        self._started = monotonic()
        self._banner_shown: tuple[str, str] | None = None

    # -- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        yield Static(id="banner")
        with TabbedContent(initial="cluster", id="views"):
            with TabPane("Cluster", id="cluster"):
                yield Static(id="summary")
                yield Static(legend(), id="legend")
                yield ClusterGrid(id="grid")
            with TabPane("Jobs", id="jobs"):
                yield JobsPane(id="jobs-pane")
            with TabPane("Events", id="events"):
                yield EventsPane(id="events-pane")
            with TabPane("Alerts", id="alerts"):
                table: DataTable[Text | str] = DataTable(cursor_type="row", id="alerts-table")
                table.add_columns("severity", "alert", "subject", "what", "since")
                yield table
            with TabPane("Queues", id="queues"):
                yield QueuesPane(id="queues-pane")
        yield Static(id="scrubber")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(REFRESH_S, self._flush_pending)
        self._started = monotonic()
        self._show_banner()
        self._run_source()
        self.main.query_one(ClusterGrid).focus()

    @work(exclusive=True, group="source")
    async def _run_source(self) -> None:
        """Run the source; when it fails, say why in the banner and try again."""
        while True:
            try:
                await self.source.run(self._events_arrived, self._rejections_arrived)
                return
            except SourceError as err:
                self.source_error = str(err)
                self._show_banner()
            await asyncio.sleep(RETRY_S)
            self.source_error = None
            self._started = monotonic()
            self._show_banner()

    def _events_arrived(self, events: list[Event]) -> None:
        if self.timeline is None:
            if not events:
                return
            self.timeline = Timeline(self.source.cluster or events[0].cluster)
        first = len(self.timeline) == 0
        self.timeline.append(events)
        if self.following:
            self.position = len(self.timeline)
        self._dirty = True
        if first:
            self._flush_pending()

    def _rejections_arrived(self, rejections: list[Rejection]) -> None:
        self.rejections.extend(rejections)
        self._dirty = True

    def _flush_pending(self) -> None:
        if not self.is_running:  # closing: the views are being taken down
            return
        if self._dirty:
            self._dirty = False
            self.refresh_views()
        self._show_banner()

    def _show_banner(self) -> None:
        """A line under the status while the console has nothing true to show: the source out
        of reach (with its reason, which names the address), still connecting, or connected
        without an event; hidden once events arrive."""
        if not self.is_running:
            return
        shown = banner(self.source, self.source_error, self.timeline, monotonic() - self._started)
        if shown == self._banner_shown:
            return
        self._banner_shown = text, style = shown
        widget = self.main.query_one("#banner", Static)
        widget.display = bool(text)
        widget.update(Text(text, style=style))

    # -- showing ------------------------------------------------------------------------------

    @property
    def shown_events(self) -> list[Event]:
        """The events up to the shown position."""
        return self.timeline.events[: self.position] if self.timeline else []

    def refresh_views(self) -> None:
        """Show the state at `position` in every view (the hidden tables when shown)."""
        state = self.state
        if state is None:
            return
        grid = self.main.query_one(ClusterGrid)
        events = self.shown_events
        grid.show(state, self._touched(grid.state, state, events))
        found = alerts(state, events, self.rejections, self.alert_settings)
        self.main.query_one("#summary", Static).update(summary(state, grid, len(found)))
        fill_alerts(self.main.query_one("#alerts-table", DataTable), found)
        tabs = self.main.query_one(TabbedContent)
        tabs.get_tab("alerts").label = f"Alerts ({len(found)})"
        if tabs.active == "jobs":
            self.main.query_one(JobsPane).show(job_rows(state, lost_gpu_hours(events)))
        elif tabs.active == "events":
            self.main.query_one(EventsPane).show(events, state)
        elif tabs.active == "queues":
            self.main.query_one(QueuesPane).show(queue_rows(state), state.cluster)
        self._show_status(state)

    @staticmethod
    def _touched(
        shown: ClusterState | None, state: ClusterState, events: list[Event]
    ) -> set[str] | None:
        """The racks the events since the shown state touched (a short step forward), or None:
        the grid then diffs the whole state."""
        if shown is None or shown.cluster != state.cluster or shown.seq > state.seq:
            return None
        step = state.seq - shown.seq
        if step == 0:
            return set()
        if step > TOUCHED_MAX or len(events) < step or events[-1].seq != state.seq:
            return None
        return racks_touched(events[len(events) - step :], shown, state)

    def _show_status(self, state: ClusterState) -> None:
        total = len(self.timeline) if self.timeline else 0
        mode = (self.source.mode if self.following else "PAUSED") if self.source.live else "HISTORY"
        at = state.at.strftime("%Y-%m-%d %H:%M:%S") if state.at else "-"
        status = Text.assemble(
            (" rackplane ", "bold reverse"),
            f" {state.cluster}  ",
            (f"{mode}", MODE_STYLE.get(mode, "bold #ffd75f")),
            f"  {self.source.description}  actor {self.actor}",
            ("  interactive preemption allowed for the next defrag", "bold #ff9800")
            if self.interactive_once
            else "",
        )
        self.main.query_one("#status", Static).update(status)
        width = 40
        filled = round(width * self.position / total) if total else width
        bar = Text.assemble(
            f" seq {self.position}/{total}  {at}  ",
            ("█" * filled, "#5f87ff"),
            ("░" * (width - filled), "#585858"),
            "  [ ] event  { } 10 min  n/p failure, swap, preemption  g go to  l now",
        )
        self.main.query_one("#scrubber", Static).update(bar)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.refresh_views()
        if event.pane.id in VIEW_FOCUS:
            shown = self.main.query_one(VIEW_FOCUS[event.pane.id])
            shown.focus()
            if isinstance(shown, DataTable):
                # Once the shown pane is laid out (its scrollbars too), bring the cursor row
                # into view: scrolled before, a scrollbar that came after hid the last row.
                self.call_after_refresh(lambda: shown.move_cursor(row=shown.cursor_row))

    def on_filter_changed(self, event: FilterChanged) -> None:
        self.main.query_one(EventsPane).show(self.shown_events, self.state)

    def action_view(self, name: str) -> None:
        tabs = self.main.query_one(TabbedContent)
        if tabs.active != name:
            self.screen.set_focus(None)  # see VIEW_FOCUS
            tabs.active = name

    def action_sort(self) -> None:
        pane = self.main.query_one(JobsPane)
        pane.sort_by((pane.sort_column + 1) % len(pane.rows[0].cells) if pane.rows else 0)

    # -- time travel --------------------------------------------------------------------------

    def travel(self, position: int) -> None:
        """Show the state after the first `position` events."""
        if self.timeline is None:
            return
        self.position = max(0, min(position, len(self.timeline)))
        self.following = self.position == len(self.timeline) and self.source.live
        self.refresh_views()

    def action_step(self, n: int) -> None:
        self.travel(self.position + n)

    def action_step_time(self, n: int) -> None:
        state = self.state
        if self.timeline is None or state is None or state.at is None:
            return
        target = self.timeline.position_at(state.at + n * STEP_TIME)
        if n < 0:
            target = min(target, self.position - 1)
        self.travel(max(target, self.position + 1) if n > 0 else target)

    def action_notable(self, direction: int) -> None:
        """Jump to the next (1) or previous (-1) failure, swap or preemption; say so when
        there is none that way."""
        if self.timeline is None or not len(self.timeline):
            self.notify("no events yet: nothing to jump to", severity="warning")
            return
        find = self.timeline.next_notable if direction > 0 else self.timeline.previous_notable
        found = find(self.position)
        if found is None:
            self.notify(nothing_notable(direction, self.position, self.timeline, self.source),
                        severity="warning")  # fmt: skip
            return
        self.travel(found)
        event = self.timeline.events[found - 1]
        self.notify(f"seq {event.seq}: {event.type}", timeout=3)

    def action_goto(self) -> None:
        self.push_screen(GotoScreen(), self._goto)

    def _goto(self, text: str | None) -> None:
        if not text or self.timeline is None:
            return
        if text.isdigit():
            self.travel(self.timeline.position_of_seq(int(text)))
            return
        try:
            at = datetime.fromisoformat(text)
        except ValueError:
            self.notify(f"{text!r} is neither a seq nor an ISO time", severity="error")
            return
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        self.travel(self.timeline.position_at(at))

    def action_live(self) -> None:
        if self.timeline is not None:
            self.travel(len(self.timeline))

    # -- detail -------------------------------------------------------------------------------

    def on_cluster_grid_node_selected(self, message: ClusterGrid.NodeSelected) -> None:
        state = self.state
        if state is None:
            return
        body = rack_detail(state, message.rack, self.shown_events, message.node)
        self.push_screen(DetailScreen(f"rack {message.rack} (node {message.node})", body))

    def on_queues_pane_queue_selected(self, message: QueuesPane.QueueSelected) -> None:
        state = self.state
        if state is None:
            return
        body = queue_detail(state, message.queue, self.shown_events)
        self.push_screen(DetailScreen(f"queue {message.queue}", body))


def console_css() -> Path:
    """Where the console's styles live (package data)."""
    return Path(__file__).with_name("console.tcss")
