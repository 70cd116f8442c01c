"""Small value types shared by commands, events and state."""

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rackplane.models._ids import JobId, NodeId, QueueName, RackId
from rackplane.models._text import Reason
from rackplane.models.jobs import MAX_SLICE_NODES

MAX_ALTERNATIVES = 16
"""Defrag alternatives a plan records (the search keeps a few: `ALTERNATIVES_KEPT`)."""
MAX_MEMBERS = 256
"""Users, and queues, a reservation names (`Reserve.users`, `Reserve.queues`)."""


class Health(StrEnum):
    """A node's health as the GPU Manager (or an operator) reports it."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    """Still runs what it runs, but receives no new work."""
    FAILED = "failed"
    """Runs nothing; back only through an explicit repair."""


class RackHealth(StrEnum):
    """A rack-level fault: the rack's NVLink domain as a whole (NVSwitch trays, power shelf)."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    """One NVSwitch tray of nine lost: the rack runs what it runs at about 8/9 of its NVLink
    bandwidth and takes new slices only when no healthy rack fits them."""
    FAILED = "failed"
    """The whole domain is down: nothing in the rack runs until it recovers."""


class XidAction(StrEnum):
    """What an XID asks of the operator, mildest first (the GPU Manager's XID policy table)."""

    NONE = "none"
    """Informational: nothing to do."""
    RESTART_APP = "restart_app"
    """The application faulted; the GPU is fine."""
    RESET_GPU = "reset_gpu"
    """The GPU must be reset before it runs work again."""
    REBOOT_NODE = "reboot_node"
    """The node must be rebooted."""
    DRAIN_AND_REPLACE = "drain_and_replace"
    """Hardware inspection: drain the node and replace the part."""


class JobStatus(StrEnum):
    """Where a job is in its life. Final: completed, failed, cancelled."""

    QUEUED = "queued"
    PLACED = "placed"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """True when nothing more happens to the job."""
        return self in _FINAL

    @property
    def holds_nodes(self) -> bool:
        """True while the job owns nodes."""
        return self in (JobStatus.PLACED, JobStatus.RUNNING)


_FINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})

PreemptionCause = Literal[
    "defrag", "failure", "eviction", "operator", "reclaim", "priority", "reservation"
]
RuntimeAction = Literal["requeued", "restarted", "shrank"]
"""What a job's runtime did to its processes on its own terms (`ReportJobRuntime`): Slurm
cannot add a node to a running job, so it requeues the job and starts it again on the nodes
rackplane chose (a swap, a migration, a re-placement), or keeps it running on fewer (a
degrade with `--no-kill`)."""
"""defrag: make rack-shaped room; failure: a slice lost a node and nothing could replace it;
eviction: the job ran on borrowed spares that a swap needs; operator: an operator's decision;
reclaim: the job ran on quota its queue borrowed, which a guaranteed job of the lending queue
needs back; priority: a higher-priority guaranteed job of its own queue needs its nodes;
reservation: a reservation of its nodes started (`ReservationStarted`)."""

BlockReason = Literal["capacity", "topology", "quota", "reservation"]
"""capacity: too few allocatable nodes in total; topology: enough in total, not rack-shaped;
quota: its queue (or a queue above it) is at its nominal plus borrowing limit, or nothing is
left to borrow; reservation: it runs in a reservation (`JobSpec.reservation`) that has not
started yet, or is over (ended or cancelled)."""

PlanCause = Literal["defrag", "reclaim", "priority"]
"""Why a plan preempts (`DefragPlanned.cause`): the `JobPreempted` causes of its victims."""


class QueueStanding(BaseModel):
    """Where a blocked job stands: its queue, its queue's fair share, its place in line."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    queue: QueueName
    share: float = Field(ge=0, allow_inf_nan=False)
    """Its queue's fair share: usage over weighted nominal (lowest goes first)."""
    queue_rank: int = Field(ge=1)
    """Its queue's place among the queues with work waiting, lowest share first."""
    position: int = Field(ge=1)
    """Its place in its queue's line (priority, then FIFO)."""
    nodes_held: int = Field(ge=0)
    """Nodes its queue holds now."""
    nominal_nodes: int = Field(ge=0)
    """Its queue's nominal quota."""


RejectionCode = Literal[
    "no_topology",
    "wrong_cluster",
    "unknown_node",
    "unknown_rack",
    "unknown_job",
    "duplicate_job",
    "invalid_state",
    "node_unavailable",
    "shape_mismatch",
    "too_large",
    "event_too_large",
    "slice_spans_racks",
    "spare_reserve",
    "not_preemptible",
    "not_degradable",
    "topology_conflict",
    "reserved",
    "not_borrowable",
    "not_authorized",
    "unauthenticated",
    "reason_required",
    "unknown_queue",
    "kind_not_allowed",
    "over_quota",
    "queue_in_use",
    "unknown_reservation",
    "not_in_reservation",
]


class DefragAlternative(BaseModel):
    """A defrag option that was considered and not chosen."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    target_racks: tuple[RackId, ...]
    victims: tuple[JobId, ...]
    cost_gpu_hours: float = Field(ge=0)
    """GPU-hours its victims would lose (see `DefragPlanned.cost_gpu_hours`)."""
    why_not: Reason = ""
    score: float = Field(default=0.0, ge=0)
    """Its ranking score (see `DefragPlanned.score`)."""


class SliceAssignment(BaseModel):
    """Nodes proposed for one slice of a job, in slice order."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    nodes: tuple[NodeId, ...] = Field(min_length=1, max_length=MAX_SLICE_NODES)


class PlacedSlice(BaseModel):
    """One slice as placed: its index in the job, its nodes and the racks they are in."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    index: int = Field(ge=0)
    nodes: tuple[NodeId, ...] = Field(min_length=1, max_length=MAX_SLICE_NODES)
    racks: tuple[RackId, ...] = Field(min_length=1, max_length=MAX_SLICE_NODES)

    @property
    def rack_local(self) -> bool:
        """True when the slice lies inside one NVLink domain."""
        return len(self.racks) == 1
