"""Who may do what: the admin commands and the check the controller runs before deciding.

Rules of this file:
- Every command carries an `actor`. Admin commands need an actor in the cluster's admin list
  (`PolicySettings.admins`); anyone else gets `CommandRejected(code="not_authorized")` with a
  reason that names the action, the actor and where the list lives.
- The admin commands: uncordon a node; change the policy settings (`ConfigurePolicy`, which is
  how interactive preemption is allowed) or re-register a registered cluster; preempt jobs or
  plan a defrag by hand (any actor but a policy's); cancel a job someone else owns.
- `admins=None` (no list) lets every actor through: a single operator's or a test's setup.
  The first `RegisterTopology` of a cluster is not an admin command: it is what sets the list.
- Policies (`policy:<name>` actors) propose preemptions and defrag plans on their own; they
  act within the settings an admin chose. Without keys the actor is what the sender says it
  is: who may write to the commands topic is for the broker's ACLs (docs/OPERATIONS.md).
- A cluster with trusted keys (`PolicySettings.keys`) decides by the roles of the key that
  signed (`_authenticate`), not by actor names or the admin list: `ROLE_RULES` below, one
  line per command. An admin key may send everything; an exporter key nothing.
"""

from __future__ import annotations

from rackplane.models import (
    BlockJob,
    CancelJob,
    CancelReservation,
    Command,
    CompleteJob,
    ConfigurePolicy,
    CordonNode,
    DegradeSlice,
    EndReservation,
    ExpireJob,
    FailJob,
    MigrateSlice,
    PlaceJob,
    PlanDefrag,
    PreemptJobs,
    RegisterTopology,
    RepairNode,
    ReportDisruptionBudget,
    ReportJobRuntime,
    ReportNodeHealth,
    ReportRackHealth,
    Reserve,
    RevokeKey,
    Role,
    StartJob,
    StartReservation,
    SubmitJob,
    SwapNode,
    TrustedKey,
    TrustKey,
    UncordonNode,
)
from rackplane.policies._checks import reject
from rackplane.projections.state import ClusterState

POLICY_ACTOR_PREFIX = "policy:"


def is_policy(actor: str) -> bool:
    """True for the actors the policies send as (`policy:tas`, `policy:defrag`, ...)."""
    return actor.startswith(POLICY_ACTOR_PREFIX)


def admin_action(s: ClusterState, c: Command) -> str | None:
    """What `c` would do that needs an admin, in words; None when anyone may send it."""
    match c:
        case UncordonNode(node=node):
            return f"uncordoning node {node}"
        case ConfigurePolicy():
            return "changing the policy settings"
        case TrustKey() | RevokeKey():
            return "changing the trusted keys"
        case RegisterTopology() if s.registered:
            return "re-registering the topology and settings of a registered cluster"
        case PreemptJobs(jobs=jobs) if not is_policy(c.actor):
            return f"preempting {', '.join(jobs)} by hand"
        case PlanDefrag(job=blocked) if not is_policy(c.actor):
            return f"triggering a defrag for job {blocked}"
        case Reserve(reservation=name) | CancelReservation(reservation=name):
            return f"reserving nodes ({name})"
        case CancelJob(job=job_id):
            state = s.jobs.get(job_id)
            if state is not None and state.spec.owner != c.actor:
                return f"cancelling job {job_id}, which {state.spec.owner} owns"
    return None


ADMIN, OPERATOR, RUNTIME, POLICY = Role.ADMIN, Role.OPERATOR, Role.RUNTIME, Role.POLICY
OWNER = "owner"
"""Also allowed: the owner of the job the command names (its key signs as the owner)."""

ROLE_RULES: dict[type, frozenset[str]] = {
    RegisterTopology: frozenset(),
    ConfigurePolicy: frozenset(),
    TrustKey: frozenset(),
    RevokeKey: frozenset(),
    UncordonNode: frozenset(),
    SubmitJob: frozenset({OPERATOR, RUNTIME}),
    CancelJob: frozenset({RUNTIME, OWNER}),
    StartJob: frozenset({RUNTIME, OWNER}),
    CompleteJob: frozenset({RUNTIME, OWNER}),
    FailJob: frozenset({RUNTIME, OWNER}),
    ExpireJob: frozenset({POLICY}),
    Reserve: frozenset(),
    CancelReservation: frozenset(),
    StartReservation: frozenset({POLICY}),
    EndReservation: frozenset({POLICY}),
    ReportJobRuntime: frozenset({RUNTIME}),
    ReportDisruptionBudget: frozenset({RUNTIME}),
    CordonNode: frozenset({OPERATOR, RUNTIME}),
    RepairNode: frozenset({OPERATOR}),
    ReportNodeHealth: frozenset({OPERATOR, POLICY}),
    ReportRackHealth: frozenset({OPERATOR, POLICY}),
    PlaceJob: frozenset({POLICY}),
    BlockJob: frozenset({POLICY}),
    SwapNode: frozenset({POLICY}),
    MigrateSlice: frozenset({POLICY}),
    DegradeSlice: frozenset({POLICY}),
    PreemptJobs: frozenset({POLICY}),
    PlanDefrag: frozenset({POLICY}),
}
"""Besides an admin key, who may send each command in a cluster with keys: roles, and
`OWNER` (the actor that owns the job named). An operator submits jobs it owns; a runtime (a
workload manager's adapter) submits for any owner."""


def check_roles(s: ClusterState, c: Command, key: TrustedKey) -> None:
    """Reject `c` (code `not_authorized`) when `key`'s roles do not allow it (`ROLE_RULES`)."""
    roles = set(key.roles)
    if ADMIN in roles:
        return
    allowed = ROLE_RULES[type(c)]
    if roles & allowed:
        if isinstance(c, SubmitJob) and RUNTIME not in roles and c.job.owner != c.actor:
            reject(
                "not_authorized",
                f"{c.actor!r} may submit only jobs it owns, not one of {c.job.owner!r} "
                "(a runtime key submits for others)",
            )
        return
    job_id = getattr(c, "job", None)
    if OWNER in allowed and isinstance(job_id, str):
        job = s.jobs.get(job_id)
        if job is not None and job.spec.owner == c.actor:
            return
    needs = sorted(str(r) for r in allowed)
    reject(
        "not_authorized",
        f"{c.type} needs a key with the role {' or '.join([*needs, 'admin'])}: key {key.id} "
        f"of {c.actor!r} has {', '.join(str(r) for r in key.roles)}",
    )


def check_authorized(s: ClusterState, c: Command, key: TrustedKey | None = None) -> None:
    """Reject `c` (code `not_authorized`) when the roles of `key`, the key that signed it,
    do not allow it; in a cluster without keys, when it needs an admin and its actor is not
    one (also when it brings keys: an open cluster's admin list decides who turns them on)."""
    if key is not None:
        check_roles(s, c, key)
        if s.settings.keys is not None:
            return
    admins = s.settings.admins
    if admins is None or c.actor in admins:
        return
    what = admin_action(s, c)
    if what is not None:
        reject(
            "not_authorized",
            f"{what} needs an admin: {c.actor!r} is not in the cluster's admin list "
            "(policy setting `admins`)",
        )
