"""Alerts: what needs an operator's eye, computed from a state and the events before it.

- a failed rack (critical), a degraded rack (warning: one NVSwitch tray lost, it keeps its
  work and takes new slices only when no healthy rack fits them);
- a rack out of spares: it runs work and has no healthy free node left for a hot swap;
- a job blocked by topology for longer than `blocked_after`;
- a flapping node: `flap_changes` health changes or more within `flap_window`;
- rejected input: a message the pipeline could not decode or validate (`rackplane.rejected`),
  and commands the controller rejected recently.
"Now" is the state's own time (its last event), so a replayed history alerts as it did then.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from rackplane.models import Event, JobStatus, Rejection
from rackplane.projections import ClusterState

HEALTH_CHANGES = frozenset({"NodeFailed", "NodeDegraded", "NodeRecovered", "NodeRepaired"})


@dataclass(frozen=True, slots=True)
class AlertSettings:
    """Thresholds of the alerts."""

    blocked_after: timedelta = timedelta(minutes=10)
    flap_window: timedelta = timedelta(hours=1)
    flap_changes: int = 3
    recent_rejections: int = 20


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert row."""

    kind: str
    severity: str
    """`critical` or `warning`."""
    subject: str
    message: str
    at: datetime | None = None


def alerts(
    state: ClusterState,
    events: Sequence[Event],
    rejections: Sequence[Rejection] = (),
    settings: AlertSettings = AlertSettings(),
) -> list[Alert]:
    """Every alert that holds at `state`; `events` are the events that built it (oldest
    first), `rejections` the rejected input seen so far."""
    out = _spares(state) + _blocked(state, settings) + _flapping(state, events, settings)
    out += _rejected(events, rejections, settings)
    return out


def _spares(state: ClusterState) -> list[Alert]:
    out = []
    for rack in state.racks.values():
        if not rack.in_service:
            out.append(Alert("rack failed", "critical", rack.id, rack.cause or "rack-level fault"))
            continue
        if rack.degraded:
            why = rack.cause or "part of its NVLink fabric lost"
            out.append(
                Alert(
                    "rack degraded",
                    "warning",
                    rack.id,
                    f"{why}; its work stays, new slices go there only when no healthy rack fits",
                )
            )
        busy = len(rack.free) < rack.size
        if busy and not rack.free:
            out.append(
                Alert(
                    "out of spares",
                    "critical",
                    rack.id,
                    f"no healthy free node left for a swap in {rack.id} (pod {rack.pod})",
                )
            )
    return out


def _blocked(state: ClusterState, settings: AlertSettings) -> list[Alert]:
    now = state.at
    out = []
    for job in state.jobs.values():
        b = job.blocked
        if job.status is not JobStatus.QUEUED or b is None or b.reason != "topology":
            continue
        waited = now - b.since if now else timedelta(0)
        if waited >= settings.blocked_after:
            minutes = waited.total_seconds() / 60
            out.append(
                Alert(
                    "blocked by topology",
                    "warning",
                    job.id,
                    f"waits {minutes:.0f} min: {b.allocatable_nodes} nodes free in total, "
                    f"{b.placeable_slices}/{len(job.spec.slice_sizes)} slices fit in racks",
                    b.since,
                )
            )
    return out


def _flapping(state: ClusterState, events: Sequence[Event], settings: AlertSettings) -> list[Alert]:
    if state.at is None:
        return []
    since = state.at - settings.flap_window
    changes: Counter[str] = Counter()
    for event in reversed(events):
        if event.at < since:
            break
        if event.type in HEALTH_CHANGES:
            changes[event.node] += 1  # type: ignore[union-attr]
    return [
        Alert(
            "flapping node",
            "warning",
            node,
            f"{n} health changes within {settings.flap_window.total_seconds() / 60:.0f} min",
        )
        for node, n in sorted(changes.items())
        if n >= settings.flap_changes
    ]


def _rejected(
    events: Sequence[Event], rejections: Sequence[Rejection], settings: AlertSettings
) -> list[Alert]:
    out = [
        Alert("rejected input", "warning", f"{r.source_topic}@{r.offset}", r.reason, r.at)
        for r in rejections[-settings.recent_rejections :]
    ]
    recent = []
    for event in reversed(events):
        if event.type == "CommandRejected":
            recent.append(event)
            if len(recent) >= settings.recent_rejections:
                break
    out += [
        Alert(
            "command rejected",
            "warning",
            f"{e.command_type} {e.command_id}",
            f"{e.code}: {e.reason}",
            e.at,
        )
        for e in reversed(recent)
    ]
    return out
