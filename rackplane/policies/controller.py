"""The controller's decider: `decide(state, command, *, now) -> events`.

Rules of this file:
- Pure: same state, command and `now`, same events. No I/O, no clock.
- A command already decided returns [] (redelivery is harmless): known by its position in the
  commands topic when it has one (any age), else by its id (the most recent 200,000-400,000).
- Every other command leaves at least one event, so its id is on record and a redelivery after
  a crash is recognised: a command that asks for what already holds (cordon a cordoned node)
  leaves one `CommandIgnored`; one the state forbids leaves one `CommandRejected` with a code
  and a reason that says what was wrong. Either way nothing else changes.
- Only programming errors raise.
- The invariants live here: a node serves at most one slice; a slice lies in one rack (unless
  `rack_local_slices` is off, for the naive baseline); new work goes only to healthy,
  uncordoned, free nodes of healthy racks; placement and migration leave each rack its
  `spares_per_rack` spare nodes, which only swaps consume.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, assert_never

from rackplane.models import (
    BlockJob,
    CancelJob,
    CancelReservation,
    Command,
    CommandIgnored,
    CommandPosition,
    CommandRejected,
    CompleteJob,
    ConfigurePolicy,
    CordonNode,
    DegradeSlice,
    DisruptionBudgetReported,
    EndReservation,
    Event,
    EventEnvelope,
    ExpireJob,
    FailJob,
    Health,
    JobBlocked,
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobId,
    JobPlaced,
    JobRuntimeReported,
    JobSpec,
    JobStarted,
    JobStatus,
    JobSubmitted,
    MigrateSlice,
    NodeCordoned,
    NodeDegraded,
    NodeFailed,
    NodeRecovered,
    NodeRepaired,
    NodeUncordoned,
    PlacedSlice,
    PlaceJob,
    PlanDefrag,
    PolicyConfigured,
    PolicySettings,
    PreemptJobs,
    RackDegraded,
    RackFailed,
    RackHealth,
    RackRecovered,
    RegisterTopology,
    RepairNode,
    ReportDisruptionBudget,
    ReportJobRuntime,
    ReportNodeHealth,
    ReportRackHealth,
    Reserve,
    RevokeKey,
    StartJob,
    StartReservation,
    SubmitJob,
    SwapNode,
    TopologyRegistered,
    TrustKey,
    UncordonNode,
)
from rackplane.models.queues import leaf_queues
from rackplane.policies import _authenticate as authn
from rackplane.policies import _authorize as auth
from rackplane.policies import _checks as chk
from rackplane.policies import _decide_slices as slices
from rackplane.policies import _decide_windows as windows
from rackplane.policies import _keyring as keyring
from rackplane.policies._checks import Emitter
from rackplane.policies._checks import Rejected as Rejected
from rackplane.policies.quotas import QueueBook
from rackplane.projections.state import (
    ClusterState,
)


def decide(
    state: ClusterState,
    command: Command,
    *,
    now: datetime,
    position: CommandPosition | None = None,
) -> list[Event]:
    """Return the events `command` causes in `state`.

    Args:
        state: the cluster's current state.
        command: a command addressed to `state.cluster`.
        now: the decision time; events carry max(now, time of the last event).
        position: where the command was read from the commands topic; stamped on its events,
            so the log records that it was decided.

    Returns:
        The events to append, in order: [] for a redelivered command, one `CommandIgnored`
        for a command with nothing to do, one `CommandRejected` for a command the state
        forbids.

    Raises:
        ValueError: the command is addressed to another cluster (a routing bug).
    """
    if command.cluster != state.cluster:
        raise ValueError(f"command {command.id} for {command.cluster!r} sent to {state.cluster!r}")
    if command.id in state.seen:
        return []
    if position is not None and state.decided(*position):
        return []
    out = Emitter(state, command, now, position)
    try:
        _decide(state, command, out)
    except Rejected as r:
        out.events.clear()
        out.emit(
            CommandRejected,
            command_id=command.id,
            command_type=command.type,
            code=r.code,
            reason=r.reason,
        )
    except chk.Ignored as i:
        out.events.clear()
        out.emit(CommandIgnored, command_id=command.id, command_type=command.type, reason=i.reason)
    return out.events


def refuse_oversized(
    state: ClusterState,
    command: Command,
    *,
    now: datetime,
    size: int,
    limit: int,
    position: CommandPosition | None = None,
) -> list[Event]:
    """The decision for a command whose events would not fit the event log's message limit:
    one `CommandRejected` (`event_too_large`) in their place, so that nothing is half written
    and the command is still on record.

    Args:
        state: the state the command was decided on.
        command: the command.
        now: the decision time.
        size: bytes its events would take.
        limit: the most bytes one decision may take.
        position: as for `decide`.
    """
    out = Emitter(state, command, now, position)
    out.emit(
        CommandRejected,
        command_id=command.id,
        command_type=command.type,
        code="event_too_large",
        reason=f"its events would take {size:,} bytes; the event log takes at most {limit:,}",
    )
    return out.events


def _decide(s: ClusterState, c: Command, out: Emitter) -> None:
    auth.check_authorized(s, c, authn.authenticate(s, c))
    match c:
        case RegisterTopology():
            _register_topology(s, c, out)
        case _ if not s.registered:
            chk.reject(
                "no_topology", f"cluster {s.cluster!r} has no topology yet: register one first"
            )
        case ConfigurePolicy():
            _configure_policy(s, c, out)
        case TrustKey():
            keyring.trust_key(s, c, out)
        case RevokeKey():
            keyring.revoke_key(s, c, out)
        case SubmitJob():
            _submit_job(s, c, out)
        case CancelJob(job=job, reason=reason):
            _end_job(s, job, JobStatus.CANCELLED, out, JobCancelled, reason=reason)
        case StartJob(job=job, pods=pods):
            _start_job(s, job, pods, out)
        case CompleteJob(job=job):
            _end_job(s, job, JobStatus.COMPLETED, out, JobCompleted)
        case FailJob(job=job, reason=reason):
            _end_job(s, job, JobStatus.FAILED, out, JobFailed, reason=reason)
        case ExpireJob(job=job):
            _end_job(s, job, JobStatus.FAILED, out, JobFailed, reason=_overdue(s, job, out.at))
        case ReportJobRuntime():
            _report_job_runtime(s, c, out)
        case ReportDisruptionBudget(job=job_id, allows=allows, budget=budget):
            protected = chk.job_state(s, job_id).protected_by
            if (protected is None) == allows:
                chk.ignore(
                    f"job {job_id}'s disruption budget "
                    + ("already allows disruptions" if allows else "already refuses them")
                )
            out.emit(DisruptionBudgetReported, job=job_id, allows=allows, budget=budget)
        case CordonNode(node=node, reason=reason):
            if chk.node_state(s, node).cordoned:
                chk.ignore(f"node {node} is already cordoned")
            out.emit(NodeCordoned, node=node, reason=reason)
        case UncordonNode(node=node):
            if not chk.node_state(s, node).cordoned:
                chk.ignore(f"node {node} is not cordoned")
            out.emit(NodeUncordoned, node=node)
        case ReportNodeHealth():
            _report_node_health(s, c, out)
        case RepairNode(node=node, note=note):
            n = chk.node_state(s, node)
            if n.health is not Health.FAILED:
                chk.reject("invalid_state", f"node {node} is {n.health.value}, not failed")
            out.emit(NodeRepaired, node=node, rack=n.rack, note=note)
        case ReportRackHealth():
            _report_rack_health(s, c, out)
        case PlaceJob():
            _place_job(s, c, out)
        case BlockJob():
            _block_job(s, c, out)
        case SwapNode():
            slices.swap_node(s, c, out)
        case MigrateSlice():
            slices.migrate_slice(s, c, out)
        case DegradeSlice():
            slices.degrade_slice(s, c, out)
        case PreemptJobs():
            slices.preempt_jobs(s, c, out)
        case PlanDefrag():
            slices.plan_defrag(s, c, out)
        case Reserve():
            windows.reserve(s, c, out)
        case StartReservation():
            windows.start(s, c, out)
        case EndReservation() | CancelReservation():
            windows.end(s, c, out)
        case _:
            assert_never(c)


# -- deciders --------------------------------------------------------------------------------


def _register_topology(s: ClusterState, c: RegisterTopology, out: Emitter) -> None:
    t = c.topology
    if t.cluster != c.cluster:
        chk.reject(
            "wrong_cluster", f"topology is of cluster {t.cluster!r}, command of {c.cluster!r}"
        )
    settings = c.settings or s.settings
    if s.settings.keys is not None:
        keyring.keys_kept(s, settings)
    _queues_kept(s, settings)
    if s.index is not None:
        if s.index.topology == t and settings == s.settings:
            chk.ignore("this topology and these settings are already registered")
        new_rack = {n: r.id for r in t.racks for n in r.nodes}
        moved = sorted(  # sorted: the rejection names the same first node under any hash seed
            n.id for n in s.nodes.values() if n.job is not None and new_rack.get(n.id) != n.rack
        )
        if moved:
            chk.reject(
                "topology_conflict",
                f"{len(moved)} allocated nodes would leave their rack (first: {moved[0]}); "
                "drain them before changing the topology",
            )
    out.emit(TopologyRegistered, topology=t, settings=settings)


def _configure_policy(s: ClusterState, c: ConfigurePolicy, out: Emitter) -> None:
    if c.settings == s.settings:
        chk.ignore("the policy settings are already these")
    keyring.keys_kept(s, c.settings)
    _queues_kept(s, c.settings)
    was_on = s.settings.allow_interactive_preemption
    turns_on = c.settings.allow_interactive_preemption and not was_on
    if turns_on and not c.reason.strip():
        chk.reject("reason_required", "allowing interactive preemption needs a reason: say why")
    out.emit(PolicyConfigured, settings=c.settings, reason=c.reason)


def _queues_kept(s: ClusterState, settings: PolicySettings) -> None:
    """Refuse settings that drop (or give children to) a queue unfinished jobs are in."""
    leaves = leaf_queues(settings.queues)
    for job in s.jobs.values():
        queue = job.spec.queue
        if queue is not None and queue not in leaves:
            waiting = sum(1 for j in s.jobs.values() if j.spec.queue == queue)
            chk.reject(
                "queue_in_use",
                f"queue {queue} still has {waiting} unfinished job(s) (first: {job.id}) and "
                "would no longer be a leaf queue; let them finish or cancel them first",
            )


def _resolve_queue(s: ClusterState, spec: JobSpec) -> JobSpec:
    """The spec with its queue resolved, or a rejection (no such queue, kind not allowed)."""
    settings = s.settings
    if not settings.queues:
        if spec.queue is not None:
            chk.reject(
                "unknown_queue", f"cluster {s.cluster!r} has no queues; submit without a queue"
            )
        return spec
    queue = spec.queue or settings.default_queue
    if queue is None:
        chk.reject(
            "unknown_queue",
            f"cluster {s.cluster!r} has queues and no default queue: name one "
            f"({', '.join(sorted(leaf_queues(settings.queues))[:8])})",
        )
    spec_of = {q.name: q for q in settings.queues}
    if queue not in leaf_queues(settings.queues):
        what = "has child queues" if queue in spec_of else "is not a queue"
        chk.reject("unknown_queue", f"queue {queue!r} {what}; jobs go to a leaf queue")
    if spec.kind not in spec_of[queue].kinds:
        kinds = ", ".join(k.value for k in spec_of[queue].kinds)
        chk.reject("kind_not_allowed", f"queue {queue} runs {kinds} jobs, not {spec.kind.value}")
    return spec if spec.queue == queue else spec.model_copy(update={"queue": queue})


def _submit_job(s: ClusterState, c: SubmitJob, out: Emitter) -> None:
    spec = c.job
    if spec.id in s.jobs or spec.id in s.finished:
        chk.reject("duplicate_job", f"job {spec.id} was already submitted")
    if spec.slice_size is None:
        spec = spec.model_copy(update={"slice_size": s.settings.slice_size})
    spec = _resolve_queue(s, spec)
    windows.check_member(s, spec)
    size = spec.slice_sizes[0]
    if spec.min_nodes_per_slice is not None and spec.min_nodes_per_slice > size:
        chk.reject(
            "shape_mismatch",
            f"min_nodes_per_slice ({spec.min_nodes_per_slice}) exceeds the slice size ({size})",
        )
    keep = s.settings.spares_per_rack
    sizes = chk.rack_sizes(s, keep)  # O(1): counted once per topology
    largest = sizes.largest
    if s.settings.rack_local_slices and size > largest:
        chk.reject(
            "too_large",
            f"a slice of {size} nodes cannot fit any rack (the largest has {largest} nodes); "
            "submit with a smaller slice_size",
        )
    total = len(s.nodes)
    if spec.nodes > total:
        chk.reject("too_large", f"job needs {spec.nodes} nodes; the cluster has {total}")
    # Spares are kept for swaps: only a job that may borrow them ever runs on them.
    if keep and not (s.settings.borrow_spares and chk.may_borrow(s.settings, spec)):
        room = sizes.room
        if s.settings.rack_local_slices and size > room:
            fix = f"submit with slice_size {room} or less" if room > 0 else "lower spares_per_rack"
            if s.settings.borrow_spares:
                longest = s.settings.borrow_max_duration
                fix += f", or as a managed job expected to end within {longest} (it borrows)"
            chk.reject(
                "too_large",
                f"a slice of {size} nodes can never be placed: no rack has more than "
                f"{max(room, 0)} nodes outside its {keep} spare(s); {fix}",
            )
        outside = sizes.outside
        if spec.nodes > outside:
            chk.reject(
                "too_large",
                f"job needs {spec.nodes} nodes; the cluster has {outside} outside its spares "
                f"({keep} per rack)",
            )
    out.emit(JobSubmitted, job=spec)


def _start_job(s: ClusterState, job_id: JobId, pods: tuple[str, ...], out: Emitter) -> None:
    job = chk.job_state(s, job_id)
    if job.status is JobStatus.RUNNING:
        chk.ignore(f"job {job_id} is already running")
    if job.status is not JobStatus.PLACED:
        chk.reject("invalid_state", f"job {job_id} is {job.status.value}; only a placed job starts")
    out.emit(JobStarted, job=job_id, pods=pods)


def _report_job_runtime(s: ClusterState, c: ReportJobRuntime, out: Emitter) -> None:
    job = chk.job_state(s, c.job)
    strangers = sorted(set(c.nodes) - set(job.nodes))
    if strangers:
        chk.reject(
            "invalid_state",
            f"job {c.job} does not hold node(s) {', '.join(strangers[:5])}: its runtime "
            "cannot run it there",
        )
    out.emit(JobRuntimeReported, job=c.job, action=c.action, nodes=c.nodes, detail=c.detail)


def _end_job(
    s: ClusterState,
    job_id: JobId,
    final: JobStatus,
    out: Emitter,
    cls: type[EventEnvelope],
    **fields: Any,
) -> None:
    if s.finished.get(job_id) is final:
        chk.ignore(f"job {job_id} is already {final.value}")
    job = chk.job_state(s, job_id)
    if final is not JobStatus.CANCELLED and not job.status.holds_nodes:
        chk.reject("invalid_state", f"job {job_id} is {job.status.value}; it has not run")
    out.emit(cls, job=job_id, released=job.nodes, **fields)


def _overdue(s: ClusterState, job_id: JobId, now: datetime) -> str:
    """Why `job_id` is ended for its time limit (`time_limit: ...`), or a rejection."""
    if s.finished.get(job_id) is JobStatus.FAILED:
        chk.ignore(f"job {job_id} is already failed")
    job = chk.job_state(s, job_id)
    limit, started = job.spec.time_limit, job.started_at
    if limit is None:
        chk.reject("invalid_state", f"job {job_id} has no time limit")
    if job.status is not JobStatus.RUNNING or started is None:
        chk.reject("invalid_state", f"job {job_id} is {job.status.value}, not running")
    if now < started + limit:
        chk.reject(
            "invalid_state",
            f"job {job_id} may run until {(started + limit).isoformat()} (time limit {limit})",
        )
    return f"time_limit: ran {now - started} since {started.isoformat()}, its limit is {limit}"


def _report_node_health(s: ClusterState, c: ReportNodeHealth, out: Emitter) -> None:
    node = chk.node_state(s, c.node)
    repaired = s.repairs.get(node.id)
    if c.seen is not None and repaired is not None and c.seen < repaired:
        chk.ignore(
            f"node {node.id} was repaired at seq {repaired}, after the view this report was "
            f"made on (seq {c.seen}): its evidence predates the repair"
        )
    if c.health is node.health:
        chk.ignore(f"node {node.id} is already {node.health.value}")
    where = {"node": node.id, "rack": node.rack, "cause": c.cause}
    if c.health is Health.FAILED:
        out.emit(NodeFailed, job=node.job, slice=node.slice, **where)
    elif node.health is Health.FAILED:
        chk.reject(
            "invalid_state",
            f"node {node.id} is failed; it returns only through RepairNode, not a health report",
        )
    elif c.health is Health.DEGRADED:
        out.emit(NodeDegraded, job=node.job, slice=node.slice, **where)
    else:
        out.emit(NodeRecovered, **where)


def _report_rack_health(s: ClusterState, c: ReportRackHealth, out: Emitter) -> None:
    rack = s.racks.get(c.rack)
    if rack is None:
        chk.reject("unknown_rack", f"rack {c.rack} is not in cluster {s.cluster!r}")
    if c.health is rack.health:
        chk.ignore(f"rack {c.rack} is already {rack.health.value}")
    if c.health is RackHealth.HEALTHY:
        out.emit(RackRecovered, rack=c.rack, cause=c.cause)
        return
    assert s.index is not None
    jobs = dict.fromkeys(j for n in s.index.rack(c.rack).nodes if (j := s.nodes[n].job) is not None)
    if c.health is RackHealth.FAILED:
        out.emit(RackFailed, rack=c.rack, cause=c.cause, jobs=tuple(jobs))
    else:  # degraded: from healthy, or from failed (part of the fabric back)
        out.emit(RackDegraded, rack=c.rack, cause=c.cause, jobs=tuple(jobs))


def _place_job(s: ClusterState, c: PlaceJob, out: Emitter) -> None:
    job = chk.job_state(s, c.job)
    if job.status is not JobStatus.QUEUED:
        chk.reject(
            "invalid_state", f"job {c.job} is {job.status.value}; only a queued job is placed"
        )
    want = job.spec.slice_sizes
    got = tuple(len(a.nodes) for a in c.slices)
    if got != want:
        chk.reject(
            "shape_mismatch", f"job {c.job} needs slices of {list(want)} nodes, got {list(got)}"
        )
    nodes = [n for a in c.slices for n in a.nodes]
    chk.check_available(s, nodes)
    placed = []
    for i, a in enumerate(c.slices):
        racks = chk.racks(s, a.nodes)
        chk.check_rack_local(s, f"slice {i} of job {c.job}", racks)
        placed.append(PlacedSlice(index=i, nodes=a.nodes, racks=racks))
    chk.check_reservations(s, c.job, nodes)
    windows.check_windows(s, job, nodes, out.at)
    book = QueueBook.of(s)
    if book is not None and book.leaf(job.spec.queue):
        over = book.over_limit(job.spec.queue or "", len(nodes))
        if over is not None:
            chk.reject("over_quota", over.explanation)
    if c.borrowing:
        why = chk.borrowable(s, job)
        if why is not None:
            chk.reject("not_borrowable", why)
    else:
        chk.check_spare_reserve(s, nodes)
    out.emit(
        JobPlaced,
        job=c.job,
        slices=tuple(placed),
        borrowing=c.borrowing,
        explanation=c.explanation,
    )


def _block_job(s: ClusterState, c: BlockJob, out: Emitter) -> None:
    job = chk.job_state(s, c.job)
    if job.status is not JobStatus.QUEUED:
        chk.reject("invalid_state", f"job {c.job} is {job.status.value}, not queued")
    b = job.blocked
    if (
        b is not None
        and b.reason == c.reason
        and b.allocatable_nodes == c.allocatable_nodes
        and b.placeable_slices == c.placeable_slices
        and (b.explanation == c.explanation or c.reason != "reservation")
    ):
        chk.ignore(f"job {c.job} is already blocked for the same reason with the same numbers")
    out.emit(
        JobBlocked,
        job=c.job,
        reason=c.reason,
        requested_nodes=job.spec.nodes,
        slice_sizes=job.spec.slice_sizes,
        allocatable_nodes=c.allocatable_nodes,
        placeable_slices=c.placeable_slices,
        explanation=c.explanation,
        standing=c.standing,
    )
