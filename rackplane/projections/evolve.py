"""`evolve(state, event) -> state`: apply one fact. Never decides.

Events were validated by `decide` before they were appended, so each handler only records
what happened. An event already applied (seq <= state.seq) is skipped, which makes replay and
redelivery harmless. A gap in seq, or an event of another cluster, means the log is corrupt or
mis-routed: that raises (a programming or infrastructure error, not a domain outcome).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from immutables import Map

from rackplane.models import (
    ClusterId,
    CommandIgnored,
    CommandRejected,
    DefragPlanned,
    Event,
    Health,
    JobBlocked,
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobId,
    JobPlaced,
    JobPreempted,
    JobStarted,
    JobStatus,
    JobSubmitted,
    NodeCordoned,
    NodeDegraded,
    NodeFailed,
    NodeId,
    NodeRecovered,
    NodeRepaired,
    NodeSwapped,
    NodeUncordoned,
    PolicyConfigured,
    RackFailed,
    RackHealth,
    RackId,
    RackRecovered,
    SliceDegraded,
    SliceMigrated,
    TopologyIndex,
    TopologyRegistered,
)
from rackplane.projections.state import (
    BlockInfo,
    ClusterState,
    JobState,
    NodeState,
    RackState,
    SliceState,
)


class EventGap(RuntimeError):
    """The next event's seq is not state.seq + 1: events were lost or reordered."""


class WrongCluster(RuntimeError):
    """An event of one cluster was folded into another cluster's state."""


def evolve(state: ClusterState, event: Event) -> ClusterState:
    """Apply one event.

    Args:
        state: the state after event `state.seq`.
        event: the next event of the same cluster.

    Returns:
        The state after `event`; `state` itself when the event was already applied.

    Raises:
        EventGap: `event.seq` skips ahead of `state.seq + 1`.
        WrongCluster: the event belongs to another cluster.
    """
    if not _is_next(state.cluster, state.seq, event):
        return state
    b = _Builder(state)
    b.apply(event)
    return b.finish()


def fold(state: ClusterState, events: Iterable[Event]) -> ClusterState:
    """Apply events in order (a replay): the state `evolve` would give event by event, without
    building the states in between (one builder takes a run of events; a registration, which
    reads the state before it, goes through `evolve`). Raises as `evolve` does."""
    b = _Builder(state)
    for event in events:
        if not _is_next(b.cluster, b.seq, event):
            continue
        if isinstance(event, TopologyRegistered):
            b = _Builder(evolve(b.finish(), event))
        else:
            b.apply(event)
    return b.finish()


def _is_next(cluster: ClusterId, seq: int, event: Event) -> bool:
    """True for the next event; False for one already applied; raises for the others."""
    if event.cluster != cluster:
        raise WrongCluster(f"event {event.id} of cluster {event.cluster!r} folded into {cluster!r}")
    if event.seq <= seq:
        return False
    if event.seq != seq + 1:
        raise EventGap(f"cluster {cluster!r} is at seq {seq}; next event has seq {event.seq}")
    return True


class _Builder:
    """Collects the changes of one event, keeping `RackState.free` consistent with nodes."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.index = state.index
        self.settings = state.settings
        self.nodes = state.nodes.mutate()
        self.racks = state.racks.mutate()
        self.jobs = state.jobs.mutate()
        self.finished = state.finished
        self.reservations = state.reservations
        self.allowed_by = state.interactive_preemption_allowed_by
        self.allowed_why = state.interactive_preemption_reason
        self.cluster = state.cluster
        self.seq = state.seq
        self.at = state.at
        self.seen = state.seen

    def apply(self, event: Event) -> None:
        """Apply one event (the next one: the caller checked its seq)."""
        _HANDLERS[type(event)](self, event)
        if event.causation_id is not None:
            self.seen = self.seen.add(event.causation_id, event.seq)
        self.seq, self.at = event.seq, event.at

    def node(self, node: NodeId) -> NodeState:
        return self.nodes[node]

    def put_node(self, new: NodeState) -> None:
        old = self.nodes[new.id]
        self.nodes[new.id] = new
        if old.available != new.available:
            r = self.racks[new.rack]
            free = r.free | {new.id} if new.available else r.free - {new.id}
            self.racks[new.rack] = RackState(
                r.id, r.pod, r.size, r.gpus_per_node, free, r.health, r.cause
            )

    def update_node(self, node: NodeId, **changes: Any) -> None:
        # Built field by field: dataclasses.replace costs ~6 us (a quarter of a simulated
        # year went there); this is the hottest line of a fold.
        old = self.nodes[node]
        get = changes.get
        self.put_node(
            NodeState(
                old.id,
                old.rack,
                get("health", old.health),
                get("cordoned", old.cordoned),
                get("job", old.job),
                get("slice", old.slice),
                get("cause", old.cause),
            )
        )

    def assign(self, job: JobId, slice_index: int, nodes: Iterable[NodeId]) -> None:
        self._serve(nodes, job, slice_index)

    def release(self, nodes: Iterable[NodeId]) -> None:
        self._serve(nodes, None, None)

    def _serve(self, nodes: Iterable[NodeId], job: JobId | None, index: int | None) -> None:
        """Set the job and slice of many nodes; each rack's free index is rebuilt once, not
        once per node (a 16-node placement built 16 frozensets: the bulk of a replay)."""
        table = self.nodes
        taken: dict[RackId, list[NodeId]] = {}
        freed: dict[RackId, list[NodeId]] = {}
        healthy = Health.HEALTHY
        for n in nodes:
            old = table[n]
            rack, health, cordoned = old.rack, old.health, old.cordoned
            table[n] = NodeState(n, rack, health, cordoned, job, index, old.cause)
            if health is healthy and not cordoned and (old.job is None) != (job is None):
                # `available` flips: healthy, uncordoned, and served by a job or not
                (freed if job is None else taken).setdefault(rack, []).append(n)
        for changes, add in ((taken, False), (freed, True)):
            for rack, ns in changes.items():
                r = self.racks[rack]
                free = r.free.union(ns) if add else r.free.difference(ns)
                self.racks[rack] = RackState(
                    r.id, r.pod, r.size, r.gpus_per_node, free, r.health, r.cause
                )

    def job(self, job: JobId) -> JobState:
        return self.jobs[job]

    def put_job(self, new: JobState) -> None:
        self.jobs[new.id] = new

    def finish_job(self, job: JobId, status: JobStatus) -> None:
        state = self.jobs[job]
        self.release(state.nodes)
        del self.jobs[job]
        self.finished = self.finished.set(job, status)
        self.release_reservations(job)

    def release_reservations(self, job: JobId) -> None:
        held = [r for r, j in self.reservations.items() if j == job]
        if held:
            m = self.reservations.mutate()
            for r in held:
                del m[r]
            self.reservations = m.finish()

    def replace_slice(self, job: JobState, new: SliceState) -> JobState:
        slices = tuple(new if s.index == new.index else s for s in job.slices)
        return replace(job, slices=slices)

    def finish(self) -> ClusterState:
        """The state after the events applied; the builder is spent."""
        # Built directly: dataclasses.replace costs several microseconds per event.
        return ClusterState(
            self.cluster,
            self.seq,
            self.at,
            self.index,
            self.settings,
            self.nodes.finish(),
            self.racks.finish(),
            self.jobs.finish(),
            self.finished,
            self.reservations,
            self.allowed_by,
            self.allowed_why,
            self.seen,
        )


def _racks_of(b: _Builder, nodes: Iterable[NodeId]) -> tuple[RackId, ...]:
    return tuple(dict.fromkeys(b.node(n).rack for n in nodes))


def _topology_registered(b: _Builder, e: TopologyRegistered) -> None:
    index = TopologyIndex(e.topology)
    old_nodes = b.state.nodes
    old_racks = b.state.racks
    nodes: dict[NodeId, NodeState] = {}
    racks: dict[RackId, RackState] = {}
    for rack in e.topology.racks:
        states = [old_nodes.get(n) or NodeState(id=n, rack=rack.id) for n in rack.nodes]
        nodes.update((s.id, s) for s in states)
        previous = old_racks.get(rack.id)
        racks[rack.id] = RackState(
            id=rack.id,
            pod=rack.pod,
            size=len(rack.nodes),
            gpus_per_node=rack.gpus_per_node,
            free=frozenset(s.id for s in states if s.available),
            health=previous.health if previous else RackHealth.HEALTHY,
            cause=previous.cause if previous else "",
        )
    b.index = index
    b.settings = e.settings
    b.allowed_by = e.actor if e.settings.allow_interactive_preemption else None
    b.allowed_why = "set in the registered cluster file" if b.allowed_by else ""
    b.nodes = Map(nodes).mutate()
    b.racks = Map(racks).mutate()


def _policy_configured(b: _Builder, e: PolicyConfigured) -> None:
    was_on = b.settings.allow_interactive_preemption
    b.settings = e.settings
    if not e.settings.allow_interactive_preemption:
        b.allowed_by = None
        b.allowed_why = ""
    elif not was_on:
        b.allowed_by = e.actor
        b.allowed_why = e.reason


def _job_submitted(b: _Builder, e: JobSubmitted) -> None:
    b.put_job(JobState(spec=e.job, status=JobStatus.QUEUED, order=e.seq, submitted_at=e.at))


def _job_blocked(b: _Builder, e: JobBlocked) -> None:
    job = b.job(e.job)
    since = job.blocked.since if job.blocked and job.blocked.reason == e.reason else e.at
    info = BlockInfo(e.reason, since, e.allocatable_nodes, e.placeable_slices, e.explanation)
    b.put_job(replace(job, blocked=info))


def _job_placed(b: _Builder, e: JobPlaced) -> None:
    job = b.job(e.job)
    sizes = job.spec.slice_sizes
    slices = tuple(
        SliceState(index=s.index, size=sizes[s.index], nodes=s.nodes, racks=s.racks)
        for s in e.slices
    )
    for s in slices:
        b.assign(job.id, s.index, s.nodes)
    b.put_job(
        replace(
            job,
            status=JobStatus.PLACED,
            slices=slices,
            placed_at=e.at,
            blocked=None,
            borrowing=e.borrowing,
            front=False,
        )
    )
    b.release_reservations(job.id)


def _job_started(b: _Builder, e: JobStarted) -> None:
    job = b.job(e.job)
    b.put_job(replace(job, status=JobStatus.RUNNING, started_at=e.at, run_since=e.at))


def _job_completed(b: _Builder, e: JobCompleted) -> None:
    b.finish_job(e.job, JobStatus.COMPLETED)


def _job_failed(b: _Builder, e: JobFailed) -> None:
    b.finish_job(e.job, JobStatus.FAILED)


def _job_cancelled(b: _Builder, e: JobCancelled) -> None:
    b.finish_job(e.job, JobStatus.CANCELLED)


def _job_preempted(b: _Builder, e: JobPreempted) -> None:
    job = b.job(e.job)
    b.release(job.nodes)
    b.put_job(
        replace(
            job,
            status=JobStatus.QUEUED,
            slices=(),
            placed_at=None,
            started_at=None,
            run_since=None,
            borrowing=False,
            front=e.cause in ("failure", "eviction"),
            preemptions=job.preemptions + 1,
        )
    )


def _node_cordoned(b: _Builder, e: NodeCordoned) -> None:
    b.update_node(e.node, cordoned=True)


def _node_uncordoned(b: _Builder, e: NodeUncordoned) -> None:
    b.update_node(e.node, cordoned=False)


def _node_failed(b: _Builder, e: NodeFailed) -> None:
    b.update_node(e.node, health=Health.FAILED, cause=e.cause)


def _node_degraded(b: _Builder, e: NodeDegraded) -> None:
    b.update_node(e.node, health=Health.DEGRADED, cause=e.cause)


def _node_recovered(b: _Builder, e: NodeRecovered) -> None:
    b.update_node(e.node, health=Health.HEALTHY, cause=e.cause)


def _node_repaired(b: _Builder, e: NodeRepaired) -> None:
    b.update_node(e.node, health=Health.HEALTHY, cause=e.note)


def _rack_failed(b: _Builder, e: RackFailed) -> None:
    b.racks[e.rack] = replace(b.racks[e.rack], health=RackHealth.FAILED, cause=e.cause)


def _rack_recovered(b: _Builder, e: RackRecovered) -> None:
    b.racks[e.rack] = replace(b.racks[e.rack], health=RackHealth.HEALTHY, cause=e.cause)


def _node_swapped(b: _Builder, e: NodeSwapped) -> None:
    job = b.job(e.job)
    old = job.slices[e.slice]
    nodes = tuple(e.new_node if n == e.old_node else n for n in old.nodes)
    b.release([e.old_node])
    b.assign(job.id, e.slice, [e.new_node])
    job = b.replace_slice(job, replace(old, nodes=nodes, racks=_racks_of(b, nodes)))
    b.put_job(replace(job, swaps=job.swaps + 1))


def _slice_migrated(b: _Builder, e: SliceMigrated) -> None:
    job = b.job(e.job)
    old = job.slices[e.slice]
    b.release(old.nodes)
    b.assign(job.id, e.slice, e.new_nodes)
    new = replace(old, nodes=e.new_nodes, racks=_racks_of(b, e.new_nodes))
    job = b.replace_slice(job, new)
    restarted = e.at if job.run_since is not None else None
    b.put_job(replace(job, migrations=job.migrations + 1, run_since=restarted))
    b.release_reservations(job.id)


def _slice_degraded(b: _Builder, e: SliceDegraded) -> None:
    job = b.job(e.job)
    old = job.slices[e.slice]
    removed = set(e.removed)
    nodes = tuple(n for n in old.nodes if n not in removed)
    b.release(e.removed)
    b.put_job(b.replace_slice(job, replace(old, nodes=nodes, racks=_racks_of(b, nodes))))


def _defrag_planned(b: _Builder, e: DefragPlanned) -> None:
    b.release_reservations(e.job)
    b.reservations = b.reservations.update(dict.fromkeys(e.target_racks, e.job))


def _on_record_only(b: _Builder, e: CommandRejected | CommandIgnored) -> None:
    """Nothing changes but seq and the command ids seen: the outcome is on record."""


def _handlers() -> dict[type[Any], Callable[[_Builder, Any], None]]:
    table: dict[type[Any], Callable[[_Builder, Any], None]] = {
        TopologyRegistered: _topology_registered,
        PolicyConfigured: _policy_configured,
        JobSubmitted: _job_submitted,
        JobBlocked: _job_blocked,
        JobPlaced: _job_placed,
        JobStarted: _job_started,
        JobCompleted: _job_completed,
        JobFailed: _job_failed,
        JobCancelled: _job_cancelled,
        JobPreempted: _job_preempted,
        NodeCordoned: _node_cordoned,
        NodeUncordoned: _node_uncordoned,
        NodeFailed: _node_failed,
        NodeDegraded: _node_degraded,
        NodeRecovered: _node_recovered,
        NodeRepaired: _node_repaired,
        RackFailed: _rack_failed,
        RackRecovered: _rack_recovered,
        NodeSwapped: _node_swapped,
        SliceMigrated: _slice_migrated,
        SliceDegraded: _slice_degraded,
        DefragPlanned: _defrag_planned,
        CommandRejected: _on_record_only,
        CommandIgnored: _on_record_only,
    }
    return table


_HANDLERS = _handlers()
