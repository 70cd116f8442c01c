"""Lookups and checks the controller's deciders share: each returns or raises `Rejected`
(the state forbids the command) or `Ignored` (the command asks for what already holds)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, NoReturn

from rackplane.models import (
    Command,
    CommandPosition,
    Event,
    EventEnvelope,
    Health,
    JobId,
    JobKind,
    JobSpec,
    NodeId,
    PolicySettings,
    RackId,
    RejectionCode,
)
from rackplane.projections.state import ClusterState, JobState, NodeState, SliceState


class Ignored(Exception):
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


def reject(code: RejectionCode, reason: str) -> NoReturn:
    raise Rejected(code, reason)


def ignore(reason: str) -> NoReturn:
    raise Ignored(reason)


def node_state(s: ClusterState, node: NodeId) -> NodeState:
    state = s.nodes.get(node)
    if state is None:
        reject("unknown_node", f"node {node} is not in cluster {s.cluster!r}")
    return state


def job_state(s: ClusterState, job: JobId) -> JobState:
    state = s.jobs.get(job)
    if state is None:
        final = s.finished.get(job)
        if final is not None:
            reject("invalid_state", f"job {job} is already {final.value}")
        reject("unknown_job", f"job {job} was never submitted")
    return state


def holding_job(s: ClusterState, job: JobId) -> JobState:
    state = job_state(s, job)
    if not state.status.holds_nodes:
        reject("invalid_state", f"job {job} is {state.status.value} and holds no nodes")
    return state


def slice_of(job: JobState, index: int) -> SliceState:
    if index >= len(job.slices):
        reject("shape_mismatch", f"job {job.id} has {len(job.slices)} slices, no slice {index}")
    return job.slices[index]


def check_available(s: ClusterState, nodes: Sequence[NodeId]) -> None:
    """Reject unless every node exists, appears once, and may take new work."""
    if len(set(nodes)) != len(nodes):  # the usual case without counting each node
        twice = [n for n, k in Counter(nodes).items() if k > 1]
        reject("shape_mismatch", f"node {twice[0]} is proposed twice")
    for n in nodes:
        node = node_state(s, n)
        if node.available and s.racks[node.rack].in_service:
            continue
        if node.job is not None:
            why = f"allocated to job {node.job} (slice {node.slice})"
        elif node.health is not Health.HEALTHY:
            why = node.health.value + (f" ({node.cause})" if node.cause else "")
        elif node.cordoned:
            why = "cordoned"
        else:
            why = f"in rack {node.rack}, which is failed"
        reject("node_unavailable", f"node {n} is {why}")


def racks(s: ClusterState, nodes: Iterable[NodeId]) -> tuple[RackId, ...]:
    return tuple(dict.fromkeys(s.nodes[n].rack for n in nodes))


def check_rack_local(s: ClusterState, what: str, racks: tuple[RackId, ...]) -> None:
    if s.settings.rack_local_slices and len(racks) > 1:
        reject("slice_spans_racks", f"{what} would span racks {', '.join(racks)}")


def check_spare_reserve(s: ClusterState, nodes: Iterable[NodeId]) -> None:
    """Placement and migration must leave each rack its spare nodes."""
    keep = s.settings.spares_per_rack
    taken = Counter(s.nodes[n].rack for n in nodes)
    for rack, k in taken.items():
        left = len(s.racks[rack].available) - k
        if left < keep:
            reject(
                "spare_reserve",
                f"rack {rack} would keep {left} free nodes, below its {keep} spares "
                f"(spares are used only by swaps)",
            )


def check_reservations(s: ClusterState, job: JobId, nodes: Iterable[NodeId]) -> None:
    """Racks a defrag plan holds for a blocked job take no other work."""
    if not s.reservations:
        return
    for rack in racks(s, nodes):
        holder = s.reservations.get(rack)
        if holder is not None and holder != job:
            reject("reserved", f"rack {rack} is reserved for job {holder} by a defrag plan")


def borrowable(s: ClusterState, job: JobState) -> str | None:
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


def impaired(s: ClusterState, job: JobState) -> bool:
    """True when a slice of the job has a failed node or sits in a failed rack."""
    return any(
        s.nodes[n].health is Health.FAILED or not s.racks[s.nodes[n].rack].healthy
        for n in job.nodes
    )


class Emitter:
    """Stamps the envelope on each event: gapless seq, time, actor, causation."""

    def __init__(
        self,
        state: ClusterState,
        command: Command,
        now: datetime,
        position: CommandPosition | None = None,
    ) -> None:
        self.state = state
        self.command = command
        self.at = max(now, state.at) if state.at is not None else now
        self.events: list[Event] = []
        self.where: dict[str, int] = (
            {"command_partition": position.partition, "command_offset": position.offset}
            if position is not None
            else {}
        )

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
            **self.where,
            **fields,
        )
        self.events.append(event)  # type: ignore[arg-type]  # cls is one of the Event members


def may_borrow(settings: PolicySettings, spec: JobSpec) -> bool:
    """Whether a job may run on borrowed spares (when `borrow_spares` is on): a managed job
    that says it ends within `borrow_max_duration`."""
    d = spec.expected_duration
    return spec.kind is JobKind.MANAGED and d is not None and d <= settings.borrow_max_duration


class RackSizes(NamedTuple):
    """What job submission checks of the racks' sizes, with `keep` spares per rack."""

    largest: int
    """Nodes of the largest rack."""
    room: int
    """Nodes of the largest rack outside its spares (may be negative)."""
    outside: int
    """Nodes outside the spares, cluster-wide."""


_SIZES: list[tuple[object, int, RackSizes]] = []
"""The last sizes counted, per topology index and spares: a rack's size is fixed from the
registration that built the index, so a submission reuses them (O(1), not O(racks))."""


def rack_sizes(state: ClusterState, keep: int) -> RackSizes:
    """The racks' sizes as submission checks them (see `RackSizes`)."""
    index = state.index
    for at, k, got in _SIZES:
        if at is index and k == keep and index is not None:
            return got
    sizes = [r.size for r in state.racks.values()]
    got = RackSizes(max(sizes), max(s - keep for s in sizes), sum(max(0, s - keep) for s in sizes))
    _SIZES.insert(0, (index, keep, got))
    del _SIZES[2:]
    return got
