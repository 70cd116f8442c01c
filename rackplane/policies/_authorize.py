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
  act within the settings an admin chose. The actor is what the sender says it is: who may
  write to the commands topic is for the broker's ACLs (docs/OPERATIONS.md).
"""

from __future__ import annotations

from rackplane.models import (
    CancelJob,
    Command,
    ConfigurePolicy,
    PlanDefrag,
    PreemptJobs,
    RegisterTopology,
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
        case RegisterTopology() if s.registered:
            return "re-registering the topology and settings of a registered cluster"
        case PreemptJobs(jobs=jobs) if not is_policy(c.actor):
            return f"preempting {', '.join(jobs)} by hand"
        case PlanDefrag(job=blocked) if not is_policy(c.actor):
            return f"triggering a defrag for job {blocked}"
        case CancelJob(job=job_id):
            state = s.jobs.get(job_id)
            if state is not None and state.spec.owner != c.actor:
                return f"cancelling job {job_id}, which {state.spec.owner} owns"
    return None


def check_authorized(s: ClusterState, c: Command) -> None:
    """Reject `c` (code `not_authorized`) when it needs an admin and its actor is not one."""
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
