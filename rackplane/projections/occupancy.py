"""Read models over the cluster state: rack occupancy and a cluster summary.

Every node falls in exactly one role, so the counts of a rack always add up to its size:
- failed: its health is failed (it may still sit in a slice, waiting for a swap);
- allocated: serves a slice and is not failed;
- spare: free and healthy, counted against the rack's `spares_per_rack` reserve;
- free: free and healthy beyond the reserve (what placement may use);
- unavailable: idle but cordoned, degraded, or in a failed rack.
Which free nodes are "the" spares is a display convention: the last ones in rack order.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from rackplane.models import Health, JobId, JobStatus, NodeId, PodId, RackHealth, RackId
from rackplane.projections.state import ClusterState, JobState


class NodeRole(StrEnum):
    """What a node is doing now, for display and accounting."""

    ALLOCATED = "allocated"
    FREE = "free"
    SPARE = "spare"
    FAILED = "failed"
    UNAVAILABLE = "unavailable"


class RackOccupancy(BaseModel):
    """How one rack's nodes are used."""

    model_config = ConfigDict(frozen=True)

    rack: RackId
    pod: PodId
    healthy: bool
    """No rack-level fault (False while degraded or failed)."""
    nodes: int
    allocated: int
    free: int
    spare: int
    failed: int
    unavailable: int
    jobs: tuple[JobId, ...]
    health: RackHealth = RackHealth.HEALTHY
    """healthy, degraded (one NVSwitch tray lost: it runs work) or failed."""


class ClusterSummary(BaseModel):
    """Totals over the whole cluster."""

    model_config = ConfigDict(frozen=True)

    cluster: str
    seq: int
    racks: int
    nodes: int
    gpus: int
    allocated: int
    free: int
    spare: int
    failed: int
    unavailable: int
    racks_full: int
    """Racks with no free node beyond their spares."""
    racks_empty: int
    """Racks with no allocated node."""
    jobs_running: int
    jobs_placed: int
    jobs_queued: int
    jobs_blocked: int
    jobs_finished: int


def node_roles(state: ClusterState, rack: RackId) -> dict[NodeId, NodeRole]:
    """The role of every node of a rack, in rack order."""
    assert state.index is not None, "no topology registered"
    r = state.racks[rack]
    order = state.index.rack(rack).nodes
    available = [n for n in order if n in r.available]
    spares = set(available[len(available) - min(state.settings.spares_per_rack, len(available)) :])
    roles: dict[NodeId, NodeRole] = {}
    for n in order:
        node = state.nodes[n]
        if node.health is Health.FAILED:
            roles[n] = NodeRole.FAILED
        elif node.job is not None:
            roles[n] = NodeRole.ALLOCATED
        elif n in spares:
            roles[n] = NodeRole.SPARE
        elif n in r.available:
            roles[n] = NodeRole.FREE
        else:
            roles[n] = NodeRole.UNAVAILABLE
    return roles


def rack_occupancy(state: ClusterState) -> list[RackOccupancy]:
    """One row per rack, in topology order."""
    if state.index is None:
        return []
    rows = []
    for rack in state.index.racks:
        roles = node_roles(state, rack.id)
        counts = Counter(roles.values())
        jobs = dict.fromkeys(j for n in rack.nodes if (j := state.nodes[n].job) is not None)
        rows.append(
            RackOccupancy(
                rack=rack.id,
                pod=rack.pod,
                healthy=state.racks[rack.id].healthy,
                health=state.racks[rack.id].health,
                nodes=len(rack.nodes),
                allocated=counts[NodeRole.ALLOCATED],
                free=counts[NodeRole.FREE],
                spare=counts[NodeRole.SPARE],
                failed=counts[NodeRole.FAILED],
                unavailable=counts[NodeRole.UNAVAILABLE],
                jobs=tuple(jobs),
            )
        )
    return rows


def cluster_summary(state: ClusterState, rows: list[RackOccupancy] | None = None) -> ClusterSummary:
    """Totals of the rack occupancy (`rows`, computed when not given) and the job queue."""
    rows = rack_occupancy(state) if rows is None else rows
    statuses = Counter(j.status for j in state.jobs.values())
    blocked = sum(
        1 for j in state.jobs.values() if j.status is JobStatus.QUEUED and j.blocked is not None
    )
    gpus = state.index.topology.gpu_count if state.index else 0
    return ClusterSummary(
        cluster=state.cluster,
        seq=state.seq,
        racks=len(rows),
        nodes=sum(r.nodes for r in rows),
        gpus=gpus,
        allocated=sum(r.allocated for r in rows),
        free=sum(r.free for r in rows),
        spare=sum(r.spare for r in rows),
        failed=sum(r.failed for r in rows),
        unavailable=sum(r.unavailable for r in rows),
        racks_full=sum(1 for r in rows if r.free == 0),
        racks_empty=sum(1 for r in rows if r.allocated == 0),
        jobs_running=statuses[JobStatus.RUNNING],
        jobs_placed=statuses[JobStatus.PLACED],
        jobs_queued=statuses[JobStatus.QUEUED],
        jobs_blocked=blocked,
        jobs_finished=len(state.finished),
    )


def state_digest(state: ClusterState) -> str:
    """A fingerprint of everything the state knows (nodes, racks, jobs, settings, seq), equal
    for equal states: for comparing replicas held by different processes."""
    body = {
        "cluster": state.cluster,
        "seq": state.seq,
        "settings": state.settings.model_dump(mode="json"),
        "nodes": sorted(
            [n.id, n.rack, n.health.value, n.cordoned, n.job, n.slice] for n in state.nodes.values()
        ),
        "racks": sorted([r.id, r.health.value, sorted(r.free)] for r in state.racks.values()),
        "jobs": sorted((k, _job_fields(v)) for k, v in state.jobs.items()),
        "finished": sorted((k, v.value) for k, v in state.finished.items()),
        "reservations": sorted(state.reservations.items()),
    }
    if state.windows:  # absent without reservations, as queue usage below
        body["windows"] = sorted(
            [w.id, sorted(w.nodes), str(w.start), str(w.end), w.started, sorted(w.cordoned)]
            for w in state.windows.values()
        )
    if state.queue_usage:  # absent without queues: digests of older states stay the same
        body["queue_usage"] = sorted([q, *u] for q, u in state.queue_usage.items())
    if state.repairs:  # absent until a node is repaired, as queue usage above
        body["repairs"] = sorted(state.repairs.items())
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _job_fields(j: JobState) -> list[object]:
    return [
        j.spec.model_dump(mode="json"),
        j.status.value,
        j.order,
        [[s.index, s.size, list(s.nodes), list(s.racks)] for s in j.slices],
        j.blocked.reason if j.blocked else None,
        j.preemptions,
        j.migrations,
        j.swaps,
        j.borrowing,
        j.front,
        *(() if j.protected_by is None else (j.protected_by,)),
    ]


def job_row(state: ClusterState, job_id: str) -> dict[str, Any] | None:
    """One unfinished job as JSON-ready data (None once finished)."""
    j = state.jobs.get(job_id)
    if j is None:
        return None
    return {
        "job": j.id,
        "name": j.spec.name,
        "owner": j.spec.owner,
        "queue": j.spec.queue,
        "kind": j.spec.kind.value,
        "priority": j.spec.priority,
        "nodes": j.spec.nodes,
        "status": j.status.value,
        "blocked": (
            {
                "reason": j.blocked.reason,
                "since": j.blocked.since.isoformat(),
                "allocatable_nodes": j.blocked.allocatable_nodes,
                "placeable_slices": j.blocked.placeable_slices,
                "explanation": j.blocked.explanation,
            }
            if j.blocked
            else None
        ),
        "slices": [
            {"index": s.index, "racks": list(s.racks), "nodes": len(s.nodes)} for s in j.slices
        ],
        "submitted_at": j.submitted_at.isoformat(),
        "started_at": j.started_at.isoformat() if j.started_at else None,
        "preemptions": j.preemptions,
        "migrations": j.migrations,
        "swaps": j.swaps,
    }
