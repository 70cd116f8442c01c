"""`spare_swap`: what happens to a running slice when one of its nodes fails.

For each failed node that serves a slice, in this order:

1. Swap: a free healthy node of the same rack (a spare, or any free node) replaces it; the
   rest of the slice keeps running. Several failures in one slice are swapped one by one.
2. Evict a borrower: when the rack's spares are lent to short preemptible work, that work is
   evicted (re-queued ahead of its peers) and its node takes the swap.
3. Degrade: the job allows nonuniform tensor parallelism (`min_nodes_per_slice`) and the
   cluster has NTP on: the slice drops the node and goes on at a lower TP degree.
4. Migrate: the broken slice alone moves to the nearest rack with room (best fit, closest in
   IB hops to the job's other slices); the job restarts from its last checkpoint. When no
   rack has room and defrag is on, cheaper lower-priority work is preempted and re-placed to
   make one (the same planner as Auto Defrag), rather than stopping the whole job.
5. Requeue: nothing else works; the job is suspended and queued again ahead of its peers.

A rack-level fault (NVSwitch tray, power) takes every node of the rack at once: each slice in
it migrates, or its job is re-queued. The spare pool refills by itself: the reserve is a count
of healthy free nodes, so repaired or freed nodes of the rack become spares again.

Nodes of a reservation that starts before the job's time limit ends (counted from the job's
start; no limit: any reservation not ended) are never a swap's spare or a migration's room.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rackplane.models import (
    Command,
    DegradeSlice,
    Event,
    Health,
    JobId,
    MigrateSlice,
    NodeFailed,
    NodeId,
    PlaceJob,
    PlanDefrag,
    PreemptJobs,
    RackFailed,
    RackId,
    SliceAssignment,
    SwapNode,
)
from rackplane.policies._proposals import Proposals, own_rejections
from rackplane.policies.defrag import DefragPlan, plan_room
from rackplane.policies.placement import Capacity
from rackplane.projections.state import ClusterState, JobState, SliceState, kept_nodes


@dataclass(frozen=True)
class SpareSwap:
    """Reacts to node and rack failures under running slices (see the module docstring)."""

    name: str = "spare_swap"

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        """Swap, evict, degrade, migrate or requeue, for each slice a failure broke."""
        if state.index is None:
            return []
        broken = _broken_slices(state, events, rescan=own_rejections(self.name, events))
        if not broken:
            return []
        return recover(state, broken, self.name, now=now)


def _broken_slices(
    state: ClusterState, events: Sequence[Event], *, rescan: bool
) -> list[tuple[JobId, int]]:
    """Slices with a failed node or in a failed rack that the events point at."""
    found: dict[tuple[JobId, int], None] = {}
    for e in events:
        if isinstance(e, NodeFailed) and e.job is not None and e.slice is not None:
            found[(e.job, e.slice)] = None
        elif isinstance(e, RackFailed):
            for job_id in e.jobs:
                job = state.jobs.get(job_id)
                for s in job.slices if job else ():
                    if e.rack in s.racks:
                        found[(job_id, s.index)] = None
    if rescan:  # a proposal was stale: look at every running slice again, in queue order
        # (the jobs map iterates in hash order: who gets a scarce spare must not depend on it)
        for job in sorted(state.jobs.values(), key=lambda j: j.queue_key):
            for s in job.slices:
                if _failed_nodes(state, s) or not _racks_in_service(state, s):
                    found[(job.id, s.index)] = None
    return [key for key in found if key[0] in state.jobs and state.jobs[key[0]].status.holds_nodes]


def _failed_nodes(state: ClusterState, s: SliceState) -> list[NodeId]:
    return [n for n in s.nodes if state.nodes[n].health is Health.FAILED]


def _racks_in_service(state: ClusterState, s: SliceState) -> bool:
    """No rack of the slice is failed (a degraded rack keeps what it runs)."""
    return all(state.racks[r].in_service for r in s.racks)


def recover(
    state: ClusterState, broken: list[tuple[JobId, int]], policy: str, *, now: datetime
) -> list[Command]:
    """Proposals that bring every broken slice back to health, one failure at a time."""
    out = Proposals(policy, state)
    capacity = Capacity(state)
    spares_used: set[NodeId] = set()
    requeued: set[JobId] = set()
    evicted: set[JobId] = set()
    for job_id, index in broken:
        if job_id in requeued:
            continue
        job = state.jobs[job_id]
        s = job.slices[index]
        if not _racks_in_service(state, s):
            _move_or_requeue(out, state, capacity, job, s, requeued, "its rack failed", now)
            continue
        failed = _failed_nodes(state, s)
        remaining = list(s.nodes)
        kept = kept_nodes(state, job, now, running=True)
        for dead in failed:
            skip = spares_used | kept if kept else spares_used
            spare = _spare(state, s.racks[0], skip)
            if spare is not None:
                spares_used.add(spare)
                left = len(state.racks[s.racks[0]].available - spares_used)
                out.add(
                    SwapNode,
                    job=job_id,
                    slice=index,
                    old_node=dead,
                    new_node=spare,
                    explanation=(
                        f"{dead} failed; swapped for {spare} from rack {s.racks[0]} "
                        f"({left} free left); the slice keeps running"
                    ),
                )
                continue
            lent = _borrower_node(state, s.racks[0], job_id, skip, evicted)
            if lent is not None:
                borrower, node = lent
                if borrower not in evicted:
                    evicted.add(borrower)
                    out.add(
                        PreemptJobs,
                        jobs=(borrower,),
                        cause="eviction",
                        reason=f"rack {s.racks[0]} needs its spare for a swap",
                    )
                spares_used.add(node)
                out.add(
                    SwapNode,
                    job=job_id,
                    slice=index,
                    old_node=dead,
                    new_node=node,
                    explanation=(
                        f"{dead} failed; no idle spare in {s.racks[0]}: evicted borrower "
                        f"{borrower} and swapped for {node}"
                    ),
                )
                continue
            floor = job.spec.min_nodes_per_slice
            if state.settings.ntp_allowed and floor is not None and len(remaining) - 1 >= floor:
                remaining.remove(dead)
                gpn = state.racks[s.racks[0]].gpus_per_node
                before, after = (len(remaining) + 1) * gpn, len(remaining) * gpn
                boost = " with power boost" if state.settings.ntp_power_boost else ""
                out.add(
                    DegradeSlice,
                    job=job_id,
                    slice=index,
                    remove=(dead,),
                    explanation=(
                        f"{dead} failed and rack {s.racks[0]} has no spare left; slice {index} "
                        f"goes on at {after} GPUs instead of {before} (NTP{boost})"
                    ),
                )
                continue
            why = f"{dead} failed and {s.racks[0]} has no spare"
            _move_or_requeue(out, state, capacity, job, s, requeued, why, now)
            break
    return list(out.commands)


def _spare(state: ClusterState, rack: RackId, used: set[NodeId]) -> NodeId | None:
    """A free healthy node of the rack: the last one in rack order (the designated spare)."""
    rs = state.racks[rack]
    if not rs.in_service:
        return None
    assert state.index is not None
    for n in reversed(state.index.rack(rack).nodes):
        if n in rs.free and n not in used:
            return n
    return None


def _borrower_node(
    state: ClusterState, rack: RackId, job: JobId, used: set[NodeId], evicted: set[JobId]
) -> tuple[JobId, NodeId] | None:
    """A node of the rack held by a job running on borrowed spares (not `job` itself)."""
    assert state.index is not None
    for n in reversed(state.index.rack(rack).nodes):
        holder = state.nodes[n].job
        if n in used or holder is None or holder == job:
            continue
        j = state.jobs[holder]
        if j.borrowing and state.nodes[n].health is Health.HEALTHY:
            return holder, n
    return None


def _move_or_requeue(
    out: Proposals,
    state: ClusterState,
    capacity: Capacity,
    job: JobState,
    s: SliceState,
    requeued: set[JobId],
    why: str,
    now: datetime,
) -> None:
    room = capacity.without(kept_nodes(state, job, now, running=True))
    target = _migration_target(state, room, job, s)
    if target is not None:
        nodes = room.nodes(target, s.size)
        capacity.take(nodes)
        where = (
            "degraded, an NVSwitch tray lost: no healthy rack has room"
            if target in capacity.degraded
            else "nearest with room"
        )
        out.add(
            MigrateSlice,
            job=job.id,
            slice=s.index,
            nodes=nodes,
            explanation=(
                f"{why}; slice {s.index} moves to rack {target} ({where}) and the job "
                "restarts from its last checkpoint; its other slices stay"
            ),
        )
        return
    if state.settings.defrag_enabled:
        plan = plan_room(state, job.id, (s.size,), now=now, avoid=frozenset(s.racks))
        if plan is not None:
            _migrate_with_room(out, state, capacity, job, s, plan, why)
            return
    requeued.add(job.id)
    out.add(
        PreemptJobs,
        jobs=(job.id,),
        cause="failure",
        reason=f"{why}; no rack has room for slice {s.index} ({s.size} nodes)",
        explanation="suspended and queued again ahead of its peers",
    )


def _migrate_with_room(
    out: Proposals,
    state: ClusterState,
    capacity: Capacity,
    job: JobState,
    s: SliceState,
    plan: DefragPlan,
    why: str,
) -> None:
    """No rack has room: preempt cheaper lower-priority work to make one (a defrag for a
    running job), rather than stop the whole job."""
    (target,) = plan.target_racks
    (nodes,) = plan.placement.slices
    out.add(
        PlanDefrag,
        job=job.id,
        target_racks=plan.target_racks,
        victims=plan.victims,
        cost_gpu_hours=plan.lost_gpu_hours,
        alternatives=plan.alternatives,
        explanation=f"room for slice {s.index} of {job.id}: {plan.explanation}",
        score=plan.cost,
    )
    if plan.victims:
        out.add(
            PreemptJobs,
            jobs=plan.victims,
            cause="defrag",
            reason=f"room to move slice {s.index} of {job.id}",
            allow_interactive=any(
                state.jobs[v].spec.kind.value == "interactive" for v in plan.victims
            ),
            explanation=plan.explanation,
        )
    out.add(
        MigrateSlice,
        job=job.id,
        slice=s.index,
        nodes=nodes,
        explanation=(
            f"{why}; no rack had room, so {', '.join(plan.victims) or 'nothing'} made way on "
            f"{target}; the job restarts from its last checkpoint; its other slices stay"
        ),
    )
    capacity.take(nodes)
    for victim, placement in plan.moves:
        out.add(
            PlaceJob,
            job=victim,
            slices=tuple(SliceAssignment(nodes=n) for n in placement.slices),
            explanation=f"re-placed to make room for {job.id}: {placement.explanation}",
        )
        capacity.commit(placement)


def _migration_target(
    state: ClusterState, capacity: Capacity, job: JobState, s: SliceState
) -> RackId | None:
    index = capacity.index
    others = [r for t in job.slices if t.index != s.index for r in t.racks]
    anchor = others[0] if others else s.racks[0]
    order = index.rack_order
    candidates = [
        r
        for r, u in capacity.usable.items()
        if u >= s.size and r not in s.racks and state.reservations.get(r, job.id) == job.id
    ]
    if not candidates:
        return None
    degraded = capacity.degraded  # used only when no healthy rack has room
    return min(
        candidates,
        key=lambda r: (r in degraded, index.hops(anchor, r), capacity.usable[r], order[r]),
    )
