"""Cluster state, `evolve`, and read models derived from the state. Pure: no I/O, no clock."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOME = {
    **dict.fromkeys(("EventGap", "WrongCluster", "evolve", "fold"), "evolve"),
    **dict.fromkeys(
        (
            "ClusterSummary", "NodeRole", "RackOccupancy", "cluster_summary", "job_row",
            "node_roles", "rack_occupancy", "state_digest",
        ),
        "occupancy",
    ),
    **dict.fromkeys(
        (
            "BlockInfo", "ClusterState", "JobState", "NodeState", "QueueUsage", "RackState",
            "SeenCommands", "SliceState", "Window", "initial_state", "job_gpus", "restart_cost",
        ),
        "state",
    ),
}  # fmt: skip
"""The module each name lives in: loaded on first use, so a reader of one module of the
package (`timeline`, for a client's table of events) does not load the fold (~25 ms)."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


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
