"""The controller's deciders for running slices: swap, migrate, degrade, preempt, defrag.

Split from `controller.py` (same rules of that file apply): each raises through `chk` or
emits through `out`.
"""

from __future__ import annotations

from rackplane.models import (
    DefragPlanned,
    DegradeSlice,
    JobKind,
    JobPreempted,
    MigrateSlice,
    NodeSwapped,
    PlanDefrag,
    PreemptJobs,
    SliceDegraded,
    SliceMigrated,
    SwapNode,
)
from rackplane.policies import _checks as chk
from rackplane.policies._authorize import is_policy
from rackplane.policies._checks import Emitter
from rackplane.policies._decide_windows import check_windows, held_by_started
from rackplane.policies.quotas import reclaimable
from rackplane.projections.state import ClusterState, restart_cost


def swap_node(s: ClusterState, c: SwapNode, out: Emitter) -> None:
    job = chk.holding_job(s, c.job)
    sl = chk.slice_of(job, c.slice)
    if c.old_node not in sl.nodes:
        chk.reject("invalid_state", f"node {c.old_node} is not in slice {c.slice} of job {c.job}")
    chk.check_available(s, [c.new_node])
    check_windows(s, job, [c.new_node], out.at, running=True)
    old_rack = s.nodes[c.old_node].rack
    new_rack = s.nodes[c.new_node].rack
    if new_rack != old_rack and s.settings.rack_local_slices:
        chk.reject(
            "slice_spans_racks",
            f"a swap stays in the rack: {c.new_node} is in {new_rack}, {c.old_node} in {old_rack}",
        )
    out.emit(
        NodeSwapped,
        job=c.job,
        slice=c.slice,
        rack=new_rack,
        old_node=c.old_node,
        new_node=c.new_node,
        spares_left=len(s.racks[new_rack].available) - 1,
        explanation=c.explanation,
    )


def migrate_slice(s: ClusterState, c: MigrateSlice, out: Emitter) -> None:
    job = chk.holding_job(s, c.job)
    sl = chk.slice_of(job, c.slice)
    if len(c.nodes) != sl.size:
        chk.reject(
            "shape_mismatch",
            f"slice {c.slice} of job {c.job} needs {sl.size} nodes, got {len(c.nodes)}",
        )
    chk.check_available(s, c.nodes)
    racks = chk.racks(s, c.nodes)
    chk.check_rack_local(s, f"slice {c.slice} of job {c.job}", racks)
    chk.check_reservations(s, c.job, c.nodes)
    check_windows(s, job, c.nodes, out.at, running=True)
    chk.check_spare_reserve(s, c.nodes)
    out.emit(
        SliceMigrated,
        job=c.job,
        slice=c.slice,
        from_racks=sl.racks,
        to_rack=racks[0] if len(racks) == 1 else None,
        old_nodes=sl.nodes,
        new_nodes=c.nodes,
        lost_gpu_hours=restart_cost(s, job, out.at),
        explanation=c.explanation,
    )


def degrade_slice(s: ClusterState, c: DegradeSlice, out: Emitter) -> None:
    job = chk.holding_job(s, c.job)
    sl = chk.slice_of(job, c.slice)
    floor = job.spec.min_nodes_per_slice
    if floor is None:
        chk.reject("not_degradable", f"job {c.job} does not allow degraded running")
    if not s.settings.ntp_allowed:
        chk.reject("not_degradable", "degraded running (NTP) is switched off for this cluster")
    strangers = [n for n in c.remove if n not in sl.nodes]
    if strangers or len(set(c.remove)) != len(c.remove):
        chk.reject("invalid_state", f"nodes to remove must be distinct members of slice {c.slice}")
    after = len(sl.nodes) - len(c.remove)
    if after < floor:
        chk.reject(
            "not_degradable",
            f"slice {c.slice} of job {c.job} would keep {after} nodes, below its minimum {floor}",
        )
    gpus = s.racks[s.nodes[sl.nodes[0]].rack].gpus_per_node
    out.emit(
        SliceDegraded,
        job=c.job,
        slice=c.slice,
        removed=c.remove,
        nodes_before=len(sl.nodes),
        nodes_after=after,
        gpus_before=len(sl.nodes) * gpus,
        gpus_after=after * gpus,
        power_boost=s.settings.ntp_power_boost,
        explanation=c.explanation,
    )


def preempt_jobs(s: ClusterState, c: PreemptJobs, out: Emitter) -> None:
    if len(set(c.jobs)) != len(c.jobs):
        chk.reject("shape_mismatch", "a job is named twice")
    victims = [chk.holding_job(s, j) for j in c.jobs]
    by_policy = is_policy(c.actor)
    allowed_by = s.interactive_preemption_allowed_by if by_policy else c.actor
    allowed_why = s.interactive_preemption_reason if by_policy else c.reason
    for job in victims:
        kind = job.spec.kind
        if c.cause == "failure":
            # A job that lost a node nothing could replace cannot run anyway: any kind requeues.
            if not chk.impaired(s, job):
                chk.reject("invalid_state", f"job {job.id} has no failed node to requeue it for")
        elif c.cause == "eviction":
            if not job.borrowing:
                chk.reject("invalid_state", f"job {job.id} runs on no borrowed spare")
        elif c.cause in ("reclaim", "priority") and (why := reclaimable(s, job, c.cause)):
            chk.reject("not_preemptible", why)
        elif c.cause == "reservation" and not held_by_started(s, job):
            chk.reject("invalid_state", f"job {job.id} holds no node of a started reservation")
        elif job.protected_by is not None:
            chk.reject(
                "not_preemptible",
                f"job {job.id} is protected by {job.protected_by}: its disruption budget "
                "refuses a preemption now",
            )
        elif kind is JobKind.INFERENCE:
            chk.reject("not_preemptible", f"job {job.id} is an inference service: never preempted")
        elif kind is JobKind.INTERACTIVE and not (c.allow_interactive and allowed_by):
            chk.reject(
                "not_preemptible",
                f"job {job.id} is interactive: preempted only with an operator's explicit consent",
            )
        elif kind is JobKind.INTERACTIVE and not by_policy and not c.reason.strip():
            chk.reject(
                "reason_required",
                f"job {job.id} is interactive: preempting it by hand needs a reason",
            )
    for job in victims:
        consent = job.spec.kind is JobKind.INTERACTIVE and c.cause not in ("failure", "eviction")
        out.emit(
            JobPreempted,
            job=job.id,
            cause=c.cause,
            reason=c.reason,
            released=job.nodes,
            lost_gpu_hours=restart_cost(s, job, out.at),
            interactive_allowed_by=allowed_by if consent else None,
            interactive_allowed_reason=allowed_why if consent else "",
            explanation=c.explanation,
        )


def plan_defrag(s: ClusterState, c: PlanDefrag, out: Emitter) -> None:
    job = chk.job_state(s, c.job)
    if job.status.final:
        chk.reject("invalid_state", f"job {c.job} is {job.status.value}")
    for rack in c.target_racks:
        state = s.racks.get(rack)
        if state is None:
            chk.reject("unknown_rack", f"rack {rack} is not in cluster {s.cluster!r}")
        if not state.in_service:
            chk.reject("invalid_state", f"rack {rack} is failed")
        holder = s.reservations.get(rack)
        if holder is not None and holder != c.job:
            chk.reject("reserved", f"rack {rack} is already reserved for job {holder}")
    for victim in c.victims:
        chk.holding_job(s, victim)
    out.emit(
        DefragPlanned,
        job=c.job,
        target_racks=c.target_racks,
        victims=c.victims,
        cost_gpu_hours=c.cost_gpu_hours,
        alternatives=c.alternatives,
        explanation=c.explanation,
        score=c.score,
        cause=c.cause,
    )
