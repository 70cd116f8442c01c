"""Kubernetes: rackplane as the scheduler of GPU gangs on a real API server (`rackplane kube`).

`objects`, `gangs` and `plan` are pure (the rules: what the API server's picture and
rackplane's state make the adapter do); `adapter` and `_api` are the shell that lists,
watches, follows the log and acts. Import the shell from `rackplane.kube.adapter`.
"""

from rackplane.kube.gangs import GangError, gang_spec, job_id
from rackplane.kube.objects import GATE, JOB_LABEL, SCHEDULER_NAME, NodeView, PodKey, PodView
from rackplane.kube.plan import (
    Action,
    Annotate,
    Bind,
    Evict,
    Order,
    Plan,
    Recreate,
    Ungate,
    View,
    plan,
)

__all__ = [
    "GATE",
    "JOB_LABEL",
    "SCHEDULER_NAME",
    "Action",
    "Annotate",
    "Bind",
    "Evict",
    "GangError",
    "NodeView",
    "Order",
    "Plan",
    "PodKey",
    "PodView",
    "Recreate",
    "Ungate",
    "View",
    "gang_spec",
    "job_id",
    "plan",
]
