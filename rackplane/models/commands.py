"""Commands: requests in the imperative. The controller decides what each one causes.

Operators, job runtimes, the GPU Manager and the policies all speak through these. A command
never changes anything by itself; `decide` turns it into events or a `CommandRejected`.
"""

from typing import Annotated, Literal

from pydantic import AwareDatetime, ConfigDict, Field, TypeAdapter

from rackplane.models._envelope import CommandEnvelope
from rackplane.models._ids import Actor, Id, JobId, NodeId, PodRef, QueueName, RackId
from rackplane.models._text import Reason
from rackplane.models.jobs import MAX_JOB_NODES, MAX_SLICE_NODES, JobSpec
from rackplane.models.keys import KeyId, TrustedKey
from rackplane.models.settings import PolicySettings
from rackplane.models.topology import Topology
from rackplane.models.values import (
    MAX_ALTERNATIVES,
    MAX_MEMBERS,
    BlockReason,
    DefragAlternative,
    Health,
    PlanCause,
    PreemptionCause,
    QueueStanding,
    RackHealth,
    RuntimeAction,
    SliceAssignment,
)


class RegisterTopology(CommandEnvelope):
    """Declare (or grow) the cluster's racks and fabric, and optionally its policy settings."""

    type: Literal["RegisterTopology"] = "RegisterTopology"
    topology: Topology
    settings: PolicySettings | None = None


class ConfigurePolicy(CommandEnvelope):
    """Replace the cluster's policy settings."""

    type: Literal["ConfigurePolicy"] = "ConfigurePolicy"
    settings: PolicySettings
    reason: Reason = ""
    """Why; required when the change allows interactive preemption."""


class TrustKey(CommandEnvelope):
    """Trust a public key for an actor and roles (an admin command), or change the roles of
    a key already trusted."""

    type: Literal["TrustKey"] = "TrustKey"
    key: TrustedKey
    reason: Reason = ""


class RevokeKey(CommandEnvelope):
    """Stop trusting a key, for good (an admin command). The last admin key cannot go."""

    type: Literal["RevokeKey"] = "RevokeKey"
    key: KeyId
    reason: Reason = ""


class SubmitJob(CommandEnvelope):
    """Queue a job."""

    type: Literal["SubmitJob"] = "SubmitJob"
    job: JobSpec


class CancelJob(CommandEnvelope):
    """Stop a job for good and free its nodes."""

    type: Literal["CancelJob"] = "CancelJob"
    job: JobId
    reason: Reason = ""


class StartJob(CommandEnvelope):
    """The job's runtime reports that its placed processes are running."""

    type: Literal["StartJob"] = "StartJob"
    job: JobId
    pods: tuple[PodRef, ...] = Field(default=(), max_length=MAX_JOB_NODES)
    """The runtime's pods that run it (Kubernetes `namespace/name`), in the job's node order."""


class CompleteJob(CommandEnvelope):
    """The job's runtime reports success."""

    type: Literal["CompleteJob"] = "CompleteJob"
    job: JobId


class FailJob(CommandEnvelope):
    """The job's runtime reports a failure of the job itself (not of a node)."""

    type: Literal["FailJob"] = "FailJob"
    job: JobId
    reason: Reason = ""


class ExpireJob(CommandEnvelope):
    """End a running job that ran past its time limit (from the `time_limits` policy)."""

    type: Literal["ExpireJob"] = "ExpireJob"
    job: JobId


class ReportJobRuntime(CommandEnvelope):
    """The job's runtime says what it did to the job's processes to follow a decision (Slurm
    requeued the job, started it again on the new nodes, kept it running on fewer)."""

    type: Literal["ReportJobRuntime"] = "ReportJobRuntime"
    job: JobId
    action: RuntimeAction
    nodes: tuple[NodeId, ...] = Field(default=(), max_length=MAX_JOB_NODES)
    """Where the job's processes run after it (empty when they run nowhere: requeued)."""
    detail: Reason = ""


class ReportDisruptionBudget(CommandEnvelope):
    """The job's runtime says whether the job may be disrupted by choice now (Kubernetes: the
    PodDisruptionBudgets over its pods allow fewer evictions than it has pods). While it may
    not, no defrag picks it as a victim and no operator preempts it; what a failure forces
    (a swap, a migration, a requeue) and the eviction of a borrower still happen."""

    type: Literal["ReportDisruptionBudget"] = "ReportDisruptionBudget"
    job: JobId
    allows: bool
    budget: Reason = ""
    """Which budget, in words (shown where a decision passes the job over)."""


class CordonNode(CommandEnvelope):
    """Keep new work off a node; what runs there keeps running."""

    type: Literal["CordonNode"] = "CordonNode"
    node: NodeId
    reason: Reason = ""


class UncordonNode(CommandEnvelope):
    """Let a cordoned node receive work again."""

    type: Literal["UncordonNode"] = "UncordonNode"
    node: NodeId


class ReportNodeHealth(CommandEnvelope):
    """A health verdict on a node, from the GPU Manager or an operator."""

    type: Literal["ReportNodeHealth"] = "ReportNodeHealth"
    node: NodeId
    health: Health
    cause: Reason = ""
    seen: int | None = Field(default=None, ge=0)
    """The seq of the cluster's log that the verdict was made on (None: not said). A report
    made on a view older than the node's last repair is ignored: its evidence predates the
    repair, and the reporter's next look starts from the repaired node."""


class RepairNode(CommandEnvelope):
    """A failed node was repaired (hardware replaced, reseated, re-imaged) and may work again."""

    type: Literal["RepairNode"] = "RepairNode"
    node: NodeId
    note: Reason = ""


class ReportRackHealth(CommandEnvelope):
    """A rack-level verdict: an NVSwitch tray or the rack's power takes the whole NVLink domain."""

    type: Literal["ReportRackHealth"] = "ReportRackHealth"
    rack: RackId
    health: RackHealth
    cause: Reason = ""


class Reserve(CommandEnvelope):
    """Hold racks or nodes from `start` to `end` (an admin command): maintenance, or a hero
    run's room. From now on no work is placed there that would run past `start` (work
    without a time limit never is). A maintenance reservation (no `users`, no `queues`): at
    `start` the nodes are cordoned and restartable work still on them is preempted (what
    cannot be preempted keeps running and is named); at `end` the cordons are lifted. A
    dedicated one (`users` or `queues`, like Slurm's Users=/Accounts=): at `start` nothing is
    cordoned; jobs naming it (`JobSpec.reservation`) run there until `end`, everyone else's
    restartable work is preempted and kept off."""

    type: Literal["Reserve"] = "Reserve"
    reservation: Id
    racks: tuple[RackId, ...] = Field(default=(), max_length=MAX_JOB_NODES)
    nodes: tuple[NodeId, ...] = Field(default=(), max_length=MAX_JOB_NODES)
    start: AwareDatetime
    end: AwareDatetime
    reason: Reason = ""
    users: tuple[Actor, ...] = Field(default=(), max_length=MAX_MEMBERS)
    """Job owners (`JobSpec.owner`) who may run in it."""
    queues: tuple[QueueName, ...] = Field(default=(), max_length=MAX_MEMBERS)
    """Leaf queues whose jobs may run in it."""


class CancelReservation(CommandEnvelope):
    """Drop a reservation (an admin command); its cordons are lifted if it had started."""

    type: Literal["CancelReservation"] = "CancelReservation"
    reservation: Id
    reason: Reason = ""


class StartReservation(CommandEnvelope):
    """A reservation's start has come (from the `reservations` policy)."""

    type: Literal["StartReservation"] = "StartReservation"
    reservation: Id


class EndReservation(CommandEnvelope):
    """A reservation's end has come (from the `reservations` policy)."""

    type: Literal["EndReservation"] = "EndReservation"
    reservation: Id


class PlaceJob(CommandEnvelope):
    """Give a queued job its nodes, slice by slice (from a placement policy)."""

    type: Literal["PlaceJob"] = "PlaceJob"
    job: JobId
    slices: tuple[SliceAssignment, ...] = Field(min_length=1, max_length=MAX_JOB_NODES)
    borrowing: bool = False
    """The placement dips into racks' spare pools (short preemptible work, `borrow_spares`)."""
    explanation: Reason = ""


class BlockJob(CommandEnvelope):
    """Record that a queued job cannot be placed now, why, and the numbers behind it."""

    type: Literal["BlockJob"] = "BlockJob"
    job: JobId
    reason: BlockReason
    allocatable_nodes: int = Field(ge=0)
    """Nodes placement could use now, cluster-wide (spares excluded)."""
    placeable_slices: int = Field(ge=0)
    """Slices of this job that would fit in racks now."""
    explanation: Reason = ""
    standing: QueueStanding | None = None
    """Where the job stands in its queue and its queue among the others (queues set)."""


class SwapNode(CommandEnvelope):
    """Replace one node of a running slice by a free node of the same rack (a hot swap)."""

    type: Literal["SwapNode"] = "SwapNode"
    job: JobId
    slice: int = Field(ge=0)
    old_node: NodeId
    new_node: NodeId
    explanation: Reason = ""


class MigrateSlice(CommandEnvelope):
    """Move one slice of a job onto other nodes (another rack); it restarts from a checkpoint."""

    type: Literal["MigrateSlice"] = "MigrateSlice"
    job: JobId
    slice: int = Field(ge=0)
    nodes: tuple[NodeId, ...] = Field(min_length=1, max_length=MAX_SLICE_NODES)
    explanation: Reason = ""


class DegradeSlice(CommandEnvelope):
    """Drop nodes from a slice that keeps running at a lower TP degree (NTP)."""

    type: Literal["DegradeSlice"] = "DegradeSlice"
    job: JobId
    slice: int = Field(ge=0)
    remove: tuple[NodeId, ...] = Field(min_length=1, max_length=MAX_SLICE_NODES)
    explanation: Reason = ""


class PreemptJobs(CommandEnvelope):
    """Stop restartable jobs and queue them again (their nodes are needed elsewhere)."""

    type: Literal["PreemptJobs"] = "PreemptJobs"
    jobs: tuple[JobId, ...] = Field(min_length=1)
    cause: PreemptionCause = "operator"
    reason: Reason = ""
    allow_interactive: bool = False
    """Set only on an operator's explicit say-so; `actor` records who."""
    explanation: Reason = ""


class PlanDefrag(CommandEnvelope):
    """Record a defragmentation plan and reserve its target racks for the blocked job."""

    type: Literal["PlanDefrag"] = "PlanDefrag"
    job: JobId
    target_racks: tuple[RackId, ...] = Field(min_length=1)
    victims: tuple[JobId, ...] = ()
    cost_gpu_hours: float = Field(ge=0)
    """GPU-hours the victims lose (`DefragPlanned.cost_gpu_hours`)."""
    alternatives: tuple[DefragAlternative, ...] = Field(default=(), max_length=MAX_ALTERNATIVES)
    explanation: Reason = ""
    score: float = Field(default=0.0, ge=0)
    """The plan's ranking score (`DefragPlanned.score`)."""
    cause: PlanCause = "defrag"
    """What the plan makes room for (`DefragPlanned.cause`)."""


Command = Annotated[
    RegisterTopology
    | ConfigurePolicy
    | TrustKey
    | RevokeKey
    | SubmitJob
    | CancelJob
    | StartJob
    | CompleteJob
    | FailJob
    | ExpireJob
    | ReportJobRuntime
    | ReportDisruptionBudget
    | CordonNode
    | UncordonNode
    | ReportNodeHealth
    | RepairNode
    | ReportRackHealth
    | Reserve
    | CancelReservation
    | StartReservation
    | EndReservation
    | PlaceJob
    | BlockJob
    | SwapNode
    | MigrateSlice
    | DegradeSlice
    | PreemptJobs
    | PlanDefrag,
    Field(discriminator="type"),
]
COMMANDS: TypeAdapter[Command] = TypeAdapter(Command, config=ConfigDict(defer_build=True))
"""Built once: the only way bytes become commands."""
