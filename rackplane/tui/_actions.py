"""The console's actions: each asks for confirmation, then sends the command the CLI would send.

A base class of `ConsoleApp` (it holds the key bindings' handlers); the commands themselves are
built in `_commands`, and everything is refused, with the reason, from a read-only history or
while the console shows the past.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from textual import work
from textual.app import App
from textual.notifications import SeverityLevel
from textual.screen import Screen

from rackplane.models import (
    Command,
    CommandIgnored,
    CommandRejected,
    Event,
    JobKind,
    JobStatus,
    RackHealth,
)
from rackplane.projections import ClusterState
from rackplane.tui import _commands as cmd
from rackplane.tui._cluster_grid import ClusterGrid
from rackplane.tui._dialogs import ConfirmScreen, SubmitScreen
from rackplane.tui._tables import JobsPane
from rackplane.tui._timeline import Timeline
from rackplane.tui.sources import Source, SourceError


class ActionsApp(App[None]):
    """Cordon, uncordon, rack fault, submit, cancel, defrag, allow interactive preemption once."""

    source: Source
    actor: str
    new_id: Callable[[], str]
    clock: Callable[[], datetime]
    timeline: Timeline | None
    position: int
    interactive_once: bool
    sent: list[Command]
    refresh_views: Callable[[], None]
    """Show the state at the position (`ConsoleApp` defines it)."""

    @property
    def main(self) -> Screen[Any]:
        """The console's own screen. `App.query_one` looks in the screen on top, which is a
        dialog while one is open: events arriving then must still reach the views."""
        return self.screen_stack[0]

    @property
    def state(self) -> ClusterState | None:
        """The state at the shown position."""
        return self.timeline.state_at(self.position) if self.timeline else None

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
        selected = self.main.query_one(ClusterGrid).selected
        return selected[1] if selected else None

    def _job(self) -> str | None:
        return self.main.query_one(JobsPane).selected_job

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

    def action_rack_fault(self) -> None:
        """Report the selected rack failed (a rack-level fault), or recovered when it is."""
        state, selected = self._actionable(), self.main.query_one(ClusterGrid).selected
        if state is None or selected is None:
            return
        rack, c = selected[0], state.cluster
        r = state.racks[rack]
        if r.healthy:
            assert state.index is not None
            nodes = state.index.rack(rack).nodes
            jobs = sorted({j for n in nodes if (j := state.nodes[n].job) is not None})
            health, title = RackHealth.FAILED, f"Report rack {rack} failed?"
            body = (
                "A rack-level fault (an NVSwitch tray, the power shelf) takes the whole NVLink "
                f"domain: its {len(nodes)} nodes run nothing until the rack is reported "
                f"recovered; the jobs on it ({', '.join(jobs) or 'none'}) are moved or degraded "
                "by the policies. The reason is recorded as the cause."
            )
        else:
            health, title = RackHealth.HEALTHY, f"Report rack {rack} recovered?"
            body = (
                f"The rack-level fault ({r.cause or 'no cause given'}) is over: {rack}'s nodes "
                "may take work again (a node that failed on its own stays failed)."
            )
        self._confirm(
            title,
            body,
            lambda why: [cmd.rack_health(c, self.actor, self.new_id, rack, health, why)],
            reason=True,
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
                queue=f["queue"].strip() or None,
                reservation=f["reservation"].strip() or None,
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
                caused = await self.source.send(command)
            except SourceError as err:
                self.notify(str(err), title=command.type, severity="error", timeout=10)
                return
            self.sent.append(command)
            text, severity = outcome(command, caused)
            self.notify(text, severity=severity, timeout=6 if severity == "error" else 4)
        self.refresh_views()


def outcome(command: Command, caused: Sequence[Event] | None) -> tuple[str, SeverityLevel]:
    """What to tell the operator once a command went: sent (a broker: its events come back
    on the log), or what it did where the source applied it at once (the in-process engine)."""
    if caused is None:
        return f"sent {command.type} {command.id}", "information"
    own = [e for e in caused if getattr(e, "command_id", None) == command.id]
    for e in own:
        if isinstance(e, CommandRejected):
            return f"{command.type} rejected ({e.code}): {e.reason}", "error"
        if isinstance(e, CommandIgnored):
            return f"{command.type}: nothing to do ({e.reason})", "warning"
    if not caused:
        return f"{command.type} {command.id} was already applied", "warning"
    kinds = Counter(e.type for e in caused)
    said = ", ".join(f"{n} {t}" if n > 1 else t for t, n in kinds.items())
    return f"applied {command.type}: {said}", "information"


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
