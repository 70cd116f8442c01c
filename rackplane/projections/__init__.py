"""Cluster state, `evolve`, and read models derived from the state. Pure: no I/O, no clock."""

from rackplane.projections.evolve import EventGap, WrongCluster, evolve, fold
from rackplane.projections.occupancy import (
    ClusterSummary,
    NodeRole,
    RackOccupancy,
    cluster_summary,
    job_row,
    node_roles,
    rack_occupancy,
    state_digest,
)
from rackplane.projections.state import (
    BlockInfo,
    ClusterState,
    JobState,
    NodeState,
    QueueUsage,
    RackState,
    SeenCommands,
    SliceState,
    Window,
    initial_state,
    job_gpus,
    restart_cost,
)

__all__ = [
    "BlockInfo",
    "ClusterState",
    "ClusterSummary",
    "EventGap",
    "JobState",
    "NodeRole",
    "NodeState",
    "QueueUsage",
    "RackOccupancy",
    "RackState",
    "SeenCommands",
    "SliceState",
    "Window",
    "WrongCluster",
    "cluster_summary",
    "evolve",
    "fold",
    "initial_state",
    "job_gpus",
    "job_row",
    "node_roles",
    "rack_occupancy",
    "restart_cost",
    "state_digest",
]
