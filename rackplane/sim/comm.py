"""The communication model: what a slice that spans racks costs each training step.

Inside a rack every GPU has NVLink (1.8 TB/s per GPU, both directions together: 900 GB/s each
way); between racks it has one InfiniBand port (400 Gb/s per direction: 50 GB/s), so a byte
that must cross racks moves `ratio` = 18x slower. Tensor-parallel all-reduce and
expert-parallel all-to-all run inside a slice, so a slice cut across racks pays for it.

The estimate, for one slice of n nodes with a_i of them in rack i:

1. Crossing share: in an all-to-all, the share of GPU pairs in different racks,
   x = 1 - sum((a_i / n)^2): 0 for a rack-local slice, 0.5 for a slice cut in halves.
2. Collective slowdown: each GPU sends its local share over NVLink and its crossing share over
   its NIC at the same time; the slower path sets the pace: max(1 - x, x * ratio) (1 when
   local; 9 for halves).
3. Step penalty: only the share of step time spent in TP/EP collectives that compute does not
   hide (`collective_share`) stretches: penalty = collective_share * (slowdown - 1).

`collective_share` defaults to 0.018, calibrated on the one measurement in DESIGN.md: 128 nodes
(8 slices of 16) on exactly 8 racks of 18 ran 1.59 s per iteration placed naively and 1.39 s
rack-aware (+14.4%). Laid out first fit in node order over racks of 18, the worst of those 8
slices is cut 8/8 (slowdown 9), so 0.144 = share x 8 gives share = 0.018. Set it from your own
profile (the exposed TP/EP communication share of a step) when you have one.

A job's step is as slow as its slowest slice (data-parallel replicas wait for each other), so a
job's penalty is the largest of its slices'. The simulator slows the job's progress by
1 / (1 + penalty) while it runs so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from rackplane.models import NodeId, RackId


class CommModel(BaseModel):
    """Bandwidths and the share of step time in TP/EP collectives (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nvlink_tb_s: float = Field(default=1.8, gt=0)
    """NVLink bandwidth per GPU, both directions together (TB/s)."""
    ib_gbit_s: float = Field(default=400.0, gt=0)
    """InfiniBand bandwidth per GPU, per direction (Gb/s)."""
    collective_share: float = Field(default=0.018, ge=0, le=1)
    """Share of a step spent in TP/EP collectives not hidden behind compute."""

    @property
    def ratio(self) -> float:
        """How many times less bandwidth a byte gets across racks (18 by default)."""
        nvlink_per_direction = self.nvlink_tb_s * 1000.0 / 2  # GB/s
        ib = self.ib_gbit_s / 8.0  # GB/s
        return nvlink_per_direction / ib

    def slice_penalty(self, nodes_per_rack: Iterable[int]) -> float:
        """Step-time penalty of one slice with these node counts per rack (0 when local)."""
        counts = [c for c in nodes_per_rack if c > 0]
        n = sum(counts)
        if len(counts) <= 1 or n == 0:
            return 0.0
        crossing = 1.0 - sum((c / n) ** 2 for c in counts)
        slowdown = max(1.0 - crossing, crossing * self.ratio)
        return self.collective_share * max(0.0, slowdown - 1.0)

    def job_penalty(
        self, slices: Iterable[Iterable[NodeId]], rack_of: Mapping[NodeId, RackId]
    ) -> float:
        """Step-time penalty of a job: that of its slowest slice."""
        worst = 0.0
        for nodes in slices:
            racks = [rack_of[n] for n in nodes]
            if len(set(racks)) <= 1:
                continue  # inside one rack (or empty): no penalty, and nothing to count
            worst = max(worst, self.slice_penalty(Counter(racks).values()))
        return worst
