"""Events: facts in the past tense, appended to the log by the controller and never changed.

Schemas change by addition (new optional fields); a rename is a new event type.
"""

from typing import Annotated, Literal

from pydantic import AwareDatetime, ConfigDict, Field, TypeAdapter

from rackplane.models._envelope import EventEnvelope
from rackplane.models._ids import (
    Actor,
    CommandId,
    CommandType,
    Id,
    JobId,
    NodeId,
    PodRef,
    QueueName,
    RackId,
)
from rackplane.models._text import Note
from rackplane.models.jobs import MAX_JOB_NODES, MAX_SLICE_NODES, JobSpec
from rackplane.models.settings import PolicySettings
from rackplane.models.topology import Topology
from rackplane.models.values import (
    MAX_ALTERNATIVES,
    MAX_MEMBERS,
    BlockReason,
    DefragAlternative,
    PlacedSlice,
    PlanCause,
    PreemptionCause,
    QueueStanding,
    RejectionCode,
    RuntimeAction,
)


class TopologyRegistered(EventEnvelope):
    """The cluster's racks and fabric (and its policy settings) are known."""

    type: Literal["TopologyRegistered"] = "TopologyRegistered"
    topology: Topology
    settings: PolicySettings


class PolicyConfigured(EventEnvelope):
    """New policy settings apply from here on."""

    type: Literal["PolicyConfigured"] = "PolicyConfigured"
    settings: PolicySettings
    reason: Note = ""


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
    slice_sizes: tuple[int, ...] = Field(max_length=MAX_JOB_NODES)
    allocatable_nodes: int
    placeable_slices: int
    explanation: Note = ""
    standing: QueueStanding | None = None
    """Where the job stands in its queue, and its queue among the others (queues set)."""


class JobPlaced(EventEnvelope):
    """A job got its nodes, slice by slice."""

    type: Literal["JobPlaced"] = "JobPlaced"
    job: JobId
    slices: tuple[PlacedSlice, ...] = Field(max_length=MAX_JOB_NODES)
    borrowing: bool = False
    explanation: Note = ""


class JobStarted(EventEnvelope):
    """The job's processes run on its nodes."""

    type: Literal["JobStarted"] = "JobStarted"
    job: JobId
    pods: tuple[PodRef, ...] = Field(default=(), max_length=MAX_JOB_NODES)
    """The pods its runtime started, when the runtime names them (`StartJob.pods`)."""


class JobCompleted(EventEnvelope):
    """The job finished successfully; its nodes are free."""

    type: Literal["JobCompleted"] = "JobCompleted"
    job: JobId
    released: tuple[NodeId, ...] = Field(default=(), max_length=MAX_JOB_NODES)


class JobFailed(EventEnvelope):
    """The job failed by itself; its nodes are free."""

    type: Literal["JobFailed"] = "JobFailed"
    job: JobId
    reason: Note = ""
    released: tuple[NodeId, ...] = Field(default=(), max_length=MAX_JOB_NODES)


class JobRuntimeReported(EventEnvelope):
    """The job's runtime did this to its processes (`ReportJobRuntime`): the job's state in
    rackplane is unchanged, the audit trail says what really happened on the nodes."""

    type: Literal["JobRuntimeReported"] = "JobRuntimeReported"
    job: JobId
    action: RuntimeAction
    nodes: tuple[NodeId, ...] = Field(default=(), max_length=MAX_JOB_NODES)
    detail: Note = ""


class DisruptionBudgetReported(EventEnvelope):
    """The job's disruption budget now allows (or refuses) a disruption by choice
    (`ReportDisruptionBudget`)."""

    type: Literal["DisruptionBudgetReported"] = "DisruptionBudgetReported"
    job: JobId
    allows: bool
    budget: Note = ""


class JobCancelled(EventEnvelope):
    """The job was stopped for good; its nodes (if any) are free."""

    type: Literal["JobCancelled"] = "JobCancelled"
    job: JobId
    reason: Note = ""
    released: tuple[NodeId, ...] = Field(default=(), max_length=MAX_JOB_NODES)


class JobPreempted(EventEnvelope):
    """A restartable job was stopped to free its nodes and is queued again."""

    type: Literal["JobPreempted"] = "JobPreempted"
    job: JobId
    cause: PreemptionCause = "operator"
    reason: Note = ""
    released: tuple[NodeId, ...] = Field(default=(), max_length=MAX_JOB_NODES)
    lost_gpu_hours: float = Field(ge=0)
    """GPU-hours since its last checkpoint plus the restart overhead."""
    interactive_allowed_by: Actor | None = None
    """Who consented to preempting interactive work (set only for an interactive victim)."""
    interactive_allowed_reason: Note = ""
    """Why they consented: the reason of their policy change or of their preemption."""
    explanation: Note = ""


class NodeCordoned(EventEnvelope):
    """No new work goes to this node."""

    type: Literal["NodeCordoned"] = "NodeCordoned"
    node: NodeId
    reason: Note = ""


class NodeUncordoned(EventEnvelope):
    """The node may receive work again."""

    type: Literal["NodeUncordoned"] = "NodeUncordoned"
    node: NodeId


class NodeFailed(EventEnvelope):
    """The node can no longer run work; what ran on it must be swapped, moved or degraded."""

    type: Literal["NodeFailed"] = "NodeFailed"
    node: NodeId
    rack: RackId
    cause: Note = ""
    job: JobId | None = None
    slice: int | None = None


class NodeDegraded(EventEnvelope):
    """The node still runs what it runs but receives no new work."""

    type: Literal["NodeDegraded"] = "NodeDegraded"
    node: NodeId
    rack: RackId
    cause: Note = ""
    job: JobId | None = None
    slice: int | None = None


class NodeRecovered(EventEnvelope):
    """A degraded node is healthy again."""

    type: Literal["NodeRecovered"] = "NodeRecovered"
    node: NodeId
    rack: RackId
    cause: Note = ""


class NodeRepaired(EventEnvelope):
    """A failed node was repaired and is healthy again."""

    type: Literal["NodeRepaired"] = "NodeRepaired"
    node: NodeId
    rack: RackId
    note: Note = ""


class RackFailed(EventEnvelope):
    """A rack-level fault: nothing in the rack can run until it recovers."""

    type: Literal["RackFailed"] = "RackFailed"
    rack: RackId
    cause: Note = ""
    jobs: tuple[JobId, ...] = ()
    """Jobs with a slice in the rack when it failed."""


class RackDegraded(EventEnvelope):
    """The rack lost part of its NVLink fabric (one NVSwitch tray): what runs there stays, at
    less bandwidth; new slices go there only when no healthy rack fits them."""

    type: Literal["RackDegraded"] = "RackDegraded"
    rack: RackId
    cause: Note = ""
    jobs: tuple[JobId, ...] = ()
    """Jobs with a slice in the rack: they keep running."""


class RackRecovered(EventEnvelope):
    """The rack-level fault is gone."""

    type: Literal["RackRecovered"] = "RackRecovered"
    rack: RackId
    cause: Note = ""


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
    explanation: Note = ""


class SliceMigrated(EventEnvelope):
    """A slice moved to other nodes; the job restarted from its last checkpoint."""

    type: Literal["SliceMigrated"] = "SliceMigrated"
    job: JobId
    slice: int
    from_racks: tuple[RackId, ...] = Field(max_length=MAX_SLICE_NODES)
    to_rack: RackId | None
    old_nodes: tuple[NodeId, ...] = Field(max_length=MAX_SLICE_NODES)
    new_nodes: tuple[NodeId, ...] = Field(max_length=MAX_SLICE_NODES)
    lost_gpu_hours: float = Field(ge=0)
    explanation: Note = ""


class SliceDegraded(EventEnvelope):
    """A slice goes on with fewer nodes (nonuniform tensor parallelism)."""

    type: Literal["SliceDegraded"] = "SliceDegraded"
    job: JobId
    slice: int
    removed: tuple[NodeId, ...] = Field(max_length=MAX_SLICE_NODES)
    nodes_before: int
    nodes_after: int
    gpus_before: int
    gpus_after: int
    power_boost: bool
    explanation: Note = ""


class ReservationMade(EventEnvelope):
    """Nodes are reserved from `start` to `end` (`Reserve`; racks given as their nodes), for
    maintenance (no `users`, no `queues`) or for the jobs of `users` and `queues`."""

    type: Literal["ReservationMade"] = "ReservationMade"
    reservation: Id
    nodes: tuple[NodeId, ...] = Field(max_length=MAX_JOB_NODES)
    start: AwareDatetime
    end: AwareDatetime
    reason: Note = ""
    users: tuple[Actor, ...] = Field(default=(), max_length=MAX_MEMBERS)
    queues: tuple[QueueName, ...] = Field(default=(), max_length=MAX_MEMBERS)


class ReservationStarted(EventEnvelope):
    """A reservation's start came: its nodes are cordoned (`NodeCordoned` follows for each
    in `cordoned`; none for a dedicated reservation, whose members run there) and its
    restartable work preempted (`JobPreempted`, cause `reservation`, from the `reservations`
    policy; never its members' jobs); `staying` cannot be, or are its members'."""

    type: Literal["ReservationStarted"] = "ReservationStarted"
    reservation: Id
    cordoned: tuple[NodeId, ...] = Field(default=(), max_length=MAX_JOB_NODES)
    """Its nodes not cordoned before: cordoned now (and uncordoned at its end)."""
    staying: tuple[JobId, ...] = Field(default=(), max_length=MAX_JOB_NODES)
    """Jobs on its nodes that are never preempted (inference, interactive without consent,
    a disruption budget that refuses): they keep running there."""


class ReservationEnded(EventEnvelope):
    """A reservation is over (its end came, or it was cancelled); the cordons it made are
    lifted (`NodeUncordoned` follows for each)."""

    type: Literal["ReservationEnded"] = "ReservationEnded"
    reservation: Id
    cancelled: bool = False
    reason: Note = ""


class DefragPlanned(EventEnvelope):
    """Auto Defrag chose victims to free rack-shaped room; the target racks are reserved for
    the blocked job until it is placed (make-before-break)."""

    type: Literal["DefragPlanned"] = "DefragPlanned"
    job: JobId
    target_racks: tuple[RackId, ...]
    victims: tuple[JobId, ...]
    cost_gpu_hours: float = Field(ge=0)
    """GPU-hours the victims lose: each its work since its last checkpoint plus its restart,
    times its GPUs (what their `JobPreempted.lost_gpu_hours` say, at the plan's time). Logs
    written before 2026-12-02 hold the ranking score here."""
    alternatives: tuple[DefragAlternative, ...] = Field(default=(), max_length=MAX_ALTERNATIVES)
    explanation: Note = ""
    score: float = Field(default=0.0, ge=0)
    """What ranked the plan against its alternatives: each victim's GPU-hours weighted by
    2^(its priority - the job's) x (1 + its preemptions so far), summed (lower wins)."""
    cause: PlanCause = "defrag"
    """defrag: rack-shaped room for a job blocked by topology (victims re-placed elsewhere);
    reclaim: a guaranteed job takes back quota other queues borrowed; priority: a guaranteed
    job preempts lower-priority work of its own queue (victims queued again)."""


class CommandRejected(EventEnvelope):
    """A command could not be applied to the state it met; nothing else changed."""

    type: Literal["CommandRejected"] = "CommandRejected"
    command_id: CommandId
    command_type: CommandType
    code: RejectionCode
    reason: Note


class CommandIgnored(EventEnvelope):
    """A command asked for what already holds (cordon a cordoned node); nothing changed.

    Recorded so that the command's id is on record: redelivered after a crash, it is known.
    """

    type: Literal["CommandIgnored"] = "CommandIgnored"
    command_id: CommandId
    command_type: CommandType
    reason: Note


Event = Annotated[
    TopologyRegistered
    | PolicyConfigured
    | JobSubmitted
    | JobBlocked
    | JobPlaced
    | JobStarted
    | JobCompleted
    | JobFailed
    | JobRuntimeReported
    | DisruptionBudgetReported
    | JobCancelled
    | JobPreempted
    | NodeCordoned
    | NodeUncordoned
    | NodeFailed
    | NodeDegraded
    | NodeRecovered
    | NodeRepaired
    | RackFailed
    | RackDegraded
    | RackRecovered
    | NodeSwapped
    | SliceMigrated
    | SliceDegraded
    | DefragPlanned
    | ReservationMade
    | ReservationStarted
    | ReservationEnded
    | CommandRejected
    | CommandIgnored,
    Field(discriminator="type"),
]
EVENTS: TypeAdapter[Event] = TypeAdapter(Event, config=ConfigDict(defer_build=True))
"""Built once: the only way bytes become events."""
