"""Events: facts in the past tense, appended to the log by the controller and never changed.

Schemas change by addition (new optional fields); a rename is a new event type.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from rackplane.models._envelope import EventEnvelope
from rackplane.models._ids import JobId, NodeId, RackId
from rackplane.models.jobs import JobSpec
from rackplane.models.settings import PolicySettings
from rackplane.models.topology import Topology
from rackplane.models.values import (
    BlockReason,
    DefragAlternative,
    PlacedSlice,
    PreemptionCause,
    RejectionCode,
)

_Text = Annotated[str, Field(max_length=4_000)]


class TopologyRegistered(EventEnvelope):
    """The cluster's racks and fabric (and its policy settings) are known."""

    type: Literal["TopologyRegistered"] = "TopologyRegistered"
    topology: Topology
    settings: PolicySettings


class PolicyConfigured(EventEnvelope):
    """New policy settings apply from here on."""

    type: Literal["PolicyConfigured"] = "PolicyConfigured"
    settings: PolicySettings
    reason: _Text = ""


class JobSubmitted(EventEnvelope):
    """A job joined the queue."""

    type: Literal["JobSubmitted"] = "JobSubmitted"
    job: JobSpec


class JobBlocked(EventEnvelope):
    """A queued job cannot be placed now. `topology`: enough nodes in total, not rack-shaped."""

    type: Literal["JobBlocked"] = "JobBlocked"
    job: JobId
    reason: BlockReason
    requested_nodes: int
    slice_sizes: tuple[int, ...]
    allocatable_nodes: int
    placeable_slices: int
    explanation: _Text = ""


class JobPlaced(EventEnvelope):
    """A job got its nodes, slice by slice."""

    type: Literal["JobPlaced"] = "JobPlaced"
    job: JobId
    slices: tuple[PlacedSlice, ...]
    borrowing: bool = False
    explanation: _Text = ""


class JobStarted(EventEnvelope):
    """The job's processes run on its nodes."""

    type: Literal["JobStarted"] = "JobStarted"
    job: JobId


class JobCompleted(EventEnvelope):
    """The job finished successfully; its nodes are free."""

    type: Literal["JobCompleted"] = "JobCompleted"
    job: JobId
    released: tuple[NodeId, ...] = ()


class JobFailed(EventEnvelope):
    """The job failed by itself; its nodes are free."""

    type: Literal["JobFailed"] = "JobFailed"
    job: JobId
    reason: _Text = ""
    released: tuple[NodeId, ...] = ()


class JobCancelled(EventEnvelope):
    """The job was stopped for good; its nodes (if any) are free."""

    type: Literal["JobCancelled"] = "JobCancelled"
    job: JobId
    reason: _Text = ""
    released: tuple[NodeId, ...] = ()


class JobPreempted(EventEnvelope):
    """A restartable job was stopped to free its nodes and is queued again."""

    type: Literal["JobPreempted"] = "JobPreempted"
    job: JobId
    cause: PreemptionCause = "operator"
    reason: _Text = ""
    released: tuple[NodeId, ...] = ()
    lost_gpu_hours: float = Field(ge=0)
    """GPU-hours since its last checkpoint plus the restart overhead."""
    interactive_allowed_by: str | None = None
    """Who consented to preempting interactive work (set only for an interactive victim)."""
    interactive_allowed_reason: _Text = ""
    """Why they consented: the reason of their policy change or of their preemption."""
    explanation: _Text = ""


class NodeCordoned(EventEnvelope):
    """No new work goes to this node."""

    type: Literal["NodeCordoned"] = "NodeCordoned"
    node: NodeId
    reason: _Text = ""


class NodeUncordoned(EventEnvelope):
    """The node may receive work again."""

    type: Literal["NodeUncordoned"] = "NodeUncordoned"
    node: NodeId


class NodeFailed(EventEnvelope):
    """The node can no longer run work; what ran on it must be swapped, moved or degraded."""

    type: Literal["NodeFailed"] = "NodeFailed"
    node: NodeId
    rack: RackId
    cause: _Text = ""
    job: JobId | None = None
    slice: int | None = None


class NodeDegraded(EventEnvelope):
    """The node still runs what it runs but receives no new work."""

    type: Literal["NodeDegraded"] = "NodeDegraded"
    node: NodeId
    rack: RackId
    cause: _Text = ""
    job: JobId | None = None
    slice: int | None = None


class NodeRecovered(EventEnvelope):
    """A degraded node is healthy again."""

    type: Literal["NodeRecovered"] = "NodeRecovered"
    node: NodeId
    rack: RackId
    cause: _Text = ""


class NodeRepaired(EventEnvelope):
    """A failed node was repaired and is healthy again."""

    type: Literal["NodeRepaired"] = "NodeRepaired"
    node: NodeId
    rack: RackId
    note: _Text = ""


class RackFailed(EventEnvelope):
    """A rack-level fault: nothing in the rack can run until it recovers."""

    type: Literal["RackFailed"] = "RackFailed"
    rack: RackId
    cause: _Text = ""
    jobs: tuple[JobId, ...] = ()
    """Jobs with a slice in the rack when it failed."""


class RackRecovered(EventEnvelope):
    """The rack-level fault is gone."""

    type: Literal["RackRecovered"] = "RackRecovered"
    rack: RackId
    cause: _Text = ""


class NodeSwapped(EventEnvelope):
    """A node of a running slice was replaced by a free node of the same rack."""

    type: Literal["NodeSwapped"] = "NodeSwapped"
    job: JobId
    slice: int
    rack: RackId
    old_node: NodeId
    new_node: NodeId
    spares_left: int
    """Healthy free nodes left in the rack after the swap."""
    explanation: _Text = ""


class SliceMigrated(EventEnvelope):
    """A slice moved to other nodes; the job restarted from its last checkpoint."""

    type: Literal["SliceMigrated"] = "SliceMigrated"
    job: JobId
    slice: int
    from_racks: tuple[RackId, ...]
    to_rack: RackId | None
    old_nodes: tuple[NodeId, ...]
    new_nodes: tuple[NodeId, ...]
    lost_gpu_hours: float = Field(ge=0)
    explanation: _Text = ""


class SliceDegraded(EventEnvelope):
    """A slice goes on with fewer nodes (nonuniform tensor parallelism)."""

    type: Literal["SliceDegraded"] = "SliceDegraded"
    job: JobId
    slice: int
    removed: tuple[NodeId, ...]
    nodes_before: int
    nodes_after: int
    gpus_before: int
    gpus_after: int
    power_boost: bool
    explanation: _Text = ""


class DefragPlanned(EventEnvelope):
    """Auto Defrag chose victims to free rack-shaped room; the target racks are reserved for
    the blocked job until it is placed (make-before-break)."""

    type: Literal["DefragPlanned"] = "DefragPlanned"
    job: JobId
    target_racks: tuple[RackId, ...]
    victims: tuple[JobId, ...]
    cost_gpu_hours: float = Field(ge=0)
    alternatives: tuple[DefragAlternative, ...] = ()
    explanation: _Text = ""


class CommandRejected(EventEnvelope):
    """A command could not be applied to the state it met; nothing else changed."""

    type: Literal["CommandRejected"] = "CommandRejected"
    command_id: str
    command_type: str
    code: RejectionCode
    reason: _Text


class CommandIgnored(EventEnvelope):
    """A command asked for what already holds (cordon a cordoned node); nothing changed.

    Recorded so that the command's id is on record: redelivered after a crash, it is known.
    """

    type: Literal["CommandIgnored"] = "CommandIgnored"
    command_id: str
    command_type: str
    reason: _Text


Event = Annotated[
    TopologyRegistered
    | PolicyConfigured
    | JobSubmitted
    | JobBlocked
    | JobPlaced
    | JobStarted
    | JobCompleted
    | JobFailed
    | JobCancelled
    | JobPreempted
    | NodeCordoned
    | NodeUncordoned
    | NodeFailed
    | NodeDegraded
    | NodeRecovered
    | NodeRepaired
    | RackFailed
    | RackRecovered
    | NodeSwapped
    | SliceMigrated
    | SliceDegraded
    | DefragPlanned
    | CommandRejected
    | CommandIgnored,
    Field(discriminator="type"),
]
EVENTS: TypeAdapter[Event] = TypeAdapter(Event)
"""Built once: the only way bytes become events."""
