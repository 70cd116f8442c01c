"""`evolve(state, event) -> state`: apply one fact. Never decides.

Events were validated by `decide` before they were appended, so each handler only records
what happened. An event already applied (seq <= state.seq) is skipped, which makes replay and
redelivery harmless. A gap in seq, or an event of another cluster, means the log is corrupt or
mis-routed: that raises (a programming or infrastructure error, not a domain outcome).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from immutables import Map

from rackplane._gc import cycle_collection_paused
from rackplane.models import (
    ClusterId,
    CommandIgnored,
    CommandRejected,
    DefragPlanned,
    DisruptionBudgetReported,
    Event,
    Health,
    JobBlocked,
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobId,
    JobPlaced,
    JobPreempted,
    JobRuntimeReported,
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
    RackDegraded,
    RackFailed,
    RackHealth,
    RackId,
    RackRecovered,
    ReservationEnded,
    ReservationMade,
    ReservationStarted,
    SliceDegraded,
    SliceMigrated,
    TopologyIndex,
    TopologyRegistered,
)
from rackplane.projections import _changes
from rackplane.projections.state import (
    BlockInfo,
    ClusterState,
    JobState,
    NodeState,
    QueueUsage,
    RackState,
    SeenCommands,
    SliceState,
    Window,
    built_state,
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
    return _fold(state, (event,), lone=True)


def fold(state: ClusterState, events: Iterable[Event]) -> ClusterState:
    """Apply events in order (a replay): the state `evolve` would give event by event, without
    building the states in between (one builder takes a run of events; a registration, which
    reads the state before it, starts a new one). Raises as `evolve` does.

    The cyclic garbage collector is paused while it runs: folding allocates only acyclic
    objects (refcounting frees them all), and the collector's passes over a large heap (a
    decoded log of a million events) find nothing and cost time that grows with the heap.
    Cycles that `events` itself creates (a lazy decoder) wait for the end of the fold."""
    with cycle_collection_paused():
        return _fold(state, events)


def _fold(state: ClusterState, events: Iterable[Event], *, lone: bool = False) -> ClusterState:
    b = _Builder(state, lone=lone)
    cluster, handlers, registered = state.cluster, _HANDLERS, TopologyRegistered
    last, at = state.seq, state.at  # the builder's seq and at, kept in locals
    for event in events:
        seq = event.seq
        # the usual case (the next event of this cluster) in one comparison
        unusual = seq != last + 1 or event.cluster != cluster
        if unusual and not _is_next(cluster, last, event):
            continue
        kind = type(event)
        if kind is registered:
            b.seq, b.at = last, at
            b = _Builder(b.finish())  # a registration reads the state before it
        handlers[kind](b, event)
        command = event.causation_id
        if command is not None:
            b.remember(command, seq)
            offset = event.command_offset
            if offset is not None:
                b.applied_at(event.command_partition or 0, offset)
        last, at = seq, event.at
    b.seq, b.at = last, at
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
    """Collects the changes of a run of events, keeping `RackState.free` consistent with nodes.

    What changes on every job is kept in plain dicts and sets while events are applied and
    written into the persistent maps once, by `finish`: node assignments and free indexes
    (`serving`, `free`), job records (`jobs`, over the state's map), finished jobs and the
    command ids seen. A replay of a job submitted, placed, started and completed in the run
    never touches the job map, and writes each of its nodes once at the end, not twice per
    job. Health and cordon changes (rare) go straight to the node map, with the node's pending
    assignment folded in.
    """

    def __init__(self, state: ClusterState, *, lone: bool = False) -> None:
        self.state = state
        self.lone = lone
        """One event (`evolve`): no later release in the run reuses a rack's `down_in`."""
        self.index = state.index
        self.settings = state.settings
        self.nodes = state.nodes.mutate()
        self.racks = state.racks.mutate()
        self.racks_changed: set[RackId] = set()
        """Racks whose health changed in the run (with `free`'s keys: what `_changes` logs)."""
        self.racks_rebuilt = False
        """A registration built a new racks map: no change to log, readers rebuild."""
        self.nodes_written = False
        """A node record was set in `nodes` (not counting `serving`, which `finish` writes)."""
        self.jobs = _Jobs(state.jobs)
        self.finished: dict[JobId, JobStatus] = {}
        """Jobs finished in the run, not yet in the state's `finished`."""
        self.reservations = state.reservations
        self.allowed_by = state.interactive_preemption_allowed_by
        self.allowed_why = state.interactive_preemption_reason
        self.cluster = state.cluster
        self.seq = state.seq
        self.at = state.at
        self.seen_recent = state.seen.recent
        self.seen_older: Map[str, int] | dict[str, int] = state.seen.older
        self.seen_window = state.seen.window
        self.seen_new: dict[str, int] = {}
        """Command ids seen in the run, not yet in `seen_recent`."""
        self.seen_count = len(state.seen.recent)
        """Ids in the recent generation: `seen_recent` and `seen_new`."""
        self.applied: Map[int, int] | dict[int, int] = state.applied
        """`ClusterState.applied`, a dict once the run changed it."""
        self.serving: dict[NodeId, tuple[JobId | None, int | None]] = {}
        """Job and slice of nodes whose assignment changed, not yet in `nodes`."""
        self.free: dict[RackId, set[NodeId]] = {}
        """Free index of racks whose index changed, not yet in `racks`."""
        self.down: dict[RackId, set[NodeId]] = {}
        """`down_in` of the racks it was asked for."""
        self.windows = state.windows
        self.repairs = state.repairs
        self.usage: Map[str, QueueUsage] | dict[str, QueueUsage] = state.queue_usage
        """`ClusterState.queue_usage`, a dict once the run changed it."""

    def holds(self, job: JobState, delta: int, at: datetime) -> None:
        """The job's queue holds `delta` more nodes (fewer when negative) from `at` on."""
        queue = job.spec.queue
        if queue is None or not delta:
            return
        usage = self.usage
        if isinstance(usage, Map):
            usage = self.usage = dict(usage.items())
        old = usage.get(queue)
        if old is None:
            old = QueueUsage(0, 0.0, at)
        usage[queue] = old.changed(delta, at, self.settings.fair_share_half_life)

    def remember(self, command: str, seq: int) -> None:
        """`SeenCommands.add`, on the builder's own copy."""
        new = self.seen_new
        if command in new or command in self.seen_recent or command in self.seen_older:
            return
        if self.seen_count >= self.seen_window:  # the recent generation becomes the older
            older = dict(self.seen_recent.items())
            older.update(new)
            self.seen_older = older  # a Map again in `finish`
            self.seen_recent = Map()
            new = self.seen_new = {}
            self.seen_count = 0
        new[command] = seq
        self.seen_count += 1

    def applied_at(self, partition: int, offset: int) -> None:
        """A command read at `offset` of `partition` was decided (offsets only grow)."""
        applied = self.applied
        if isinstance(applied, Map):
            applied = self.applied = dict(applied.items())
        if offset > applied.get(partition, -1):
            applied[partition] = offset

    def node(self, node: NodeId) -> NodeState:
        old = self.nodes[node]
        pending = self.serving.get(node)
        if pending is None:
            return old
        job, index = pending
        return NodeState(node, old.rack, old.health, old.cordoned, job, index, old.cause)

    def rack_of(self, node: NodeId) -> RackId:
        return self.nodes[node].rack

    def down_in(self, rack: RackId) -> set[NodeId]:
        """The rack's nodes that are not healthy or are cordoned (never free), kept up to date
        by `update_node` once asked for."""
        down = self.down.get(rack)
        if down is None:
            assert self.index is not None, "a cluster with racks has a topology"
            nodes = self.nodes
            down = self.down[rack] = {
                n for n in self.index.rack(rack).nodes if not nodes[n].in_service
            }
        return down

    def free_of(self, rack: RackId) -> set[NodeId]:
        """The rack's free index, to change in place."""
        free = self.free.get(rack)
        if free is None:
            free = self.free[rack] = set(self.racks[rack].free)
        return free

    def update_node(self, node: NodeId, **changes: Any) -> None:
        """Change a node's health, cordon or cause."""
        old = self.node(node)
        get = changes.get
        new = NodeState(
            old.id,
            old.rack,
            get("health", old.health),
            get("cordoned", old.cordoned),
            old.job,
            old.slice,
            get("cause", old.cause),
        )
        self.serving.pop(node, None)
        self.nodes[node] = new
        self.nodes_written = True
        down = self.down.get(new.rack)
        if down is not None:
            if new.in_service:
                down.discard(node)
            else:
                down.add(node)
        if new.available:
            self.free_of(new.rack).add(node)
        else:
            self.free_of(new.rack).discard(node)

    def assign(
        self, job: JobId, slice_index: int, nodes: Iterable[NodeId], racks: Sequence[RackId] = ()
    ) -> None:
        """The nodes now serve the job's slice: none of them is free any more. `racks`: the
        racks of the nodes when known (a slice's); nodes of one rack take two bulk updates."""
        serving, pair = self.serving, (job, slice_index)
        if len(racks) == 1:
            for n in nodes:
                serving[n] = pair
            self.free_of(racks[0]).difference_update(nodes)
            return
        table = self.nodes
        rack: RackId | None = None
        free: set[NodeId] = set()
        for n in nodes:
            serving[n] = pair
            r = table[n].rack
            if r != rack:
                rack, free = r, self.free_of(r)
            free.discard(n)

    def release(self, nodes: Iterable[NodeId], racks: Sequence[RackId] = ()) -> None:
        """The nodes serve no job: the healthy, uncordoned ones are free again. `racks`: as
        for `assign`."""
        serving, pair = self.serving, (None, None)
        if len(racks) == 1:
            for n in nodes:
                serving[n] = pair
            of_rack = self.free_of(racks[0])
            if self.lone and racks[0] not in self.down:
                # One event: look at the nodes released, not at every node of the rack (the
                # free index never holds a node out of service, so the result is the same).
                table = self.nodes
                of_rack.update([n for n in nodes if table[n].in_service])
                return
            of_rack.update(nodes)
            of_rack.difference_update(self.down_in(racks[0]))  # never free, released or not
            return
        table = self.nodes
        rack: RackId | None = None
        free: set[NodeId] = set()
        for n in nodes:
            serving[n] = pair
            old = table[n]
            if old.in_service:
                if old.rack != rack:
                    rack, free = old.rack, self.free_of(old.rack)
                free.add(n)

    def job(self, job: JobId) -> JobState:
        record = self.jobs[job]
        if record is None:
            raise KeyError(job)
        return record

    def put_job(self, new: JobState) -> None:
        self.jobs[new.id] = new

    def finish_job(self, job: JobId, status: JobStatus, at: datetime) -> None:
        jobs = self.jobs
        state = self.job(job)
        self.holds(state, -len(state.nodes), at)
        for s in state.slices:
            self.release(s.nodes, s.racks)
        if job in jobs.base:
            jobs[job] = None
        else:
            del jobs[job]
        self.finished[job] = status
        self.release_reservations(job)

    def release_reservations(self, job: JobId) -> None:
        if not self.reservations:
            return
        held = [r for r, j in self.reservations.items() if j == job]
        if held:
            m = self.reservations.mutate()
            for r in held:
                del m[r]
            self.reservations = m.finish()

    def replace_slice(self, job: JobState, new: SliceState) -> JobState:
        slices = tuple(new if s.index == new.index else s for s in job.slices)
        return _job_with(job, slices=slices)

    def finish(self) -> ClusterState:
        """The state after the events applied; the builder is spent. The `nodes` map stays
        the state's own object when no node record was written, and `racks` when no rack's
        health or free index was touched (a job submitted or started): a new map would be
        equal, and each table derived from it would look up `_changes` to find no change."""
        nodes, racks = self.nodes, self.racks
        nodes_written = self.nodes_written
        for n, (job, index) in self.serving.items():
            old = nodes[n]
            if old.job != job or old.slice != index:
                # `_new`, every field in order: a node record per node placed or released
                nodes[n] = _new(
                    NodeState, (n, old.rack, old.health, old.cordoned, job, index, old.cause)
                )
                nodes_written = True
        # A rack whose free index was looked at counts as written even when the index is
        # unchanged: readers of `_changes` take the racks logged as those whose nodes changed
        # (a busy node failing leaves `free` as it was; `_defrag_victims` still must look).
        racks_written = self.racks_rebuilt or bool(self.racks_changed) or bool(self.free)
        for rack, free in self.free.items():
            r = racks[rack]
            if free != r.free:
                racks[rack] = RackState(
                    r.id, r.pod, r.size, r.gpus_per_node, frozenset(free), r.health, r.cause
                )
        jobs = self.state.jobs
        if self.jobs:
            changed = jobs.mutate()
            for job, record in self.jobs.items():
                if record is None:
                    del changed[job]
                else:
                    changed[job] = record
            jobs = changed.finish()
            _changes.record("jobs", jobs, self.state.jobs, tuple(self.jobs))
        finished = self.state.finished
        if self.finished:
            finished = finished.update(self.finished)
        recent = self.seen_recent.update(self.seen_new) if self.seen_new else self.seen_recent
        older = self.seen_older
        if isinstance(older, dict):
            older = Map(older)
        new_racks = racks.finish() if racks_written else self.state.racks
        if racks_written and not self.racks_rebuilt:
            _changes.record("racks", new_racks, self.state.racks, (*self.free, *self.racks_changed))
        # Built directly: dataclasses.replace costs several microseconds per event, and
        # the frozen dataclass's `__init__` two more than `built_state`.
        return built_state(
            self.cluster,
            self.seq,
            self.at,
            self.index,
            self.settings,
            nodes.finish() if nodes_written else self.state.nodes,
            new_racks,
            jobs,
            finished,
            self.reservations,
            self.allowed_by,
            self.allowed_why,
            SeenCommands(recent, older, self.seen_window),
            self.applied if isinstance(self.applied, Map) else Map(self.applied),
            self.usage if isinstance(self.usage, Map) else Map(self.usage),
            self.windows,
            self.repairs,
        )


_new = tuple.__new__
"""`_new(JobState, (field, ...))`: a record built without the named tuple's `__new__` (a
Python function: a frame per record); every field is given, in order (see
tests/core/test_evolve_records.py)."""
_QUEUED_TAIL = tuple(JobState._field_defaults.values())
"""The fields of a job just submitted after `submitted_at`: their defaults, in order."""


class _Jobs(dict[JobId, JobState | None]):
    """Job records changed in a run, over the state's map (`base`), which a lookup of a job
    not changed yet falls through to; None marks a job of `base` that is gone."""

    __slots__ = ("base",)

    def __init__(self, base: Map[JobId, JobState]) -> None:
        super().__init__()
        self.base = base

    def __missing__(self, job: JobId) -> JobState:
        return self.base[job]


def _job_with(job: JobState, **changes: Any) -> JobState:
    """`dataclasses.replace` for a job, built field by field (a few times cheaper)."""
    get = changes.get
    return _new(
        JobState,
        (
            job.spec,
            get("status", job.status),
            job.order,
            job.submitted_at,
            get("slices", job.slices),
            get("placed_at", job.placed_at),
            get("started_at", job.started_at),
            get("run_since", job.run_since),
            get("blocked", job.blocked),
            get("borrowing", job.borrowing),
            get("front", job.front),
            get("preemptions", job.preemptions),
            get("migrations", job.migrations),
            get("swaps", job.swaps),
            get("protected_by", job.protected_by),
        ),
    )


def _racks_of(b: _Builder, nodes: Iterable[NodeId]) -> tuple[RackId, ...]:
    return tuple(dict.fromkeys(b.rack_of(n) for n in nodes))


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
    b.racks_rebuilt = True
    b.nodes_written = True


def _policy_configured(b: _Builder, e: PolicyConfigured) -> None:
    was_on = b.settings.allow_interactive_preemption
    b.settings = e.settings
    if not e.settings.allow_interactive_preemption:
        b.allowed_by = None
        b.allowed_why = ""
    elif not was_on:
        b.allowed_by = e.actor
        b.allowed_why = e.reason


# The handlers of the events every job has (submitted, placed, started, completed) build
# their records positionally: they are most of a replay.


def _job_submitted(b: _Builder, e: JobSubmitted) -> None:
    spec = e.job
    b.jobs[spec.id] = _new(JobState, (spec, JobStatus.QUEUED, e.seq, e.at, *_QUEUED_TAIL))


def _job_blocked(b: _Builder, e: JobBlocked) -> None:
    job = b.job(e.job)
    since = job.blocked.since if job.blocked and job.blocked.reason == e.reason else e.at
    info = BlockInfo(e.reason, since, e.allocatable_nodes, e.placeable_slices, e.explanation)
    b.put_job(_job_with(job, blocked=info))


def _job_placed(b: _Builder, e: JobPlaced) -> None:
    job = b.job(e.job)
    spec = job.spec
    sizes = spec.slice_sizes
    slices = []
    for s in e.slices:
        slices.append(_new(SliceState, (s.index, sizes[s.index], s.nodes, s.racks)))
        b.assign(spec.id, s.index, s.nodes, s.racks)
    b.jobs[spec.id] = _new(
        JobState,
        (
            spec,
            JobStatus.PLACED,
            job.order,
            job.submitted_at,
            tuple(slices),
            e.at,
            job.started_at,
            job.run_since,
            None,
            e.borrowing,
            False,
            job.preemptions,
            job.migrations,
            job.swaps,
            job.protected_by,
        ),
    )
    b.release_reservations(spec.id)
    b.holds(job, sum(len(s.nodes) for s in e.slices), e.at)


def _job_started(b: _Builder, e: JobStarted) -> None:
    job = b.job(e.job)
    at = e.at
    b.jobs[e.job] = _new(
        JobState,
        (
            job.spec,
            JobStatus.RUNNING,
            job.order,
            job.submitted_at,
            job.slices,
            job.placed_at,
            at,
            at,
            job.blocked,
            job.borrowing,
            job.front,
            job.preemptions,
            job.migrations,
            job.swaps,
            job.protected_by,
        ),
    )


def _job_completed(b: _Builder, e: JobCompleted) -> None:
    b.finish_job(e.job, JobStatus.COMPLETED, e.at)


def _job_failed(b: _Builder, e: JobFailed) -> None:
    b.finish_job(e.job, JobStatus.FAILED, e.at)


def _job_cancelled(b: _Builder, e: JobCancelled) -> None:
    b.finish_job(e.job, JobStatus.CANCELLED, e.at)


def _job_preempted(b: _Builder, e: JobPreempted) -> None:
    job = b.job(e.job)
    b.release(job.nodes)
    b.holds(job, -len(job.nodes), e.at)
    b.put_job(
        _job_with(
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
    b.repairs = b.repairs.set(e.node, e.seq)


def _rack_failed(b: _Builder, e: RackFailed) -> None:
    b.racks[e.rack] = b.racks[e.rack]._replace(health=RackHealth.FAILED, cause=e.cause)
    b.racks_changed.add(e.rack)


def _rack_degraded(b: _Builder, e: RackDegraded) -> None:
    b.racks[e.rack] = b.racks[e.rack]._replace(health=RackHealth.DEGRADED, cause=e.cause)
    b.racks_changed.add(e.rack)


def _rack_recovered(b: _Builder, e: RackRecovered) -> None:
    b.racks[e.rack] = b.racks[e.rack]._replace(health=RackHealth.HEALTHY, cause=e.cause)
    b.racks_changed.add(e.rack)


def _node_swapped(b: _Builder, e: NodeSwapped) -> None:
    job = b.job(e.job)
    old = job.slices[e.slice]
    nodes = tuple(e.new_node if n == e.old_node else n for n in old.nodes)
    b.release([e.old_node])
    b.assign(job.id, e.slice, [e.new_node])
    job = b.replace_slice(job, old._replace(nodes=nodes, racks=_racks_of(b, nodes)))
    b.put_job(_job_with(job, swaps=job.swaps + 1))


def _slice_migrated(b: _Builder, e: SliceMigrated) -> None:
    job = b.job(e.job)
    old = job.slices[e.slice]
    b.release(old.nodes, old.racks)
    b.assign(job.id, e.slice, e.new_nodes)
    new = old._replace(nodes=e.new_nodes, racks=_racks_of(b, e.new_nodes))
    job = b.replace_slice(job, new)
    restarted = e.at if job.run_since is not None else None
    b.holds(job, len(e.new_nodes) - len(old.nodes), e.at)
    b.put_job(_job_with(job, migrations=job.migrations + 1, run_since=restarted))
    b.release_reservations(job.id)


def _slice_degraded(b: _Builder, e: SliceDegraded) -> None:
    job = b.job(e.job)
    old = job.slices[e.slice]
    removed = set(e.removed)
    nodes = tuple(n for n in old.nodes if n not in removed)
    b.release(e.removed)
    b.holds(job, len(nodes) - len(old.nodes), e.at)
    b.put_job(b.replace_slice(job, old._replace(nodes=nodes, racks=_racks_of(b, nodes))))


def _defrag_planned(b: _Builder, e: DefragPlanned) -> None:
    b.release_reservations(e.job)
    b.reservations = b.reservations.update(dict.fromkeys(e.target_racks, e.job))


def _reservation_made(b: _Builder, e: ReservationMade) -> None:
    window = Window(
        e.reservation, frozenset(e.nodes), e.start, e.end, e.reason, users=e.users, queues=e.queues
    )
    b.windows = b.windows.set(e.reservation, window)


def _reservation_started(b: _Builder, e: ReservationStarted) -> None:
    window = b.windows[e.reservation]
    b.windows = b.windows.set(
        e.reservation, window._replace(started=True, cordoned=frozenset(e.cordoned))
    )


def _reservation_ended(b: _Builder, e: ReservationEnded) -> None:
    """Its cordons on nodes another started reservation holds stay: they are that one's now
    (its end lifts them; `_decide_windows.end` uncordons only the others)."""
    ended = b.windows[e.reservation]
    windows = b.windows.delete(e.reservation)
    for name, w in windows.items():
        shared = ended.cordoned & w.nodes
        if w.started and shared:
            windows = windows.set(name, w._replace(cordoned=w.cordoned | shared))
    b.windows = windows


def _job_runtime_reported(b: _Builder, e: JobRuntimeReported) -> None:
    """Nothing changes but seq: what the runtime did is on record; the job's nodes and
    status are rackplane's decisions, already folded."""


def _disruption_budget_reported(b: _Builder, e: DisruptionBudgetReported) -> None:
    job = b.job(e.job)
    protected_by = None if e.allows else e.budget or "a disruption budget"
    b.put_job(_job_with(job, protected_by=protected_by))


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
        JobRuntimeReported: _job_runtime_reported,
        DisruptionBudgetReported: _disruption_budget_reported,
        JobPreempted: _job_preempted,
        NodeCordoned: _node_cordoned,
        NodeUncordoned: _node_uncordoned,
        NodeFailed: _node_failed,
        NodeDegraded: _node_degraded,
        NodeRecovered: _node_recovered,
        NodeRepaired: _node_repaired,
        RackFailed: _rack_failed,
        RackDegraded: _rack_degraded,
        RackRecovered: _rack_recovered,
        NodeSwapped: _node_swapped,
        SliceMigrated: _slice_migrated,
        SliceDegraded: _slice_degraded,
        DefragPlanned: _defrag_planned,
        ReservationMade: _reservation_made,
        ReservationStarted: _reservation_started,
        ReservationEnded: _reservation_ended,
        CommandRejected: _on_record_only,
        CommandIgnored: _on_record_only,
    }
    return table


_HANDLERS = _handlers()
