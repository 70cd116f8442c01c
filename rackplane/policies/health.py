"""GPU health classification: telemetry in, a node verdict out. Pure.

`SimpleRules` is the stateless rule set the streaming pipeline started with; the GPU Manager
(`gpu_health.GpuHealthRules`: the XID policy table, incidents, hysteresis) runs behind the same
`HealthClassifier` interface and is the worker's default.

Rules (the worst verdict over the node's GPUs wins):
- failed: the GPU fell off the bus; an uncorrectable ECC error; an XID that DCGM's health
  watch treats as a failure whatever else is on (48, 74, 79, 95, 119, 120, 140);
- degraded: an NVLink link down; a temperature at or above `hot_c` (90 C);
- healthy otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from rackplane.models import GpuSample, Health, NodeTelemetry, RackHealth, RackId, XidAction

FATAL_XIDS = frozenset({48, 74, 79, 95, 119, 120, 140})


@dataclass(frozen=True, slots=True)
class RackVerdict:
    """A rack-level fault the telemetry made evident, for the `ReportRackHealth` command."""

    rack: RackId
    health: RackHealth
    cause: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A node's health and the reason, for the `ReportNodeHealth` command."""

    health: Health
    cause: str = ""
    evidence: tuple[str, ...] = ()
    """The findings behind the verdict, one line each (`cause` joins them)."""
    rack: RackVerdict | None = None
    """A verdict on the node's rack that this sample made (None: nothing new about the rack)."""


RackView = tuple[RackId, RackHealth]
"""A node's rack and the controller's view of the rack's health."""


class HealthClassifier(Protocol):
    """Turns one node sample into a verdict."""

    def classify(
        self,
        sample: NodeTelemetry,
        *,
        known: Health | None = None,
        overrides: Mapping[int, XidAction] | None = None,
        rack: RackView | None = None,
        repaired_at: int = 0,
    ) -> Verdict:
        """The node's health after this sample.

        Args:
            sample: the node's telemetry.
            known: the controller's view of the node (a failed node stays failed).
            overrides: the cluster's operator overrides of the XID policy table.
            rack: the node's rack and the controller's view of it (None: judge the node only).
            repaired_at: the seq of the node's last repair in the controller's view (0: none); a
                repair newer than what was remembered starts the node over.
        """
        ...


RANK = {Health.HEALTHY: 0, Health.DEGRADED: 1, Health.FAILED: 2}
"""Severity order of health verdicts."""


@dataclass(frozen=True)
class SimpleRules:
    """The starting rule set (see the module docstring)."""

    hot_c: float = 90.0

    def classify(
        self,
        sample: NodeTelemetry,
        *,
        known: Health | None = None,
        overrides: Mapping[int, XidAction] | None = None,
        rack: RackView | None = None,
        repaired_at: int = 0,
    ) -> Verdict:
        """The worst verdict over the node's GPUs (stateless: the keywords are unused)."""
        worst = Verdict(Health.HEALTHY)
        for g in sample.gpus:
            v = self._gpu(g)
            if RANK[v.health] > RANK[worst.health]:
                worst = v
        return worst

    def _gpu(self, g: GpuSample) -> Verdict:
        index = g.index
        if g.fallen_off_bus:
            return Verdict(Health.FAILED, f"GPU {index} fell off the bus")
        if g.ecc_uncorrected:
            return Verdict(Health.FAILED, f"GPU {index}: {g.ecc_uncorrected} uncorrectable ECC")
        if g.xid is not None and g.xid in FATAL_XIDS:
            return Verdict(Health.FAILED, f"GPU {index}: XID {g.xid}")
        if g.nvlink_down:
            return Verdict(Health.DEGRADED, f"GPU {index}: {g.nvlink_down} NVLink links down")
        if g.temperature_c is not None and g.temperature_c >= self.hot_c:
            return Verdict(Health.DEGRADED, f"GPU {index} at {g.temperature_c:.0f} C")
        return Verdict(Health.HEALTHY)
