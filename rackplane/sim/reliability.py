"""Reliability arithmetic: how often racks and the cluster are interrupted.

With independent nodes that each see an interruption every `mtbi_days` on average, a rack of
N nodes sees one every mtbi / N days, and a cluster of R racks sees some rack interrupted every
mtbi / (N * R) days. DESIGN.md's figures: 490 days per 4-GPU node, 18 nodes per rack and 128
racks give ~27.2 days per rack and ~5.1 hours between rack interruptions across the cluster.
"""

from __future__ import annotations

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
        ValueError: a non-positive MTBI, or fewer than one node or rack.
    """
    if mtbi_days <= 0:
        raise ValueError(f"the node MTBI must be positive, got {mtbi_days} days")
    if nodes_per_rack < 1 or racks < 1:
        raise ValueError("a cluster needs at least one rack of at least one node")
    rack_mtbi = mtbi_days / nodes_per_rack
    return ReliabilityReport(
        node_mtbi_days=mtbi_days,
        nodes_per_rack=nodes_per_rack,
        racks=racks,
        rack_mtbi_days=rack_mtbi,
        cluster_hours_between_rack_interruptions=rack_mtbi * 24.0 / racks,
        rack_interruptions_per_day=racks / rack_mtbi,
    )
