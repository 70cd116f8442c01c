"""The cluster state: everything `decide` needs, folded from the event log by `evolve`.

Rules of this file:
- Every class is immutable; a new state shares all unchanged parts with the old one. The
  records a fold builds by the million (nodes, racks, slices, jobs) are `NamedTuple`s: one is
  built five times faster than a frozen dataclass (whose `__init__` goes through
  `object.__setattr__` field by field: ~20,000 instructions for a job record, a third of a
  replay). `ClusterState`, built once per event at most, stays a frozen dataclass. Maps are
  `immutables.Map` (a HAMT): setting one node of 18,000 costs about a microsecond where copying
  a dict would cost hundreds, which is what makes folding a simulated year cheap.
- `RackState.free` is an index kept by `evolve`: the nodes of the rack that are healthy,
  uncordoned and unallocated. Placement reads it instead of scanning nodes.
- Only jobs that are not finished live in `jobs`; a finished job leaves its final status in
  `finished` (its story is in the event log).
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import NamedTuple, cast

from immutables import Map

from rackplane.models import (
    BlockReason,
    ClusterId,
    Health,
    JobId,
    JobSpec,
    JobStatus,
    NodeId,
    PodId,
    PolicySettings,
    RackHealth,
    RackId,
    TopologyIndex,
)
from rackplane.models.queues import leaf_queues
from rackplane.projections import _changes

SEEN_COMMANDS_WINDOW = 200_000
"""Command ids remembered for dedupe: at least this many of the most recent, at most twice."""


class NodeState(NamedTuple):
    """One compute node: its health, its cordon, and the slice it serves (if any)."""

    id: NodeId
    rack: RackId
    health: Health = Health.HEALTHY
    cordoned: bool = False
    job: JobId | None = None
    slice: int | None = None
    cause: str = ""

    @property
    def in_service(self) -> bool:
        """Healthy and uncordoned: free whenever it serves no job."""
        return self.health is Health.HEALTHY and not self.cordoned

    @property
    def available(self) -> bool:
        """Healthy, uncordoned and unallocated: new work may go here (if its rack is healthy)."""
        return self.job is None and self.in_service


class RackState(NamedTuple):
    """One NVLink domain and the index of its available nodes."""

    id: RackId
    pod: PodId
    size: int
    gpus_per_node: int
    free: frozenset[NodeId]
    health: RackHealth = RackHealth.HEALTHY
    cause: str = ""

    @property
    def healthy(self) -> bool:
        """False while a rack-level fault holds (degraded or failed)."""
        return self.health is RackHealth.HEALTHY

    @property
    def in_service(self) -> bool:
        """The rack can run work: healthy or degraded, not failed."""
        return self.health is not RackHealth.FAILED

    @property
    def degraded(self) -> bool:
        """Part of the NVLink fabric is lost: usable, but only when no healthy rack fits."""
        return self.health is RackHealth.DEGRADED

    @property
    def available(self) -> frozenset[NodeId]:
        """Nodes new work may use: the free ones, none while the rack is failed."""
        return self.free if self.in_service else frozenset()


class SliceState(NamedTuple):
    """One slice of a placed job: `size` nodes were asked for, `nodes` serve it now."""

    index: int  # type: ignore[assignment]  # hides tuple.index, which nothing here calls
    size: int
    nodes: tuple[NodeId, ...]
    racks: tuple[RackId, ...]

    @property
    def degraded(self) -> bool:
        """True when the slice runs on fewer nodes than it was placed with."""
        return len(self.nodes) < self.size

    @property
    def rack_local(self) -> bool:
        """True when the slice lies inside one NVLink domain."""
        return len(self.racks) == 1


class BlockInfo(NamedTuple):
    """Why a queued job waits, since when, and the numbers behind it."""

    reason: BlockReason
    since: datetime
    allocatable_nodes: int
    placeable_slices: int
    explanation: str = ""


class JobState(NamedTuple):
    """A job that has not finished."""

    spec: JobSpec
    status: JobStatus
    order: int
    """Seq of its submission: FIFO within a priority."""
    submitted_at: datetime
    slices: tuple[SliceState, ...] = ()
    placed_at: datetime | None = None
    started_at: datetime | None = None
    run_since: datetime | None = None
    """When the current run (re)started: progress since then is at risk until a checkpoint."""
    blocked: BlockInfo | None = None
    borrowing: bool = False
    """Placed on nodes of racks' spare pools: evicted the moment a swap needs one."""
    front: bool = False
    """Re-queued after a failure or an eviction: goes ahead of its peers."""
    preemptions: int = 0
    migrations: int = 0
    swaps: int = 0
    protected_by: str | None = None
    """The disruption budget that refuses a disruption by choice now (`ReportDisruptionBudget`):
    no defrag picks the job as a victim, no operator preempts it. None: nothing refuses."""

    @property
    def id(self) -> JobId:
        """The job's id."""
        return self.spec.id

    @property
    def nodes(self) -> tuple[NodeId, ...]:
        """Every node the job holds, slice by slice."""
        return tuple(n for s in self.slices for n in s.nodes)

    @property
    def queue_key(self) -> tuple[int, int, int]:
        """Sort key of the queue: higher priority first, re-queued jobs ahead of their peers,
        then first submitted."""
        return (-self.spec.priority, 0 if self.front else 1, self.order)

    def at_risk(self, now: datetime) -> timedelta:
        """Work since the last checkpoint, which a restart loses.

        Without checkpoint reports, checkpoints are assumed every `checkpoint_interval` from the
        start of the current run; a job without an interval loses its whole run.
        """
        if self.run_since is None or now <= self.run_since:
            return timedelta(0)
        elapsed = now - self.run_since
        interval = self.spec.checkpoint_interval
        return elapsed % interval if interval else elapsed


class QueueUsage(NamedTuple):
    """What a leaf queue holds, and its usage history, as of `since` (folded by `evolve`).

    `average` is the exponentially weighted average of the nodes the queue held, with
    weights that halve every `fair_share_half_life` back; between two changes the queue held
    `nodes`, so the average at any later time follows in closed form (`average_at`)."""

    nodes: int
    average: float
    since: datetime

    def average_at(self, at: datetime, half_life: timedelta) -> float:
        """The decayed average at `at` (not before `since`)."""
        if at <= self.since:
            return self.average
        decay = math.pow(0.5, (at - self.since) / half_life)
        return self.nodes + (self.average - self.nodes) * decay

    def changed(self, delta: int, at: datetime, half_life: timedelta) -> QueueUsage:
        """The usage after the queue's holding changed by `delta` nodes at `at`."""
        return QueueUsage(self.nodes + delta, self.average_at(at, half_life), max(at, self.since))


class Window(NamedTuple):
    """A reservation of nodes from `start` to `end` (`Reserve`): for maintenance, or, when it
    names `users` or `queues`, dedicated to the jobs that name it (`JobSpec.reservation`)."""

    id: str
    nodes: frozenset[NodeId]
    start: datetime
    end: datetime
    reason: str = ""
    started: bool = False
    cordoned: frozenset[NodeId] = frozenset()
    """The nodes its start cordoned (those not cordoned already): its end uncordons them."""
    users: tuple[str, ...] = ()
    """Job owners who may run in it."""
    queues: tuple[str, ...] = ()
    """Leaf queues whose jobs may run in it."""

    @property
    def dedicated(self) -> bool:
        """True when it is someone's room (users or queues), not maintenance."""
        return bool(self.users or self.queues)

    def member(self, job: JobSpec) -> bool:
        """True when `job` is its members' (owner or queue named): its start never preempts
        it. Only a job that names it (`JobSpec.reservation`) is placed there."""
        return job.reservation == self.id or job.owner in self.users or job.queue in self.queues

    def keeps_from(self, job: JobSpec, now: datetime, since: datetime | None = None) -> bool:
        """True when `job`, given nodes at `now`, may not use these nodes: the window has
        started, or the job could run past its start (it has no time limit, or one that
        reaches it). Its limit counts from `since` (a running job's start), else from `now`.
        A job that names the window is never kept from it (where it may go: `admits`)."""
        if now >= self.end or job.reservation == self.id:
            return False
        if self.started or now >= self.start:
            return True
        return job.time_limit is None or (since or now) + job.time_limit > self.start

    def admits(self, now: datetime) -> str | None:
        """None when a job naming the window may be placed on its nodes at `now` (started,
        not over); else why not."""
        if now >= self.end:
            return f"reservation {self.id} ended at {self.end:%Y-%m-%d %H:%M}"
        if not self.started:
            return f"reservation {self.id} starts at {self.start:%Y-%m-%d %H:%M}"
        return None


@dataclass(frozen=True, slots=True)
class SeenCommands:
    """Ids of applied commands, for dedupe. Two generations bound the memory it takes."""

    recent: Map[str, int] = field(default_factory=Map)
    older: Map[str, int] = field(default_factory=Map)
    window: int = SEEN_COMMANDS_WINDOW

    def __contains__(self, command_id: object) -> bool:
        return command_id in self.recent or command_id in self.older

    def __len__(self) -> int:
        return len(self.recent) + len(self.older)

    def add(self, command_id: str, seq: int) -> SeenCommands:
        """Remember that `command_id` was applied at `seq`."""
        if command_id in self:
            return self
        if len(self.recent) >= self.window:
            return SeenCommands(Map({command_id: seq}), self.recent, self.window)
        return SeenCommands(self.recent.set(command_id, seq), self.older, self.window)


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Everything known about one cluster after the event at `seq`."""

    cluster: ClusterId
    seq: int = 0
    at: datetime | None = None
    index: TopologyIndex | None = None
    settings: PolicySettings = field(default_factory=PolicySettings)
    nodes: Map[NodeId, NodeState] = field(default_factory=Map)
    racks: Map[RackId, RackState] = field(default_factory=Map)
    jobs: Map[JobId, JobState] = field(default_factory=Map)
    finished: Map[JobId, JobStatus] = field(default_factory=Map)
    reservations: Map[RackId, JobId] = field(default_factory=Map)
    """Racks held for a blocked job by a defrag plan; nothing else is placed there."""
    interactive_preemption_allowed_by: str | None = None
    """Who last switched on `allow_interactive_preemption` (None while it is off)."""
    interactive_preemption_reason: str = ""
    """Why they did (the reason of their `ConfigurePolicy`)."""
    seen: SeenCommands = field(default_factory=SeenCommands)
    applied: Map[int, int] = field(default_factory=Map)
    """Commands-topic partition -> offset of the last command decided from it: what the
    events' `command_partition` / `command_offset` say. A command read at or below it was
    decided already, however old (the id window above is finite)."""
    queue_usage: Map[str, QueueUsage] = field(default_factory=Map)
    """Leaf queue -> the nodes its jobs hold and its decayed usage history (fair share).
    Only queues that ever held nodes have an entry."""
    windows: Map[str, Window] = field(default_factory=Map)
    """Reservations of nodes (`Reserve`), by name, until they end."""
    repairs: Map[NodeId, int] = field(default_factory=Map)
    """Node -> the seq of its last `NodeRepaired` (only repaired nodes have an entry). A
    health report made on a view of the log older than that is stale: its evidence predates
    the repair (`ReportNodeHealth.seen`)."""

    @property
    def registered(self) -> bool:
        """True once the topology is known."""
        return self.index is not None

    def queued(self) -> list[JobState]:
        """Queued jobs in the order placement considers them (a new list). O(queued jobs)
        plus the jobs changed since the last call (`_queued_line`), not O(jobs)."""
        return [j for _, _, j in _queued_line(self.jobs)]

    def any_queued(self) -> bool:
        """True when some job is queued; O(jobs changed since the last look), like `queued`."""
        return bool(_queued_of(self.jobs))

    def status_of(self, job: JobId) -> JobStatus | None:
        """A job's status, finished or not; None for a job never submitted."""
        state = self.jobs.get(job)
        return state.status if state is not None else self.finished.get(job)

    def reserved_for(self, job: JobId) -> tuple[RackId, ...]:
        """Racks a defrag plan holds for `job`."""
        return tuple(r for r, j in self.reservations.items() if j == job)

    def decided(self, partition: int, offset: int) -> bool:
        """True when the command read at `offset` of commands partition `partition` (or a
        later one) was decided already."""
        last = self.applied.get(partition)
        return last is not None and offset <= last

    def spares_left(self, rack: RackId) -> int:
        """Healthy free nodes of a rack: the spare pool and what placement may use above it."""
        return len(self.racks[rack].available)


_SLOT_SETTERS = tuple(ClusterState.__dict__[f.name].__set__ for f in fields(ClusterState))
_object_new = object.__new__


def built_state(*values: object) -> ClusterState:
    """`ClusterState(*values)`, every field given, in order, for `evolve`, which builds one per
    event: the slots set directly, without the frozen dataclass's `__init__` (a call of
    `object.__setattr__` per field: 3.8 us where this takes 2.0); too few or too many values
    raise ValueError. tests/core/test_evolve_records.py checks it against the constructor."""
    state = _object_new(ClusterState)
    for set_slot, value in zip(_SLOT_SETTERS, values, strict=True):
        set_slot(state, value)
    return state


_Line = list[tuple[tuple[int, int, int], JobId, JobState]]
"""Queued jobs in queue order, each as (queue key, id, job)."""


class _Queued:
    """The queued jobs of one jobs map: by id, and in queue order once asked (`line`), built
    from the line of an earlier map (`base`) patched for the jobs changed since (`changed`)."""

    __slots__ = ("base", "by_id", "changed", "jobs", "line")

    def __init__(
        self,
        jobs: Map[JobId, JobState],
        by_id: dict[JobId, JobState],
        base: _Line | None = None,
        changed: set[JobId] | None = None,
    ) -> None:
        self.jobs, self.by_id, self.base, self.changed = jobs, by_id, base, changed
        self.line: _Line | None = None


_QUEUED: list[_Queued] = []
"""The queued jobs of the last jobs map asked for: the next map's are these, patched for the
jobs the fold changed since (`_changes`). Queue order has no ties (`order` is unique), so the
sorted list is the same whichever order the patch leaves the dict in."""


def _queued_of(jobs: Map[JobId, JobState]) -> dict[JobId, JobState]:
    """The queued jobs of `jobs`, by id (must not be changed)."""
    return _queued_entry(jobs).by_id


def _queued_entry(jobs: Map[JobId, JobState]) -> _Queued:
    last = _QUEUED[0] if _QUEUED else None
    if last is not None and last.jobs is jobs:
        return last
    path = _changes.since("jobs", jobs, lambda m: m is last.jobs) if last is not None else None
    if last is None or path is None:
        entry = _Queued(jobs, {j.spec.id: j for j in jobs.values() if j.status is JobStatus.QUEUED})
    else:
        changed = cast("set[JobId]", path[1])
        queued = dict(last.by_id)
        get, pop = jobs.get, queued.pop
        for job_id in changed:
            pop(job_id, None)
            j = get(job_id)
            if j is not None and j.status is JobStatus.QUEUED:
                queued[j.spec.id] = j
        # The line, when asked, is the last one patched (or the last one's base, patched for
        # both runs of changes), while few jobs changed; else it is sorted anew. The bound
        # keeps the pending changes small when the line goes unasked for many folds.
        if last.line is not None and len(changed) <= _PATCH_MOST:
            entry = _Queued(jobs, queued, last.line, changed)
        elif (
            last.base is not None
            and last.changed is not None
            and len(last.changed) + len(changed) <= _PATCH_MOST
        ):
            entry = _Queued(jobs, queued, last.base, last.changed | changed)
        else:
            entry = _Queued(jobs, queued)
    _QUEUED[:] = [entry]
    return entry


def _queued_line(jobs: Map[JobId, JobState]) -> _Line:
    """The queued jobs of `jobs` in queue order (must not be changed): O(queued) to patch the
    last line for the jobs changed since (a filter, and a binary insertion for each changed
    job still queued), O(queued x log) to sort when there is no line to patch (none asked
    yet, or more than `_PATCH_MOST` jobs changed)."""
    entry = _queued_entry(jobs)
    line = entry.line
    if line is not None:
        return line
    queued, base, changed = entry.by_id, entry.base, entry.changed
    if base is None or changed is None:
        line = [(j.queue_key, i, j) for i, j in queued.items()]
        line.sort(key=_FIRST)
    else:
        line = [t for t in base if t[1] not in changed]
        for i in changed:
            j = queued.get(i)
            if j is not None:
                bisect.insort(line, (j.queue_key, i, j), key=_FIRST)
    entry.line, entry.base, entry.changed = line, None, None
    return line


_FIRST = operator.itemgetter(0)
_PATCH_MOST = 32
"""Jobs changed since the last line beyond which the next line is sorted, not patched."""


_HOLDING: list[tuple[Map[JobId, JobState], dict[str | None, dict[JobId, JobState]]]] = []
"""The jobs holding nodes of the last jobs map asked for, by queue; the next map's are these,
patched for the jobs the fold changed since (as `_QUEUED`)."""


def _holding_of(jobs: Map[JobId, JobState]) -> dict[str | None, dict[JobId, JobState]]:
    """The jobs of `jobs` that hold nodes (placed, running), by queue (None: no queue), then
    by id (must not be changed): O(jobs changed since the last call), not O(jobs)."""
    last = _HOLDING[0] if _HOLDING else None
    if last is not None and last[0] is jobs:
        return last[1]
    path = _changes.since("jobs", jobs, lambda m: m is last[0]) if last is not None else None
    by_queue: dict[str | None, dict[JobId, JobState]]
    if last is None or path is None:
        by_queue = {}
        for j in jobs.values():
            if j.status.holds_nodes:
                by_queue.setdefault(j.spec.queue, {})[j.spec.id] = j
    else:
        before, by_queue = last[0], dict(last[1])
        copied: set[str | None] = set()  # queues whose dict is this map's own already
        for job_id in cast("set[JobId]", path[1]):
            for rec, gone in ((before.get(job_id), True), (jobs.get(job_id), False)):
                if rec is None or not rec.status.holds_nodes:
                    continue
                queue = rec.spec.queue
                if queue not in copied:
                    by_queue[queue] = dict(by_queue.get(queue, ()))
                    copied.add(queue)
                if gone:
                    del by_queue[queue][job_id]
                else:
                    by_queue[queue][job_id] = rec
    _HOLDING[:] = [(jobs, by_queue)]
    return by_queue


def job_gpus(state: ClusterState, job: JobState) -> int:
    """GPUs the job holds now."""
    nodes, racks = state.nodes, state.racks
    return sum(racks[nodes[n].rack].gpus_per_node for n in job.nodes)


def restart_cost(state: ClusterState, job: JobState, at: datetime) -> float:
    """GPU-hours a restart of `job` at `at` costs: its work since the last checkpoint plus the
    restart overhead, over all the GPUs it holds. A job placed but not yet started loses only
    the overhead (it starts over elsewhere)."""
    span = job.at_risk(at) + state.settings.restart_overhead
    return job_gpus(state, job) * span.total_seconds() / 3600.0


def kept_nodes(
    state: ClusterState, job: JobState, at: datetime, *, running: bool = False
) -> frozenset[NodeId]:
    """The nodes reservations keep from `job` if it is given nodes at `at`
    (`Window.keeps_from`): a job placed anew counts its time limit from `at`; a `running`
    one that keeps going (a swap, a slice migration) from its start. O(reservation nodes)."""
    if not state.windows:
        return frozenset()
    since = job.started_at if running else None
    return frozenset(
        n for w in state.windows.values() if w.keeps_from(job.spec, at, since) for n in w.nodes
    )


def initial_state(cluster: ClusterId, *, seen_window: int | None = None) -> ClusterState:
    """The state of a cluster before its first event.

    Args:
        cluster: the cluster's id.
        seen_window: command ids remembered for dedupe (default `SEEN_COMMANDS_WINDOW`; the
            fault suite makes it small to redeliver a command older than the window).
    """
    if seen_window is None:
        return ClusterState(cluster=cluster)
    return ClusterState(cluster=cluster, seen=SeenCommands(window=seen_window))


def leaf_named(state: ClusterState, names: Iterable[str | None]) -> str | None:
    """The first of `names` that is a leaf queue of the cluster, or None: how an adapter maps
    a workload manager's grouping (a Kubernetes namespace, a Slurm account) to a queue of the
    same name, only where the cluster has one."""
    leaves = leaf_queues(state.settings.queues)
    return next((n for n in names if n is not None and n in leaves), None)
