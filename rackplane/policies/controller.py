"""The controller's decider: `decide(state, command, *, now) -> events`.

Rules of this file:
- Pure: same state, command and `now`, same events. No I/O, no clock.
- A command id already applied returns [] (redelivery is harmless).
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

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NoReturn, assert_never

from rackplane.models import (
    BlockJob,
    CancelJob,
    Command,
    CommandIgnored,
    CommandRejected,
    CompleteJob,
    ConfigurePolicy,
    CordonNode,
    DefragPlanned,
    DegradeSlice,
    Event,
    EventEnvelope,
    FailJob,
    Health,
    JobBlocked,
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobId,
    JobKind,
    JobPlaced,
    JobPreempted,
    JobStarted,
    JobStatus,
    JobSubmitted,
    MigrateSlice,
    NodeCordoned,
    NodeDegraded,
    NodeFailed,
    NodeId,
    NodeRecovered,
    NodeRepaired,
    NodeSwapped,
    NodeUncordoned,
    PlacedSlice,
    PlaceJob,
    PlanDefrag,
    PolicyConfigured,
    PreemptJobs,
    RackFailed,
    RackHealth,
    RackId,
    RackRecovered,
    RegisterTopology,
    RejectionCode,
    RepairNode,
    ReportNodeHealth,
    ReportRackHealth,
    SliceDegraded,
    SliceMigrated,
    StartJob,
    SubmitJob,
    SwapNode,
    TopologyRegistered,
    UncordonNode,
)
from rackplane.projections.state import (
    ClusterState,
    JobState,
    NodeState,
    SliceState,
    restart_cost,
)


class _Ignored(Exception):
    """Raised inside the decider when a command asks for what already holds."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Rejected(Exception):
    """Raised inside the decider; `decide` turns it into a `CommandRejected` event."""

    def __init__(self, code: RejectionCode, reason: str) -> None:
        super().__init__(reason)
        self.code: RejectionCode = code
        self.reason = reason


def decide(state: ClusterState, command: Command, *, now: datetime) -> list[Event]:
    """Return the events `command` causes in `state`.

    Args:
        state: the cluster's current state.
        command: a command addressed to `state.cluster`.
        now: the decision time; events carry max(now, time of the last event).

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
    out = _Emitter(state, command, now)
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
    except _Ignored as i:
        out.events.clear()
        out.emit(CommandIgnored, command_id=command.id, command_type=command.type, reason=i.reason)
    return out.events


class _Emitter:
    """Stamps the envelope on each event: gapless seq, time, actor, causation."""

    def __init__(self, state: ClusterState, command: Command, now: datetime) -> None:
        self.state = state
        self.command = command
        self.at = max(now, state.at) if state.at is not None else now
        self.events: list[Event] = []

    def emit(self, cls: type[EventEnvelope], **fields: Any) -> None:
        seq = self.state.seq + len(self.events) + 1
        cmd = self.command
        event = cls(
            id=f"{self.state.cluster}/{seq}",
            cluster=self.state.cluster,
            seq=seq,
            at=self.at,
            actor=cmd.actor,
            causation_id=cmd.id,
            correlation_id=cmd.correlation_id or cmd.id,
            **fields,
        )
        self.events.append(event)  # type: ignore[arg-type]  # cls is one of the Event members


def _decide(s: ClusterState, c: Command, out: _Emitter) -> None:
    match c:
        case RegisterTopology():
            _register_topology(s, c, out)
        case _ if not s.registered:
            _reject("no_topology", f"cluster {s.cluster!r} has no topology yet: register one first")
        case ConfigurePolicy(settings=settings):
            if settings == s.settings:
                _ignore("the policy settings are already these")
            out.emit(PolicyConfigured, settings=settings)
        case SubmitJob():
            _submit_job(s, c, out)
        case CancelJob(job=job, reason=reason):
            _end_job(s, job, JobStatus.CANCELLED, out, JobCancelled, reason=reason)
        case StartJob(job=job):
            _start_job(s, job, out)
        case CompleteJob(job=job):
            _end_job(s, job, JobStatus.COMPLETED, out, JobCompleted)
        case FailJob(job=job, reason=reason):
            _end_job(s, job, JobStatus.FAILED, out, JobFailed, reason=reason)
        case CordonNode(node=node, reason=reason):
            if _node(s, node).cordoned:
                _ignore(f"node {node} is already cordoned")
            out.emit(NodeCordoned, node=node, reason=reason)
        case UncordonNode(node=node):
            if not _node(s, node).cordoned:
                _ignore(f"node {node} is not cordoned")
            out.emit(NodeUncordoned, node=node)
        case ReportNodeHealth():
            _report_node_health(s, c, out)
        case RepairNode(node=node, note=note):
            n = _node(s, node)
            if n.health is not Health.FAILED:
                _reject("invalid_state", f"node {node} is {n.health.value}, not failed")
            out.emit(NodeRepaired, node=node, rack=n.rack, note=note)
        case ReportRackHealth():
            _report_rack_health(s, c, out)
        case PlaceJob():
            _place_job(s, c, out)
        case BlockJob():
            _block_job(s, c, out)
        case SwapNode():
            _swap_node(s, c, out)
        case MigrateSlice():
            _migrate_slice(s, c, out)
        case DegradeSlice():
            _degrade_slice(s, c, out)
        case PreemptJobs():
            _preempt_jobs(s, c, out)
        case PlanDefrag():
            _plan_defrag(s, c, out)
        case _:
            assert_never(c)


def _reject(code: RejectionCode, reason: str) -> NoReturn:
    raise Rejected(code, reason)


def _ignore(reason: str) -> NoReturn:
    raise _Ignored(reason)


# -- lookups that reject ---------------------------------------------------------------------


def _node(s: ClusterState, node: NodeId) -> NodeState:
    state = s.nodes.get(node)
    if state is None:
        _reject("unknown_node", f"node {node} is not in cluster {s.cluster!r}")
    return state


def _job(s: ClusterState, job: JobId) -> JobState:
    state = s.jobs.get(job)
    if state is None:
        final = s.finished.get(job)
        if final is not None:
            _reject("invalid_state", f"job {job} is already {final.value}")
        _reject("unknown_job", f"job {job} was never submitted")
    return state


def _holding_job(s: ClusterState, job: JobId) -> JobState:
    state = _job(s, job)
    if not state.status.holds_nodes:
        _reject("invalid_state", f"job {job} is {state.status.value} and holds no nodes")
    return state


def _slice(job: JobState, index: int) -> SliceState:
    if index >= len(job.slices):
        _reject("shape_mismatch", f"job {job.id} has {len(job.slices)} slices, no slice {index}")
    return job.slices[index]


def _check_available(s: ClusterState, nodes: Sequence[NodeId]) -> None:
    """Reject unless every node exists, appears once, and may take new work."""
    twice = [n for n, k in Counter(nodes).items() if k > 1]
    if twice:
        _reject("shape_mismatch", f"node {twice[0]} is proposed twice")
    for n in nodes:
        node = _node(s, n)
        if node.available and s.racks[node.rack].healthy:
            continue
        if node.job is not None:
            why = f"allocated to job {node.job} (slice {node.slice})"
        elif node.health is not Health.HEALTHY:
            why = node.health.value + (f" ({node.cause})" if node.cause else "")
        elif node.cordoned:
            why = "cordoned"
        else:
            why = f"in rack {node.rack}, which is failed"
        _reject("node_unavailable", f"node {n} is {why}")


def _racks(s: ClusterState, nodes: Iterable[NodeId]) -> tuple[RackId, ...]:
    return tuple(dict.fromkeys(s.nodes[n].rack for n in nodes))


def _check_rack_local(s: ClusterState, what: str, racks: tuple[RackId, ...]) -> None:
    if s.settings.rack_local_slices and len(racks) > 1:
        _reject("slice_spans_racks", f"{what} would span racks {', '.join(racks)}")


def _check_spare_reserve(s: ClusterState, nodes: Iterable[NodeId]) -> None:
    """Placement and migration must leave each rack its spare nodes."""
    keep = s.settings.spares_per_rack
    taken = Counter(s.nodes[n].rack for n in nodes)
    for rack, k in taken.items():
        left = len(s.racks[rack].available) - k
        if left < keep:
            _reject(
                "spare_reserve",
                f"rack {rack} would keep {left} free nodes, below its {keep} spares "
                f"(spares are used only by swaps)",
            )


def _check_reservations(s: ClusterState, job: JobId, nodes: Iterable[NodeId]) -> None:
    """Racks a defrag plan holds for a blocked job take no other work."""
    if not s.reservations:
        return
    for rack in _racks(s, nodes):
        holder = s.reservations.get(rack)
        if holder is not None and holder != job:
            _reject("reserved", f"rack {rack} is reserved for job {holder} by a defrag plan")


def _borrowable(s: ClusterState, job: JobState) -> str | None:
    """Why `job` may not borrow spares, or None when it may."""
    if not s.settings.borrow_spares:
        return "borrowing spares is switched off for this cluster"
    if job.spec.kind is not JobKind.MANAGED:
        return f"job {job.id} is {job.spec.kind.value}; only managed jobs borrow spares"
    d = job.spec.expected_duration
    if d is None or d > s.settings.borrow_max_duration:
        return (
            f"job {job.id} is not short: borrowing needs an expected duration of at most "
            f"{s.settings.borrow_max_duration}"
        )
    return None


def _impaired(s: ClusterState, job: JobState) -> bool:
    """True when a slice of the job has a failed node or sits in a failed rack."""
    return any(
        s.nodes[n].health is Health.FAILED or not s.racks[s.nodes[n].rack].healthy
        for n in job.nodes
    )


# -- deciders --------------------------------------------------------------------------------


def _register_topology(s: ClusterState, c: RegisterTopology, out: _Emitter) -> None:
    t = c.topology
    if t.cluster != c.cluster:
        _reject("wrong_cluster", f"topology is of cluster {t.cluster!r}, command of {c.cluster!r}")
    settings = c.settings or s.settings
    if s.index is not None:
        if s.index.topology == t and settings == s.settings:
            _ignore("this topology and these settings are already registered")
        new_rack = {n: r.id for r in t.racks for n in r.nodes}
        moved = [
            n.id for n in s.nodes.values() if n.job is not None and new_rack.get(n.id) != n.rack
        ]
        if moved:
            _reject(
                "topology_conflict",
                f"{len(moved)} allocated nodes would leave their rack (first: {moved[0]}); "
                "drain them before changing the topology",
            )
    out.emit(TopologyRegistered, topology=t, settings=settings)


def _submit_job(s: ClusterState, c: SubmitJob, out: _Emitter) -> None:
    spec = c.job
    if spec.id in s.jobs or spec.id in s.finished:
        _reject("duplicate_job", f"job {spec.id} was already submitted")
    if spec.slice_size is None:
        spec = spec.model_copy(update={"slice_size": s.settings.slice_size})
    size = spec.slice_sizes[0]
    if spec.min_nodes_per_slice is not None and spec.min_nodes_per_slice > size:
        _reject(
            "shape_mismatch",
            f"min_nodes_per_slice ({spec.min_nodes_per_slice}) exceeds the slice size ({size})",
        )
    largest = max(r.size for r in s.racks.values())
    if s.settings.rack_local_slices and size > largest:
        _reject(
            "too_large",
            f"a slice of {size} nodes cannot fit any rack (the largest has {largest} nodes); "
            "submit with a smaller slice_size",
        )
    total = len(s.nodes)
    if spec.nodes > total:
        _reject("too_large", f"job needs {spec.nodes} nodes; the cluster has {total}")
    out.emit(JobSubmitted, job=spec)


def _start_job(s: ClusterState, job_id: JobId, out: _Emitter) -> None:
    job = _job(s, job_id)
    if job.status is JobStatus.RUNNING:
        _ignore(f"job {job_id} is already running")
    if job.status is not JobStatus.PLACED:
        _reject("invalid_state", f"job {job_id} is {job.status.value}; only a placed job starts")
    out.emit(JobStarted, job=job_id)


def _end_job(
    s: ClusterState,
    job_id: JobId,
    final: JobStatus,
    out: _Emitter,
    cls: type[EventEnvelope],
    **fields: Any,
) -> None:
    if s.finished.get(job_id) is final:
        _ignore(f"job {job_id} is already {final.value}")
    job = _job(s, job_id)
    if final is not JobStatus.CANCELLED and not job.status.holds_nodes:
        _reject("invalid_state", f"job {job_id} is {job.status.value}; it has not run")
    out.emit(cls, job=job_id, released=job.nodes, **fields)


def _report_node_health(s: ClusterState, c: ReportNodeHealth, out: _Emitter) -> None:
    node = _node(s, c.node)
    if c.health is node.health:
        _ignore(f"node {node.id} is already {node.health.value}")
    where = {"node": node.id, "rack": node.rack, "cause": c.cause}
    if c.health is Health.FAILED:
        out.emit(NodeFailed, job=node.job, slice=node.slice, **where)
    elif node.health is Health.FAILED:
        _reject(
            "invalid_state",
            f"node {node.id} is failed; it returns only through RepairNode, not a health report",
        )
    elif c.health is Health.DEGRADED:
        out.emit(NodeDegraded, job=node.job, slice=node.slice, **where)
    else:
        out.emit(NodeRecovered, **where)


def _report_rack_health(s: ClusterState, c: ReportRackHealth, out: _Emitter) -> None:
    rack = s.racks.get(c.rack)
    if rack is None:
        _reject("unknown_rack", f"rack {c.rack} is not in cluster {s.cluster!r}")
    if c.health is rack.health:
        _ignore(f"rack {c.rack} is already {rack.health.value}")
    if c.health is RackHealth.FAILED:
        assert s.index is not None
        jobs = dict.fromkeys(
            j for n in s.index.rack(c.rack).nodes if (j := s.nodes[n].job) is not None
        )
        out.emit(RackFailed, rack=c.rack, cause=c.cause, jobs=tuple(jobs))
    else:
        out.emit(RackRecovered, rack=c.rack, cause=c.cause)


def _place_job(s: ClusterState, c: PlaceJob, out: _Emitter) -> None:
    job = _job(s, c.job)
    if job.status is not JobStatus.QUEUED:
        _reject("invalid_state", f"job {c.job} is {job.status.value}; only a queued job is placed")
    want = job.spec.slice_sizes
    got = tuple(len(a.nodes) for a in c.slices)
    if got != want:
        _reject(
            "shape_mismatch", f"job {c.job} needs slices of {list(want)} nodes, got {list(got)}"
        )
    nodes = [n for a in c.slices for n in a.nodes]
    _check_available(s, nodes)
    placed = []
    for i, a in enumerate(c.slices):
        racks = _racks(s, a.nodes)
        _check_rack_local(s, f"slice {i} of job {c.job}", racks)
        placed.append(PlacedSlice(index=i, nodes=a.nodes, racks=racks))
    _check_reservations(s, c.job, nodes)
    if c.borrowing:
        why = _borrowable(s, job)
        if why is not None:
            _reject("not_borrowable", why)
    else:
        _check_spare_reserve(s, nodes)
    out.emit(
        JobPlaced,
        job=c.job,
        slices=tuple(placed),
        borrowing=c.borrowing,
        explanation=c.explanation,
    )


def _block_job(s: ClusterState, c: BlockJob, out: _Emitter) -> None:
    job = _job(s, c.job)
    if job.status is not JobStatus.QUEUED:
        _reject("invalid_state", f"job {c.job} is {job.status.value}, not queued")
    b = job.blocked
    if (
        b is not None
        and b.reason == c.reason
        and b.allocatable_nodes == c.allocatable_nodes
        and b.placeable_slices == c.placeable_slices
    ):
        _ignore(f"job {c.job} is already blocked for the same reason with the same numbers")
    out.emit(
        JobBlocked,
        job=c.job,
        reason=c.reason,
        requested_nodes=job.spec.nodes,
        slice_sizes=job.spec.slice_sizes,
        allocatable_nodes=c.allocatable_nodes,
        placeable_slices=c.placeable_slices,
        explanation=c.explanation,
    )


def _swap_node(s: ClusterState, c: SwapNode, out: _Emitter) -> None:
    job = _holding_job(s, c.job)
    sl = _slice(job, c.slice)
    if c.old_node not in sl.nodes:
        _reject("invalid_state", f"node {c.old_node} is not in slice {c.slice} of job {c.job}")
    _check_available(s, [c.new_node])
    old_rack = s.nodes[c.old_node].rack
    new_rack = s.nodes[c.new_node].rack
    if new_rack != old_rack and s.settings.rack_local_slices:
        _reject(
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


def _migrate_slice(s: ClusterState, c: MigrateSlice, out: _Emitter) -> None:
    job = _holding_job(s, c.job)
    sl = _slice(job, c.slice)
    if len(c.nodes) != sl.size:
        _reject(
            "shape_mismatch",
            f"slice {c.slice} of job {c.job} needs {sl.size} nodes, got {len(c.nodes)}",
        )
    _check_available(s, c.nodes)
    racks = _racks(s, c.nodes)
    _check_rack_local(s, f"slice {c.slice} of job {c.job}", racks)
    _check_reservations(s, c.job, c.nodes)
    _check_spare_reserve(s, c.nodes)
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


def _degrade_slice(s: ClusterState, c: DegradeSlice, out: _Emitter) -> None:
    job = _holding_job(s, c.job)
    sl = _slice(job, c.slice)
    floor = job.spec.min_nodes_per_slice
    if floor is None:
        _reject("not_degradable", f"job {c.job} does not allow degraded running")
    if not s.settings.ntp_allowed:
        _reject("not_degradable", "degraded running (NTP) is switched off for this cluster")
    strangers = [n for n in c.remove if n not in sl.nodes]
    if strangers or len(set(c.remove)) != len(c.remove):
        _reject("invalid_state", f"nodes to remove must be distinct members of slice {c.slice}")
    after = len(sl.nodes) - len(c.remove)
    if after < floor:
        _reject(
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


def _preempt_jobs(s: ClusterState, c: PreemptJobs, out: _Emitter) -> None:
    if len(set(c.jobs)) != len(c.jobs):
        _reject("shape_mismatch", "a job is named twice")
    victims = [_holding_job(s, j) for j in c.jobs]
    by_policy = c.actor.startswith("policy:")
    allowed_by = s.interactive_preemption_allowed_by if by_policy else c.actor
    for job in victims:
        kind = job.spec.kind
        if c.cause == "failure":
            # A job that lost a node nothing could replace cannot run anyway: any kind requeues.
            if not _impaired(s, job):
                _reject("invalid_state", f"job {job.id} has no failed node to requeue it for")
        elif c.cause == "eviction":
            if not job.borrowing:
                _reject("invalid_state", f"job {job.id} runs on no borrowed spare")
        elif kind is JobKind.INFERENCE:
            _reject("not_preemptible", f"job {job.id} is an inference service: never preempted")
        elif kind is JobKind.INTERACTIVE and not (c.allow_interactive and allowed_by):
            _reject(
                "not_preemptible",
                f"job {job.id} is interactive: preempted only with an operator's explicit consent",
            )
    for job in victims:
        consent = job.spec.kind is JobKind.INTERACTIVE and c.cause in ("defrag", "operator")
        out.emit(
            JobPreempted,
            job=job.id,
            cause=c.cause,
            reason=c.reason,
            released=job.nodes,
            lost_gpu_hours=restart_cost(s, job, out.at),
            interactive_allowed_by=allowed_by if consent else None,
            explanation=c.explanation,
        )


def _plan_defrag(s: ClusterState, c: PlanDefrag, out: _Emitter) -> None:
    job = _job(s, c.job)
    if job.status.final:
        _reject("invalid_state", f"job {c.job} is {job.status.value}")
    for rack in c.target_racks:
        state = s.racks.get(rack)
        if state is None:
            _reject("unknown_rack", f"rack {rack} is not in cluster {s.cluster!r}")
        if not state.healthy:
            _reject("invalid_state", f"rack {rack} is failed")
        holder = s.reservations.get(rack)
        if holder is not None and holder != c.job:
            _reject("reserved", f"rack {rack} is already reserved for job {holder}")
    for victim in c.victims:
        _holding_job(s, victim)
    out.emit(
        DefragPlanned,
        job=c.job,
        target_racks=c.target_racks,
        victims=c.victims,
        cost_gpu_hours=c.cost_gpu_hours,
        alternatives=c.alternatives,
        explanation=c.explanation,
    )
