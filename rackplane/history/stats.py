"""`history_stats(events)`: what a cluster's record says about its reliability and its cost.

Pure: one pass over the events of one cluster.
- interruptions: `NodeFailed` per node and per rack (a `RackFailed` counts for its rack);
- MTBI estimated from the record: observed node-days (nodes x span) per node failure, and
  rack-days per rack interruption;
- spare-pool exhaustion: swaps that left their rack no spare, and slices migrated off a
  failed node (the rack had no spare to swap in);
- blocked time: hours each job waited between a `JobBlocked` and its placement (or its end,
  or the end of the record), by the reason last given (topology or capacity);
- GPU-hours lost: `lost_gpu_hours` of preemptions (by cause) and migrations;
- defrag plans: each plan, its victims and its cost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rackplane.models import (
    DefragPlanned,
    Event,
    JobBlocked,
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobPlaced,
    JobPreempted,
    NodeFailed,
    NodeSwapped,
    RackFailed,
    SliceMigrated,
    TopologyRegistered,
)

_DAY = 86_400.0


@dataclass
class HistoryStats:
    """The figures of one cluster's record (see the module docstring)."""

    cluster: str
    events: int = 0
    first_at: datetime | None = None
    last_at: datetime | None = None
    nodes: int = 0
    racks: int = 0
    node_interruptions: Counter[str] = field(default_factory=Counter)
    rack_interruptions: Counter[str] = field(default_factory=Counter)
    spare_exhaustions: list[dict[str, Any]] = field(default_factory=list)
    blocked_hours: dict[str, float] = field(
        default_factory=lambda: {"topology": 0.0, "capacity": 0.0}
    )
    lost_gpu_hours: dict[str, float] = field(default_factory=dict)
    defrag_plans: list[dict[str, Any]] = field(default_factory=list)

    @property
    def span_days(self) -> float:
        if self.first_at is None or self.last_at is None:
            return 0.0
        return (self.last_at - self.first_at).total_seconds() / _DAY

    @property
    def node_mtbi_days(self) -> float | None:
        """Observed node-days per node interruption (None without one)."""
        n = sum(self.node_interruptions.values())
        return self.nodes * self.span_days / n if n else None

    @property
    def rack_mtbi_days(self) -> float | None:
        """Observed rack-days per rack interruption (a node failure interrupts its rack)."""
        n = sum(self.rack_interruptions.values())
        return self.racks * self.span_days / n if n else None

    def as_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "events": self.events,
            "first_at": self.first_at.isoformat() if self.first_at else None,
            "last_at": self.last_at.isoformat() if self.last_at else None,
            "span_days": self.span_days,
            "nodes": self.nodes,
            "racks": self.racks,
            "node_interruptions": dict(self.node_interruptions.most_common()),
            "rack_interruptions": dict(self.rack_interruptions.most_common()),
            "node_mtbi_days": self.node_mtbi_days,
            "rack_mtbi_days": self.rack_mtbi_days,
            "spare_exhaustions": self.spare_exhaustions,
            "blocked_hours": self.blocked_hours,
            "lost_gpu_hours": self.lost_gpu_hours,
            "defrag_plans": self.defrag_plans,
            "defrag_cost_gpu_hours": sum(p["cost_gpu_hours"] for p in self.defrag_plans),
        }


def history_stats(cluster: str, events: Iterable[Event]) -> HistoryStats:
    """Compute the figures of `cluster` from its events (in seq order)."""
    s = HistoryStats(cluster)
    blocked: dict[str, tuple[str, datetime]] = {}
    lost: dict[str, float] = {}

    def unblock(job: str, at: datetime) -> None:
        held = blocked.pop(job, None)
        if held is not None:
            s.blocked_hours[held[0]] += (at - held[1]).total_seconds() / 3600.0

    for e in events:
        s.events += 1
        s.first_at = s.first_at or e.at
        s.last_at = e.at
        match e:
            case TopologyRegistered():
                s.nodes, s.racks = e.topology.node_count, len(e.topology.racks)
            case NodeFailed():
                s.node_interruptions[e.node] += 1
                s.rack_interruptions[e.rack] += 1
            case RackFailed():
                s.rack_interruptions[e.rack] += 1
            case NodeSwapped() if e.spares_left == 0:
                s.spare_exhaustions.append(
                    {"seq": e.seq, "at": e.at.isoformat(), "rack": e.rack, "job": e.job,
                     "what": f"swap of {e.old_node} took the last spare"}
                )  # fmt: skip
            case SliceMigrated():
                lost["migrations"] = lost.get("migrations", 0.0) + e.lost_gpu_hours
                s.spare_exhaustions.append(
                    {"seq": e.seq, "at": e.at.isoformat(), "rack": ", ".join(e.from_racks),
                     "job": e.job, "what": f"slice {e.slice} migrated: no spare to swap in"}
                )  # fmt: skip
            case JobBlocked():
                held = blocked.get(e.job)
                if held is None or held[0] != e.reason:
                    unblock(e.job, e.at)
                    blocked[e.job] = (e.reason, e.at)
            case JobPlaced() | JobCompleted() | JobFailed() | JobCancelled():
                unblock(e.job, e.at)
            case JobPreempted():
                key = "failures" if e.cause == "failure" else f"preemption:{e.cause}"
                lost[key] = lost.get(key, 0.0) + e.lost_gpu_hours
            case DefragPlanned():
                s.defrag_plans.append(
                    {"seq": e.seq, "at": e.at.isoformat(), "job": e.job,
                     "target_racks": list(e.target_racks), "victims": list(e.victims),
                     "cost_gpu_hours": e.cost_gpu_hours}
                )  # fmt: skip
            case _:
                pass
    if s.last_at is not None:
        for job in list(blocked):
            unblock(job, s.last_at)
    s.lost_gpu_hours = dict(sorted(lost.items()))
    return s
