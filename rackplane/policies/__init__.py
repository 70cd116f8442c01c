"""The controller's decider and the scheduling policies. Pure: no I/O, no clock."""

from rackplane.policies.controller import Rejected, decide, refuse_oversized
from rackplane.policies.defrag import Defrag, DefragPlan, plan_defrag
from rackplane.policies.gpu_health import GpuHealthRules, HealthRules, NodeHealthState, step
from rackplane.policies.placement import Capacity, Placement, Unplaceable, find_placement
from rackplane.policies.presets import PRESETS, default_policies, preset
from rackplane.policies.quotas import QueueBook
from rackplane.policies.reclaim import Reclaim, plan_reclaim
from rackplane.policies.reservations import Reservations
from rackplane.policies.spare_swap import SpareSwap
from rackplane.policies.tas import NaiveScheduler, TopologyAwareScheduler, schedule
from rackplane.policies.time_limits import TimeLimits

__all__ = [
    "PRESETS",
    "Capacity",
    "Defrag",
    "DefragPlan",
    "GpuHealthRules",
    "HealthRules",
    "NaiveScheduler",
    "NodeHealthState",
    "Placement",
    "QueueBook",
    "Reclaim",
    "Rejected",
    "Reservations",
    "SpareSwap",
    "TimeLimits",
    "TopologyAwareScheduler",
    "Unplaceable",
    "decide",
    "default_policies",
    "find_placement",
    "plan_defrag",
    "plan_reclaim",
    "preset",
    "refuse_oversized",
    "schedule",
    "step",
]
