"""What users ask for: a job of n nodes cut into NVLink-local slices."""

from datetime import timedelta
from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rackplane.models._ids import Actor, Id, JobId, QueueName
from rackplane.models._text import Label

DEFAULT_SLICE_SIZE = 16
MAX_SLICE_NODES = 1_024
"""The largest slice: what a message listing one slice's nodes or racks can hold."""
MAX_JOB_NODES = 100_000
"""The largest job: what a message listing a job's slices or nodes can hold."""


class JobKind(StrEnum):
    """How a job may be treated when the cluster needs its nodes."""

    MANAGED = "managed"
    """Restartable from a checkpoint: may be preempted, migrated or degraded."""
    INTERACTIVE = "interactive"
    """A person is working in it: never preempted unless an operator explicitly allows it."""
    INFERENCE = "inference"
    """Serving traffic: never preempted."""


class JobSpec(BaseModel):
    """A request for `nodes` nodes, cut into ceil(nodes / slice_size) slices.

    Every slice must lie inside one NVLink domain (rack). A job with `min_nodes_per_slice` set
    may keep running on fewer nodes per slice after a failure (nonuniform tensor parallelism).
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: JobId
    name: Label = ""
    owner: Actor = "unknown"
    nodes: int = Field(ge=1, le=MAX_JOB_NODES)
    slice_size: int | None = Field(default=None, ge=1, le=MAX_SLICE_NODES)
    """Nodes per slice; None takes the cluster's default (16 unless configured). The spec in
    a `JobSubmitted` event always has it resolved."""
    kind: JobKind = JobKind.MANAGED
    priority: int = Field(default=0, ge=-1_000, le=1_000)
    checkpoint_interval: timedelta | None = None
    min_nodes_per_slice: int | None = Field(default=None, ge=1)
    expected_duration: timedelta | None = None
    time_limit: timedelta | None = None
    """The longest it may run (from its start; a requeue starts over): past it, it is ended
    (`JobFailed`, reason `time_limit`). None: no limit."""
    queue: QueueName | None = None
    """The leaf queue it runs under (`PolicySettings.queues`); None takes the cluster's
    default queue. The spec in a `JobSubmitted` event has it resolved where queues are set."""
    reservation: Id | None = None
    """The dedicated reservation it runs in (`Reserve` with users or queues naming its owner
    or its queue): placed only on its nodes, once it has started. None: anywhere else."""

    @model_validator(mode="after")
    def _check_shape(self) -> Self:
        if (
            self.min_nodes_per_slice is not None
            and self.slice_size is not None
            and self.min_nodes_per_slice > self.slice_size
        ):
            raise ValueError(
                f"min_nodes_per_slice ({self.min_nodes_per_slice}) cannot exceed slice_size "
                f"({self.slice_size})"
            )
        if self.checkpoint_interval is not None and self.checkpoint_interval <= timedelta(0):
            raise ValueError("checkpoint_interval must be positive")
        if self.expected_duration is not None and self.expected_duration <= timedelta(0):
            raise ValueError("expected_duration must be positive")
        if self.time_limit is not None and self.time_limit <= timedelta(0):
            raise ValueError("time_limit must be positive")
        return self

    @property
    def slice_sizes(self) -> tuple[int, ...]:
        """Nodes per slice: full slices first, the remainder (if any) last."""
        return slice_sizes(self.nodes, self.slice_size or DEFAULT_SLICE_SIZE)

    @property
    def keeps_progress(self) -> bool:
        """True for interactive sessions and inference services: what they did was delivered
        as they ran, so a restart loses nothing of it (no checkpoint to fall back to)."""
        return self.kind is not JobKind.MANAGED

    @property
    def multi_node(self) -> bool:
        """True when the job spans more than one node."""
        return self.nodes > 1


def slice_sizes(nodes: int, slice_size: int) -> tuple[int, ...]:
    """Cut `nodes` into slices of at most `slice_size`: n <= s is one slice.

    >>> slice_sizes(40, 16)
    (16, 16, 8)
    """
    full, rest = divmod(nodes, slice_size)
    return (slice_size,) * full + ((rest,) if rest else ())
