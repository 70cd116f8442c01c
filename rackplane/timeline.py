"""Incident analysis, one subject at a time: what happened to a job, a node or a rack.

Pure: functions over recorded events. `describe` turns any event into one line that says
what happened and why (the explanations the policies recorded); a timeline is the events
that name the subject, in seq order, described.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rackplane.models import (
    EVENTS,
    CommandIgnored,
    CommandRejected,
    DefragPlanned,
    DisruptionBudgetReported,
    Event,
    JobBlocked,
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobPlaced,
    JobPreempted,
    JobRuntimeReported,
    JobStarted,
    JobSubmitted,
    NodeCordoned,
    NodeDegraded,
    NodeFailed,
    NodeRecovered,
    NodeRepaired,
    NodeSwapped,
    NodeUncordoned,
    PolicyConfigured,
    RackDegraded,
    RackFailed,
    RackRecovered,
    ReservationEnded,
    ReservationMade,
    ReservationStarted,
    SliceDegraded,
    SliceMigrated,
    TopologyRegistered,
)


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of a timeline."""

    seq: int
    at: datetime
    type: str
    actor: str
    text: str

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at.isoformat(),
            "type": self.type,
            "actor": self.actor,
            "text": self.text,
        }


def mentions(event: Event, subject: str) -> bool:
    """True when the event names `subject` (a job, node or rack id) anywhere in it."""
    return f'"{subject}"'.encode() in EVENTS.dump_json(event)


def timeline(events: Iterable[Event], subject: str) -> list[Entry]:
    """The events that name `subject`, described, in the order given."""
    return [
        Entry(e.seq, e.at, e.type, e.actor, describe(e, subject))
        for e in events
        if mentions(e, subject)
    ]


def _racks(slices: Iterable[Any]) -> str:
    racks = sorted({r for s in slices for r in s.racks})
    return ", ".join(racks[:6]) + (f" +{len(racks) - 6}" if len(racks) > 6 else "")


def _why(text: str) -> str:
    return f": {text}" if text else ""


def describe(e: Event, subject: str = "") -> str:
    """One line: what the event says happened, and why."""
    match e:
        case JobSubmitted():
            j = e.job
            return (
                f"submitted {j.id}: {j.nodes} nodes in slices of {j.slice_size}, {j.kind.value}, "
                f"priority {j.priority}{f', queue {j.queue}' if j.queue else ''}"
                f"{f', in reservation {j.reservation}' if j.reservation else ''}"
            )
        case JobBlocked():
            where = ""
            if e.standing is not None:
                st = e.standing
                where = (
                    f"; queue {st.queue} (share {st.share:.2f}, rank {st.queue_rank}, holds "
                    f"{st.nodes_held} of {st.nominal_nodes}), position {st.position}"
                )
            return (
                f"blocked by {e.reason}: {e.placeable_slices}/{len(e.slice_sizes)} slices fit "
                f"racks, {e.allocatable_nodes} nodes allocatable{where}{_why(e.explanation)}"
            )
        case JobPlaced():
            n = sum(len(s.nodes) for s in e.slices)
            local = all(s.rack_local for s in e.slices)
            return (
                f"placed {e.job} on {n} nodes in racks {_racks(e.slices)}"
                f"{'' if local else ' (a slice spans racks)'}"
                f"{' borrowing spares' if e.borrowing else ''}{_why(e.explanation)}"
            )
        case JobStarted():
            return f"{e.job} started"
        case JobCompleted():
            return f"{e.job} completed, {len(e.released)} nodes released"
        case JobFailed():
            return f"{e.job} failed{_why(e.reason)}"
        case JobCancelled():
            return f"{e.job} cancelled{_why(e.reason)}"
        case DisruptionBudgetReported():
            by = f" ({e.budget})" if e.budget else ""
            verdict = "allows disruptions again" if e.allows else "refuses disruptions"
            return f"{e.job}: its disruption budget {verdict}{by}"
        case JobRuntimeReported():
            where = f" on {len(e.nodes)} nodes" if e.nodes else ""
            return f"{e.job}: its runtime {e.action} it{where}{_why(e.detail)}"
        case JobPreempted():
            return (
                f"{e.job} preempted ({e.cause}), cost {e.lost_gpu_hours:.1f} GPU-h"
                f"{_why(e.reason or e.explanation)}"
            )
        case NodeSwapped():
            return (
                f"{e.job} slice {e.slice}: {e.old_node} swapped for {e.new_node} in {e.rack}, "
                f"{e.spares_left} spares left{_why(e.explanation)}"
            )
        case SliceMigrated():
            return (
                f"{e.job} slice {e.slice} migrated from {', '.join(e.from_racks)} to "
                f"{e.to_rack or 'several racks'}, cost {e.lost_gpu_hours:.1f} GPU-h"
                f"{_why(e.explanation)}"
            )
        case SliceDegraded():
            return (
                f"{e.job} slice {e.slice} degraded {e.nodes_before}->{e.nodes_after} nodes "
                f"({e.gpus_before}->{e.gpus_after} GPUs){', power boost' if e.power_boost else ''}"
                f"{_why(e.explanation)}"
            )
        case DefragPlanned():
            role = "as a victim " if subject and subject in e.victims else ""
            return (
                f"{e.cause} planned {role}for {e.job}: racks {', '.join(e.target_racks)}, victims "
                f"{', '.join(e.victims) or 'none'}, cost {e.cost_gpu_hours:.1f} GPU-h"
                f"{_why(e.explanation)}"
            )
        case NodeFailed():
            under = f" under {e.job} slice {e.slice}" if e.job else ""
            return f"{e.node} ({e.rack}) failed{under}{_why(e.cause)}"
        case NodeDegraded():
            return f"{e.node} ({e.rack}) degraded{_why(e.cause)}"
        case NodeRecovered():
            return f"{e.node} ({e.rack}) recovered{_why(e.cause)}"
        case NodeRepaired():
            return f"{e.node} ({e.rack}) repaired{_why(e.note)}"
        case NodeCordoned():
            return f"{e.node} cordoned{_why(e.reason)}"
        case NodeUncordoned():
            return f"{e.node} uncordoned"
        case RackFailed():
            return f"rack {e.rack} failed{_why(e.cause)}; jobs in it: {', '.join(e.jobs) or 'none'}"
        case RackDegraded():
            return (
                f"rack {e.rack} degraded (part of its NVLink fabric lost; new slices only when "
                f"no healthy rack fits){_why(e.cause)}; jobs in it keep running: "
                f"{', '.join(e.jobs) or 'none'}"
            )
        case RackRecovered():
            return f"rack {e.rack} recovered{_why(e.cause)}"
        case TopologyRegistered():
            t = e.topology
            return f"topology registered: {len(t.racks)} racks, {t.node_count} nodes"
        case PolicyConfigured():
            return "policy settings changed"
        case ReservationMade():
            who = ", ".join([*e.users, *(f"queue {q}" for q in e.queues)])
            return (
                f"reservation {e.reservation}: {len(e.nodes)} nodes from {e.start:%Y-%m-%d %H:%M} "
                f"to {e.end:%Y-%m-%d %H:%M}{f' for {who}' if who else ''}{_why(e.reason)}"
            )
        case ReservationStarted():
            stay = f"; staying: {', '.join(e.staying)}" if e.staying else ""
            return f"reservation {e.reservation} started: {len(e.cordoned)} nodes cordoned{stay}"
        case ReservationEnded():
            how = "cancelled" if e.cancelled else "ended"
            return f"reservation {e.reservation} {how}{_why(e.reason)}"
        case CommandRejected():
            return f"{e.command_type} {e.command_id} rejected ({e.code}): {e.reason}"
        case CommandIgnored():
            return f"{e.command_type} {e.command_id} ignored: {e.reason}"
    return e.type  # pragma: no cover  (every event type has a case above)
