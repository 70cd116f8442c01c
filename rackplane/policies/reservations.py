"""`reservations`: starts and ends reservations on time, and drains them at the start.

A reservation (`Reserve`, an admin's) holds nodes from a start to an end. Before the start,
the scheduler places there only work whose time limit ends by then (`Window.keeps_from`; the
controller refuses the rest), and so do swaps, migrations, reclaim and defrag (a running job's
limit counts from its start: `state.kept_nodes`). When the start comes this policy proposes
`StartReservation`: the controller cordons the nodes of a maintenance reservation
(`ReservationStarted`, `NodeCordoned`); a dedicated one (users or queues) stays uncordoned for
the jobs that name it (`tas` places them there), everyone else kept off (`keeps_from`). Then
it preempts the restartable work still on them that is not its members' (`PreemptJobs`, cause
`reservation`; what may never be preempted stays, named in `ReservationStarted.staying`).
When the end comes it proposes `EndReservation`, which lifts the cordons the start made (a
dedicated one made none; its members' jobs keep running).

The start and the end are times no event marks: `due` says when the next one comes, and the
engine (`Engine.wake`) and the worker's `Ticker` offer the state again then.
Cost: O(reservations + their nodes) per look.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rackplane.models import (
    Command,
    EndReservation,
    Event,
    JobKind,
    PreemptJobs,
    StartReservation,
)
from rackplane.policies._decide_windows import drained, jobs_in
from rackplane.policies._proposals import Proposals
from rackplane.projections.state import ClusterState


@dataclass(frozen=True)
class Reservations:
    """Starts, drains and ends reservations (module docstring)."""

    name: str = "reservations"

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        """What the reservations need at `now`: starts, drains, ends."""
        if state.index is None or not state.windows:
            return []
        out = Proposals(self.name, state)
        for name, window in sorted(state.windows.items()):
            if window.started and now >= window.end:
                out.add(EndReservation, reservation=name)
            elif not window.started and now >= window.start:
                out.add(StartReservation, reservation=name)
            elif window.started:
                victims = [j for j in jobs_in(state, window) if drained(state, window, j)]
                if victims:
                    out.add(
                        PreemptJobs,
                        jobs=tuple(j.id for j in victims),
                        cause="reservation",
                        reason=f"reservation {name} started"
                        + (f": {window.reason}" if window.reason else ""),
                        allow_interactive=any(j.spec.kind is JobKind.INTERACTIVE for j in victims),
                    )
        return list(out.commands)

    def due(self, state: ClusterState) -> datetime | None:
        """When the next reservation starts or ends."""
        times = [w.end if w.started else w.start for w in state.windows.values()]
        return min(times, default=None)
