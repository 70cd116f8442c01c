"""The commands the console's actions send: the same commands the CLI sends, with the actor.

Pure: ids come from `new_id` and time from `now`, both passed in. The defrag action asks the
core (`plan_defrag`) for the plan Auto Defrag would make and sends its commands with the
operator as the actor; "allow interactive preemption for one defrag" plans on a state where the
operator's consent holds, so the plan may preempt interactive jobs, and the `PreemptJobs` it
sends carries `allow_interactive` with the operator as actor (the controller checks both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from rackplane.models import (
    CancelJob,
    Command,
    CordonNode,
    JobKind,
    JobSpec,
    RackHealth,
    ReportRackHealth,
    SubmitJob,
    UncordonNode,
)
from rackplane.policies.defrag import DefragPlan, plan_defrag, proposals
from rackplane.projections import ClusterState

NewId = Callable[[], str]


def cordon(cluster: str, actor: str, new_id: NewId, node: str, reason: str = "") -> CordonNode:
    """Keep new work off `node` (as `rackplane cordon`)."""
    return CordonNode(id=new_id(), cluster=cluster, actor=actor, node=node, reason=reason)


def uncordon(cluster: str, actor: str, new_id: NewId, node: str) -> UncordonNode:
    """Let `node` take work again (as `rackplane uncordon`)."""
    return UncordonNode(id=new_id(), cluster=cluster, actor=actor, node=node)


def rack_health(
    cluster: str, actor: str, new_id: NewId, rack: str, health: RackHealth, cause: str = ""
) -> ReportRackHealth:
    """Report a rack-level fault (an NVSwitch tray, the power shelf) or its end: the whole
    NVLink domain fails or comes back (as the GPU Manager or `rackplane rack-health` would)."""
    return ReportRackHealth(
        id=new_id(), cluster=cluster, actor=actor, rack=rack, health=health, cause=cause
    )


def cancel(cluster: str, actor: str, new_id: NewId, job: str, reason: str = "") -> CancelJob:
    """Stop `job` for good (as `rackplane cancel`)."""
    return CancelJob(id=new_id(), cluster=cluster, actor=actor, job=job, reason=reason)


def submit(
    cluster: str,
    actor: str,
    new_id: NewId,
    *,
    job: str,
    nodes: int,
    slice_size: int | None = None,
    kind: JobKind = JobKind.MANAGED,
    priority: int = 0,
    checkpoint_minutes: float | None = None,
    name: str = "",
    queue: str | None = None,
    reservation: str | None = None,
) -> SubmitJob:
    """Queue a job (as `rackplane submit`), in `queue` (None: the cluster's default) and, when
    given, in `reservation` (`submit --reservation`).

    Raises:
        ValueError: the spec is invalid (pydantic's ValidationError is a ValueError).
    """
    spec = JobSpec(
        id=job,
        name=name,
        owner=actor,
        nodes=nodes,
        slice_size=slice_size,
        kind=kind,
        priority=priority,
        checkpoint_interval=timedelta(minutes=checkpoint_minutes) if checkpoint_minutes else None,
        queue=queue,
        reservation=reservation,
    )
    return SubmitJob(id=new_id(), cluster=cluster, actor=actor, job=spec)


def defrag_plan(
    state: ClusterState, job: str, *, now: datetime, actor: str, allow_interactive: bool
) -> DefragPlan | None:
    """The plan Auto Defrag would make for the queued `job` (None: no plan exists)."""
    if job not in state.jobs:
        return None
    if allow_interactive:
        settings = state.settings.model_copy(update={"allow_interactive_preemption": True})
        state = replace(state, settings=settings, interactive_preemption_allowed_by=actor)
    return plan_defrag(state, job, now=now)


def defrag_commands(
    state: ClusterState, plan: DefragPlan, actor: str, new_id: NewId
) -> list[Command]:
    """The plan's commands (record, preempt, place) with the operator as actor."""
    return [
        c.model_copy(update={"id": new_id(), "actor": actor})
        for c in proposals(state, plan, policy="operator")
    ]
