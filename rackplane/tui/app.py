"""The operator console: cluster, jobs, events and alerts views over a timeline, and actions.

Attributes down, messages up: the app owns the timeline and the shown position, folds the
state there and hands it to the views; the views post what the operator chose. The source
(live broker, history, memory) is injected, and so are the actor, the id factory and the
clock, so tests drive the console with fakes and assert the commands it sends.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from rackplane.models import Command, Event, JobKind, JobStatus, Rejection
from rackplane.projections import ClusterState
from rackplane.tui import _commands as cmd
from rackplane.tui._alerts import AlertSettings, alerts
from rackplane.tui._cells import LEGEND
from rackplane.tui._cluster_grid import ClusterGrid
from rackplane.tui._detail import rack_detail
from rackplane.tui._dialogs import ConfirmScreen, DetailScreen, GotoScreen, SubmitScreen
from rackplane.tui._jobs import job_rows, lost_gpu_hours
from rackplane.tui._tables import EventsPane, FilterChanged, JobsPane, fill_alerts
from rackplane.tui._timeline import Timeline
from rackplane.tui.sources import Source, SourceError

REFRESH_S = 0.25
"""Live events are batched and shown at 4 Hz."""
STEP_TIME = timedelta(minutes=10)


class ConsoleApp(App[None]):
    """`rackplane tui`."""

    CSS_PATH = "console.tcss"
    TITLE = "rackplane"
    BINDINGS: ClassVar[list[Binding]] = [  # type: ignore[assignment]
        Binding("1", "view('cluster')", "cluster"),
        Binding("2", "view('jobs')", "jobs"),
        Binding("3", "view('events')", "events"),
        Binding("4", "view('alerts')", "alerts"),
        Binding("c", "cordon", "cordon"),
        Binding("u", "uncordon", "uncordon"),
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

    # -- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        with TabbedContent(initial="cluster", id="views"):
            with TabPane("Cluster", id="cluster"):
                yield Static(id="summary")
                yield Static(_legend(), id="legend")
                yield ClusterGrid(id="grid")
            with TabPane("Jobs", id="jobs"):
                yield JobsPane(id="jobs-pane")
            with TabPane("Events", id="events"):
                yield EventsPane(id="events-pane")
            with TabPane("Alerts", id="alerts"):
                table: DataTable[Text | str] = DataTable(cursor_type="row", id="alerts-table")
                table.add_columns("severity", "alert", "subject", "what", "since")
                yield table
        yield Static(id="scrubber")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(REFRESH_S, self._flush)
        self._run_source()
        self.query_one(ClusterGrid).focus()

    @work(exclusive=True, group="source")
    async def _run_source(self) -> None:
        try:
            await self.source.run(self._events_arrived, self._rejections_arrived)
        except SourceError as err:
            self.notify(str(err), title="source", severity="error", timeout=30)

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
            self._flush()

    def _rejections_arrived(self, rejections: list[Rejection]) -> None:
        self.rejections.extend(rejections)
        self._dirty = True

    def _flush(self) -> None:
        if self._dirty:
            self._dirty = False
            self.refresh_views()

    # -- showing ------------------------------------------------------------------------------

    @property
    def state(self) -> ClusterState | None:
        """The state at the shown position."""
        return self.timeline.state_at(self.position) if self.timeline else None

    @property
    def shown_events(self) -> list[Event]:
        """The events up to the shown position."""
        return self.timeline.events[: self.position] if self.timeline else []

    def refresh_views(self) -> None:
        """Show the state at `position` in every view (the hidden tables when shown)."""
        state = self.state
        if state is None:
            return
        grid = self.query_one(ClusterGrid)
        grid.show(state)
        events = self.shown_events
        found = alerts(state, events, self.rejections, self.alert_settings)
        self.query_one("#summary", Static).update(_summary(state, grid, len(found)))
        fill_alerts(self.query_one("#alerts-table", DataTable), found)
        tabs = self.query_one(TabbedContent)
        tabs.get_tab("alerts").label = f"Alerts ({len(found)})"  # type: ignore[assignment]
        if tabs.active == "jobs":
            self.query_one(JobsPane).show(job_rows(state, lost_gpu_hours(events)))
        elif tabs.active == "events":
            self.query_one(EventsPane).show(events, state)
        self._show_status(state)

    def _show_status(self, state: ClusterState) -> None:
        total = len(self.timeline) if self.timeline else 0
        mode = ("LIVE" if self.following else "PAUSED") if self.source.live else "HISTORY"
        at = state.at.strftime("%Y-%m-%d %H:%M:%S") if state.at else "-"
        status = Text.assemble(
            (" rackplane ", "bold reverse"),
            f" {state.cluster}  ",
            (f"{mode}", "bold #87d787" if mode == "LIVE" else "bold #ffd75f"),
            f"  {self.source.description}  actor {self.actor}",
            ("  interactive preemption allowed for the next defrag", "bold #ff9800")
            if self.interactive_once
            else "",
        )
        self.query_one("#status", Static).update(status)
        width = 40
        filled = round(width * self.position / total) if total else width
        bar = Text.assemble(
            f" seq {self.position}/{total}  {at}  ",
            ("█" * filled, "#5f87ff"),
            ("░" * (width - filled), "#585858"),
            "  [ ] event  { } 10 min  n/p failure, swap, preemption  g go to  l now",
        )
        self.query_one("#scrubber", Static).update(bar)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.refresh_views()

    def on_filter_changed(self, event: FilterChanged) -> None:
        self.query_one(EventsPane).show(self.shown_events, self.state)

    def action_view(self, name: str) -> None:
        self.query_one(TabbedContent).active = name

    def action_sort(self) -> None:
        pane = self.query_one(JobsPane)
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
        if self.timeline is None:
            return
        find = self.timeline.next_notable if direction > 0 else self.timeline.previous_notable
        found = find(self.position)
        if found is None:
            self.notify("no failure, swap or preemption that way", severity="warning")
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

    # -- actions ------------------------------------------------------------------------------

    def _actionable(self) -> ClusterState | None:
        """The state actions apply to, or None (and say why) when acting is not possible."""
        state = self.state
        if not self.source.live:
            self.notify(f"{self.source.description} is read-only", severity="error")
            return None
        if self.timeline is None or state is None or not state.registered:
            self.notify("no cluster registered yet", severity="error")
            return None
        if self.position != len(self.timeline):
            self.notify("viewing the past: press l to come back to now first", severity="error")
            return None
        return state

    def _node(self) -> str | None:
        selected = self.query_one(ClusterGrid).selected
        return selected[1] if selected else None

    def _job(self) -> str | None:
        return self.query_one(JobsPane).selected_job

    def _confirm(
        self, title: str, body: str, make: Callable[[str], list[Command]], *, reason: bool = False
    ) -> None:
        def done(answer: str | None) -> None:
            if answer is not None:
                self.send_commands(make(answer))

        self.push_screen(ConfirmScreen(title, body, reason=reason), done)

    def action_cordon(self) -> None:
        state, node = self._actionable(), self._node()
        if state is None or node is None:
            return
        c = state.cluster
        self._confirm(
            f"Cordon {node}?",
            f"No new work goes to {node} (rack {state.nodes[node].rack}); "
            "what runs there keeps running.",
            lambda why: [cmd.cordon(c, self.actor, self.new_id, node, why)],
            reason=True,
        )

    def action_uncordon(self) -> None:
        state, node = self._actionable(), self._node()
        if state is None or node is None:
            return
        if not state.nodes[node].cordoned:
            self.notify(f"{node} is not cordoned", severity="warning")
            return
        c = state.cluster
        self._confirm(
            f"Uncordon {node}?",
            f"{node} may take new work again.",
            lambda _: [cmd.uncordon(c, self.actor, self.new_id, node)],
        )

    def action_cancel_job(self) -> None:
        state, job = self._actionable(), self._job()
        if state is None:
            return
        if job is None or job not in state.jobs:
            self.notify("select a job in the jobs view (2) first", severity="error")
            return
        c = state.cluster
        spec = state.jobs[job].spec
        self._confirm(
            f"Cancel {job}?",
            f"{job} ({spec.nodes} nodes, {spec.kind.value}) stops for good and frees its nodes.",
            lambda why: [cmd.cancel(c, self.actor, self.new_id, job, why)],
            reason=True,
        )

    def action_submit(self) -> None:
        state = self._actionable()
        if state is None:
            return
        c = state.cluster

        def build(f: dict[str, Any]) -> Command:
            return cmd.submit(
                c,
                self.actor,
                self.new_id,
                job=f["job"].strip(),
                nodes=_int(f["nodes"], "nodes"),
                slice_size=_int(f["slice_size"], "slice size") if f["slice_size"].strip() else None,
                kind=JobKind(f["kind"]),
                priority=_int(f["priority"], "priority"),
                checkpoint_minutes=_float(f["checkpoint_minutes"]),
                name=f["name"].strip(),
            )

        def done(command: Command | None) -> None:
            if command is not None:
                self.send_commands([command])

        self.push_screen(SubmitScreen(build), done)

    def action_allow_interactive(self) -> None:
        if self._actionable() is None:
            return

        def done(answer: str | None) -> None:
            if answer is not None:
                self.interactive_once = True
                self.refresh_views()

        self.push_screen(
            ConfirmScreen(
                "Allow interactive preemption for the next defrag?",
                "The next defrag you trigger (d) may preempt interactive jobs (dev "
                f"environments); the preemption carries your consent as {self.actor}. It "
                "applies to that one defrag only.",
            ),
            done,
        )

    def action_defrag(self) -> None:
        state, job = self._actionable(), self._job()
        if state is None:
            return
        if job is None or job not in state.jobs or state.jobs[job].status is not JobStatus.QUEUED:
            self.notify(
                "select a queued (blocked) job in the jobs view (2) first", severity="error"
            )
            return
        interactive = self.interactive_once
        plan = cmd.defrag_plan(
            state, job, now=max(self.clock(), state.at or self.clock()), actor=self.actor,
            allow_interactive=interactive,
        )  # fmt: skip
        if plan is None:
            self.notify(f"no defrag plan frees rack-shaped room for {job}", severity="warning")
            return
        commands = cmd.defrag_commands(state, plan, self.actor, self.new_id)

        def make(_: str) -> list[Command]:
            self.interactive_once = False if interactive else self.interactive_once
            return commands

        victims = ", ".join(plan.victims) or "none"
        self._confirm(
            f"Defrag for {job}?",
            f"Preempt {victims} ({plan.cost:.2f} GPU-h) and place {job} on "
            f"{', '.join(plan.target_racks)}.\n{plan.explanation}",
            make,
        )

    def send_commands(self, commands: list[Command]) -> None:
        """Send commands through the source, in order (a worker: the UI stays live)."""
        self._send(commands)

    @work(group="send")
    async def _send(self, commands: list[Command]) -> None:
        for command in commands:
            try:
                await self.source.send(command)
            except SourceError as err:
                self.notify(str(err), title=command.type, severity="error", timeout=10)
                return
            self.sent.append(command)
            self.notify(f"sent {command.type} {command.id}", timeout=4)
        self.refresh_views()


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a whole number") from None


def _float(text: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"checkpoint minutes: {text!r} is not a number") from None


def _legend() -> Text:
    parts: list[tuple[str, Any] | str] = [" "]
    for label, style, glyph in LEGEND:
        parts += [(glyph, style), f" {label}   "]
    parts.append("   counters: f free  a allocated  s spares left   enter: rack detail")
    return Text.assemble(*parts)


def _summary(state: ClusterState, grid: ClusterGrid, n_alerts: int) -> Text:
    t = grid.totals()
    statuses = dict.fromkeys(JobStatus, 0)
    blocked = 0
    for j in state.jobs.values():
        statuses[j.status] += 1
        blocked += j.status is JobStatus.QUEUED and j.blocked is not None
    gpus = state.index.topology.gpu_count if state.index else 0
    return Text.assemble(
        (f" {len(grid.racks)} racks", "bold"),
        f"  {gpus:,} GPUs   nodes: allocated {t.allocated:,}  free {t.free:,}  "
        f"spares {t.spares:,}  ",
        (f"failed {t.failed}", "bold #ff5f5f" if t.failed else ""),
        "  racks out of spares ",
        (str(t.racks_out_of_spares), "bold #ff5f5f" if t.racks_out_of_spares else ""),
        f"   jobs: running {statuses[JobStatus.RUNNING]}  placed {statuses[JobStatus.PLACED]}  "
        f"queued {statuses[JobStatus.QUEUED]} (blocked {blocked})  finished {len(state.finished)}",
        (f"   alerts {n_alerts}", "bold #ffd75f" if n_alerts else ""),
    )


def console_css() -> Path:
    """Where the console's styles live (package data)."""
    return Path(__file__).with_name("console.tcss")
