"""Modal dialogs: confirm an action (with an optional reason), the submit form, go-to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from rackplane.models import JobKind


class ConfirmScreen(ModalScreen[str | None]):
    """Ask before acting. Dismisses with the reason typed ("" when none) or None (cancelled)."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]  # noqa: RUF012

    def __init__(self, title: str, body: str, *, reason: bool = False) -> None:
        super().__init__()
        self.title_ = title
        self.body = body
        self.with_reason = reason

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_, classes="dialog-title")
            yield Static(self.body, classes="dialog-body", markup=False)
            if self.with_reason:
                yield Input(placeholder="reason (optional)", id="reason")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Confirm", variant="error", id="confirm")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#reason" if self.with_reason else "#confirm").focus()

    def _reason(self) -> str:
        return self.query_one("#reason", Input).value.strip() if self.with_reason else ""

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(self._reason())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(self._reason() if event.button.id == "confirm" else None)

    def action_cancel(self) -> None:
        self.dismiss(None)


SUBMIT_FIELDS = (
    ("job", "job id", ""),
    ("nodes", "nodes", "16"),
    ("slice_size", "nodes per slice (empty: cluster default)", ""),
    ("priority", "priority", "0"),
    ("checkpoint_minutes", "checkpoint every (minutes, empty: none)", "30"),
    ("name", "name", ""),
    ("queue", "queue (empty: cluster default)", ""),
    ("reservation", "reservation (empty: none)", ""),
)


class SubmitScreen(ModalScreen[Any]):
    """The submit form. `build(fields)` turns the fields into a command or raises ValueError
    (shown in the form; nothing is sent); the screen dismisses with the command or None."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]  # noqa: RUF012

    def __init__(self, build: Callable[[dict[str, Any]], Any]) -> None:
        super().__init__()
        self.build = build

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Submit a job", classes="dialog-title")
            with Grid(classes="form"):
                for key, label, default in SUBMIT_FIELDS:
                    yield Label(label)
                    yield Input(value=default, id=f"f-{key}")
                yield Label("kind")
                yield Select(
                    [(k.value, k.value) for k in JobKind],
                    value=JobKind.MANAGED.value,
                    allow_blank=False,
                    id="f-kind",
                )
            yield Static("", id="form-error", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Submit", variant="primary", id="confirm")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#f-job", Input).focus()

    def fields(self) -> dict[str, Any]:
        """The raw form, as typed."""
        out: dict[str, Any] = {
            k: self.query_one(f"#f-{k}", Input).value for k, _, _ in SUBMIT_FIELDS
        }
        out["kind"] = self.query_one("#f-kind", Select).value
        return out

    def _try(self) -> None:
        try:
            command = self.build(self.fields())
        except ValueError as err:
            self.query_one("#form-error", Static).update(_first_lines(err))
            return
        self.dismiss(command)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._try()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "confirm":
            self._try()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


def _first_lines(err: Exception) -> str:
    errors = getattr(err, "errors", None)
    if callable(errors):
        parts = []
        for e in errors():
            where = ".".join(str(x) for x in e.get("loc", ()))
            parts.append(f"{where}: {e.get('msg', '')}" if where else str(e.get("msg", "")))
        return "invalid: " + "; ".join(parts)
    return f"invalid: {err}"


class GotoScreen(ModalScreen[str | None]):
    """Ask where to travel: a seq number or a time (ISO 8601)."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]  # noqa: RUF012

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(
                "Go to (seq, or time like 2026-11-30T09:00:00+00:00)", classes="dialog-title"
            )
            yield Input(placeholder="seq or time", id="goto")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


class DetailScreen(ModalScreen[None]):
    """A read-only detail: a rack with its nodes, jobs, evidence and history."""

    BINDINGS = [Binding("escape", "close", "close"), Binding("enter", "close", "close", show=False)]  # noqa: RUF012

    def __init__(self, title: str, body: Any) -> None:
        super().__init__()
        self.title_ = title
        self.body = body

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog detail"):
            yield Label(self.title_, classes="dialog-title")
            yield Static(self.body, classes="dialog-body")

    def action_close(self) -> None:
        self.dismiss(None)
