"""Reliability arithmetic: how often racks and the cluster are interrupted.

With independent nodes that each see an interruption every `mtbi_days` on average, a rack of
N nodes sees one every mtbi / N days, and a cluster of R racks sees some rack interrupted every
mtbi / (N * R) days. DESIGN.md's figures: 490 days per 4-GPU node, 18 nodes per rack and 128
racks give ~27.2 days per rack and ~5.1 hours between rack interruptions across the cluster.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict


class ReliabilityReport(BaseModel):
    """Interruption rates of racks and of the cluster."""

    model_config = ConfigDict(frozen=True)

    node_mtbi_days: float
    nodes_per_rack: int
    racks: int
    rack_mtbi_days: float
    """Mean days between interruptions of one rack (some node of it)."""
    cluster_hours_between_rack_interruptions: float
    """Mean hours between interruptions of some rack, cluster-wide."""
    rack_interruptions_per_day: float
    """Expected rack interruptions per day, cluster-wide."""


def reliability(mtbi_days: float, nodes_per_rack: int, racks: int) -> ReliabilityReport:
    """Rack and cluster interruption rates from the node MTBI.

    Raises:
        ValueError: an MTBI that is not a positive finite number (NaN and infinity included),
            fewer than one node or rack, or figures too large or small for a float.
    """
    if not (math.isfinite(mtbi_days) and mtbi_days > 0):
        raise ValueError(f"the node MTBI must be a positive number of days, got {mtbi_days}")
    if nodes_per_rack < 1 or racks < 1:
        raise ValueError("a cluster needs at least one rack of at least one node")
    rack_mtbi = mtbi_days / nodes_per_rack
    hours = rack_mtbi * 24.0 / racks
    per_day = racks / rack_mtbi if rack_mtbi > 0 else math.inf
    if not all(math.isfinite(x) and x > 0 for x in (rack_mtbi, hours, per_day)):
        raise ValueError(
            f"a node MTBI of {mtbi_days:g} days over {nodes_per_rack:,} nodes per rack and "
            f"{racks:,} racks gives figures beyond what can be computed"
        )
    return ReliabilityReport(
        node_mtbi_days=mtbi_days,
        nodes_per_rack=nodes_per_rack,
        racks=racks,
        rack_mtbi_days=rack_mtbi,
        cluster_hours_between_rack_interruptions=hours,
        rack_interruptions_per_day=per_day,
    )
