"""Policy settings: how the controller and policies treat a cluster (from the cluster file)."""

from datetime import timedelta
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rackplane.models._ids import Actor, QueueName
from rackplane.models.jobs import DEFAULT_SLICE_SIZE, MAX_SLICE_NODES
from rackplane.models.keys import KeyId, Role, TrustedKey
from rackplane.models.queues import MAX_QUEUES, QueueSpec, check_tree
from rackplane.models.values import XidAction


class PolicySettings(BaseModel):
    """Knobs of placement, recovery and defragmentation. Defaults follow DESIGN.md."""

    # Field docstrings are documentation (docs/CONFIG.md reads them with `attribute_docs`), not
    # pydantic descriptions: extracting them at import (re-reading and parsing the source) cost
    # every command ~35 ms with the other models that did it.
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    slice_size: int = Field(default=DEFAULT_SLICE_SIZE, ge=1, le=MAX_SLICE_NODES)
    """Default nodes per slice for jobs that do not say."""
    spares_per_rack: int = Field(default=2, ge=0, le=1_024)
    """Healthy free nodes each rack keeps for hot swaps; placement never uses them."""
    borrow_spares: bool = False
    """Let short preemptible work run on spares; it is evicted the moment a swap needs the node."""
    borrow_max_duration: timedelta = timedelta(hours=2)
    """"Short": a managed job whose expected duration is at most this may borrow spares."""
    rack_local_slices: bool = True
    """Every slice inside one rack. Only the `naive` baseline turns this off, for comparisons."""
    ntp_allowed: bool = True
    """A slice may degrade in place (nonuniform tensor parallelism) when its job allows it."""
    ntp_power_boost: bool = True
    """Assume a power boost keeps a degraded slice at the pace of healthy ones."""
    defrag_enabled: bool = True
    """Auto Defrag may preempt restartable jobs to free whole racks for blocked jobs."""
    restart_overhead: timedelta = timedelta(minutes=10)
    """Time a preempted or migrated job needs to restart, counted in its cost."""
    allow_interactive_preemption: bool = False
    """Defrag may preempt interactive jobs. Off unless an operator turns it on."""
    admins: tuple[Actor, ...] | None = None
    """Actors allowed the admin commands: uncordon a node, change the policy settings (such as
    allowing interactive preemption) or re-register the topology, preempt jobs or trigger a
    defrag by hand, cancel another owner's job. None (the default) keeps no list and lets every
    actor do them, for a single operator's test setup; set it in production."""
    xid_actions: dict[int, XidAction] = Field(default_factory=dict)
    """Operator overrides of the GPU Manager's XID policy table: XID -> action."""
    keys: tuple[TrustedKey, ...] | None = Field(default=None, max_length=1_024)
    """The public keys the cluster trusts, with the actor each signs as and its roles. Set,
    every command must carry a valid signature by one of them (`CommandRejected` with code
    `unauthenticated` otherwise), and roles decide who may do what (`admins` is then
    unused). It must hold an admin key. Changed only by `TrustKey` and `RevokeKey`, after the
    registration that sets it (signed by one of its admin keys). None (the default): no
    signatures, for a single operator's test setup."""
    revoked_keys: tuple[KeyId, ...] = Field(default=(), max_length=10_000)
    """Ids of keys revoked: never trusted again."""
    queues: tuple[QueueSpec, ...] = Field(default=(), max_length=MAX_QUEUES)
    """The queue tree (`rackplane/models/queues.py`): quotas, borrowing and lending limits,
    fair-share weights. Empty (the default): no quotas; jobs are ordered by priority, then
    FIFO, and may not name a queue."""
    default_queue: QueueName | None = None
    """The leaf queue of a job that names none. None: with queues set, every job must name
    one."""
    fair_share_half_life: timedelta = timedelta(days=7)
    """Half-life of the usage history fair share weighs (Slurm's PriorityDecayHalfLife
    default: 7 days). The history is the queue's node usage, averaged with weights that halve
    every half-life back."""
    fair_share_history: float = Field(default=0.5, ge=0, le=1, allow_inf_nan=False)
    """How much of a queue's fair share is history: share = ((1 - h) x nodes held now + h x
    decayed average) / (weight x nominal). 0: only what it holds now (Kueue's fair sharing);
    1: only its history (Slurm's fairshare)."""

    @model_validator(mode="after")
    def _queues_hold(self) -> Self:
        why = check_tree(self.queues, self.default_queue)
        if why is not None:
            raise ValueError(why)
        if self.fair_share_half_life <= timedelta(0):
            raise ValueError("fair_share_half_life must be positive")
        return self

    @model_validator(mode="after")
    def _keys_hold(self) -> Self:
        if self.keys is None:
            return self
        ids = [k.id for k in self.keys]
        if len(set(ids)) != len(ids):
            raise ValueError("a key is listed twice")
        if not any(Role.ADMIN in k.roles for k in self.keys):
            raise ValueError("the trusted keys include no admin key: nobody could change them")
        revoked = set(ids) & set(self.revoked_keys)
        if revoked:
            raise ValueError(f"key {sorted(revoked)[0]} is revoked and cannot be trusted")
        return self
