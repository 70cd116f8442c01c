"""The controller's deciders for reservations: reserve, start, end, cancel.

Split from `controller.py` (same rules of that file apply): each raises through `chk` or
emits through `out`. A reservation (`Window` in the state) holds nodes from a start to an
end: before the start no work goes there that could run past it (the scheduler and
`check_windows`); at the start a maintenance reservation's nodes are cordoned (the ones not
cordoned already, which its end uncordons) and the `reservations` policy preempts the
restartable work still there. A dedicated one (users or queues) cordons nothing: the jobs
naming it are placed there from its start to its end (and only there: `check_windows`),
everyone else is kept off, and its members' jobs are never preempted by it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rackplane.models import (
    CancelReservation,
    EndReservation,
    JobKind,
    JobSpec,
    NodeCordoned,
    NodeUncordoned,
    ReservationEnded,
    ReservationMade,
    ReservationStarted,
    Reserve,
    StartReservation,
)
from rackplane.models.queues import leaf_queues
from rackplane.policies import _checks as chk
from rackplane.policies._checks import Emitter
from rackplane.projections.state import ClusterState, JobState, Window


def reserve(s: ClusterState, c: Reserve, out: Emitter) -> None:
    if c.reservation in s.windows:
        chk.reject("invalid_state", f"reservation {c.reservation} exists already")
    if c.end <= c.start:
        chk.reject("invalid_state", f"reservation {c.reservation} ends before it starts")
    if c.end <= out.at:
        chk.reject("invalid_state", f"reservation {c.reservation} would be over already")
    if not c.racks and not c.nodes:
        chk.reject("invalid_state", f"reservation {c.reservation} names no rack and no node")
    assert s.index is not None
    nodes: set[str] = set()
    for rack in c.racks:
        if rack not in s.racks:
            chk.reject("unknown_rack", f"rack {rack} is not in cluster {s.cluster!r}")
        nodes.update(s.index.rack(rack).nodes)
    for node in c.nodes:
        nodes.add(chk.node_state(s, node).id)
    leaves = leaf_queues(s.settings.queues)
    for queue in c.queues:
        if queue not in leaves:
            what = (
                "has child queues"
                if any(q.name == queue for q in s.settings.queues)
                else "is not a queue"
            )
            chk.reject("unknown_queue", f"queue {queue!r} {what}; a reservation names leaf queues")
    order = s.index.node_order
    out.emit(
        ReservationMade,
        reservation=c.reservation,
        nodes=tuple(sorted(nodes, key=order.__getitem__)),
        start=c.start,
        end=c.end,
        reason=c.reason,
        users=tuple(dict.fromkeys(c.users)),
        queues=tuple(dict.fromkeys(c.queues)),
    )


def check_member(s: ClusterState, job: JobSpec) -> None:
    """Refuse a job that names a reservation it may not run in: none of that name, a
    maintenance one, or one whose users and queues name neither its owner nor its queue."""
    name = job.reservation
    if name is None:
        return
    window = s.windows.get(name)
    if window is None:
        chk.reject(
            "unknown_reservation",
            f"no reservation {name} in cluster {s.cluster!r} (over, or never made); "
            "submit without --reservation",
        )
    if not window.dedicated:
        chk.reject(
            "not_in_reservation",
            f"reservation {name} is for maintenance: no job runs in it",
        )
    if job.owner not in window.users and job.queue not in window.queues:
        who = ", ".join(
            [*(f"user {u}" for u in window.users), *(f"queue {q}" for q in window.queues)]
        )
        chk.reject(
            "not_in_reservation",
            f"reservation {name} is for {who}; job {job.id} (owner {job.owner}, queue "
            f"{job.queue or 'none'}) is neither",
        )


def start(s: ClusterState, c: StartReservation, out: Emitter) -> None:
    window = _window(s, c.reservation)
    if window.started:
        chk.ignore(f"reservation {c.reservation} has started already")
    if out.at < window.start:
        chk.reject(
            "invalid_state",
            f"reservation {c.reservation} starts at {window.start.isoformat()}, not before",
        )
    assert s.index is not None
    order = s.index.node_order
    # A dedicated reservation's members run on its nodes: they stay uncordoned, and
    # `Window.keeps_from` keeps everyone else off from now on.
    cordon = (
        []
        if window.dedicated
        else sorted((n for n in window.nodes if not s.nodes[n].cordoned), key=order.__getitem__)
    )
    staying = [j.id for j in jobs_in(s, window) if not drained(s, window, j)]
    out.emit(ReservationStarted, reservation=c.reservation, cordoned=tuple(cordon), staying=staying)
    why = f"reservation {c.reservation}" + (f": {window.reason}" if window.reason else "")
    for node in cordon:
        out.emit(NodeCordoned, node=node, reason=why)


def end(s: ClusterState, c: EndReservation | CancelReservation, out: Emitter) -> None:
    window = _window(s, c.reservation)
    cancelled = isinstance(c, CancelReservation)
    if not cancelled and out.at < window.end:
        chk.reject(
            "invalid_state",
            f"reservation {c.reservation} ends at {window.end.isoformat()}, not before",
        )
    reason = c.reason if isinstance(c, CancelReservation) else ""
    out.emit(ReservationEnded, reservation=c.reservation, cancelled=cancelled, reason=reason)
    assert s.index is not None
    order = s.index.node_order
    kept = {n for w in s.windows.values() if w.started and w.id != window.id for n in w.nodes}
    for node in sorted(window.cordoned - kept, key=order.__getitem__):
        if s.nodes[node].cordoned:
            out.emit(NodeUncordoned, node=node)


def jobs_in(s: ClusterState, window: Window) -> list[JobState]:
    """The jobs holding nodes of the window, in queue order."""
    ids = {s.nodes[n].job for n in window.nodes} - {None}
    return sorted((s.jobs[j] for j in ids if j is not None), key=lambda j: j.queue_key)


def drained(s: ClusterState, window: Window, job: JobState) -> bool:
    """True when the start of `window` preempts `job`: restartable, and not its members'."""
    return not window.member(job.spec) and preemptible(s, job)


def preemptible(s: ClusterState, job: JobState) -> bool:
    """The victim rules of Auto Defrag: managed; interactive only while an operator allows
    it; inference never; never while a disruption budget refuses."""
    if job.protected_by is not None:
        return False
    if job.spec.kind is JobKind.MANAGED:
        return True
    return (
        job.spec.kind is JobKind.INTERACTIVE
        and s.settings.allow_interactive_preemption
        and s.interactive_preemption_allowed_by is not None
    )


def held_by_started(s: ClusterState, job: JobState) -> bool:
    """True when `job` holds a node of a reservation that has started and is not one of its
    members' jobs."""
    mine = set(job.nodes)
    return any(w.started and mine & w.nodes and not w.member(job.spec) for w in s.windows.values())


def check_windows(
    s: ClusterState, job: JobState, nodes: Sequence[str], now: datetime, *, running: bool = False
) -> None:
    """Reject giving `job` nodes a reservation keeps from it (`Window.keeps_from`): a placement,
    or for a `running` job (a swap, a slice migration; its limit counts from its start) a
    node it moves onto."""
    if not running and job.spec.reservation is not None:
        _check_inside(s, job, nodes, now)
    if not s.windows:
        return
    wanted = set(nodes)
    since = job.started_at if running else None
    for window in s.windows.values():
        hit = wanted & window.nodes
        if hit and window.keeps_from(job.spec, now, since):
            first = min(hit)
            chk.reject(
                "reserved",
                f"node {first} is reserved ({window.id}) from {window.start.isoformat()}: job "
                f"{job.id} "
                + (
                    "may not use it once it has started"
                    if window.started or now >= window.start
                    else "has no time limit"
                    if job.spec.time_limit is None
                    else f"could run until past it (time limit {job.spec.time_limit})"
                ),
            )


def _check_inside(s: ClusterState, job: JobState, nodes: Sequence[str], now: datetime) -> None:
    """Reject placing a job that names a reservation anywhere but on its nodes, or outside
    its time (before its start, after its end)."""
    name = job.spec.reservation
    window = s.windows.get(name) if name is not None else None
    if window is None:
        chk.reject("reserved", f"job {job.id} runs in reservation {name}, which is over")
    why = window.admits(now)
    if why is not None:
        chk.reject("reserved", f"job {job.id} runs in reservation {name}: {why}")
    outside = [n for n in nodes if n not in window.nodes]
    if outside:
        chk.reject(
            "reserved",
            f"node {outside[0]} is not in reservation {name}: job {job.id} runs only there",
        )


def _window(s: ClusterState, name: str) -> Window:
    window = s.windows.get(name)
    if window is None:
        chk.reject("invalid_state", f"no reservation {name} in cluster {s.cluster!r}")
    return window
