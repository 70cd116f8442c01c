"""The failure model: when nodes and racks fail, why, and how long repairs take.

Theory of operation:

- Each node fails after an exponential time with mean `node_mtbi_days` (490 days per 4-GPU
  node by default, DESIGN.md). Its root cause is drawn from the Llama 3 interruption table
  (`data/llama3_interruptions.csv`, by count), the repair time from a lognormal per cause
  category (`repair`); the node fails again an exponential time after its repair.
- Each rack suffers a rack-level fault (an NVSwitch tray, the power shelf) after an exponential
  time with mean `rack_mtbi_days` (0 turns them off); it is back after `rack_repair`.
- `scripted` failures happen at fixed times, on top of the random ones (tests, what-ifs).

The whole schedule is drawn before a run from its own seeded generator, independent of the
policy: every policy compared on one seed meets exactly the same failures.

Default repair times are assumptions (the Llama 3 paper gives causes, not repair times): a
software or unknown cause is cleared by a restart or re-image (median 2 h), unplanned host
maintenance takes a shift (8 h), a network cable or switch port half a day (12 h), other host
parts a day (24 h), a GPU or its memory two days (48 h: drain, diagnose, swap the tray). Every
category has sigma 1.0 (mean = median x 1.65) unless set otherwise. With these defaults a node
is unavailable ~0.5% of the time; `expected_unavailability` gives the figure for a model.
"""

from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rackplane.models import NodeId, RackId, Topology


class Lognormal(BaseModel):
    """A lognormal duration given by its median and the sigma of its logarithm."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    median_hours: float = Field(gt=0)
    sigma: float = Field(default=1.0, ge=0)

    @property
    def mean_hours(self) -> float:
        """E[X] = median x exp(sigma^2 / 2)."""
        return self.median_hours * math.exp(self.sigma**2 / 2)

    def draw(self, rng: random.Random) -> timedelta:
        """One duration."""
        return timedelta(hours=rng.lognormvariate(math.log(self.median_hours), self.sigma))


def _default_repairs() -> dict[str, Lognormal]:
    return {
        "GPU": Lognormal(median_hours=48),
        "Host": Lognormal(median_hours=24),
        "Network": Lognormal(median_hours=12),
        "Unplanned Maintenance": Lognormal(median_hours=8),
        "Dependency": Lognormal(median_hours=2),
        "Unknown": Lognormal(median_hours=2),
    }


class ScriptedFailure(BaseModel):
    """A failure at a fixed time: of one node or of a whole rack."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at_hours: float = Field(ge=0)
    node: NodeId | None = None
    rack: RackId | None = None
    repair_hours: float = Field(default=24.0, gt=0)
    cause: str = "scripted"

    @model_validator(mode="after")
    def _one_target(self) -> ScriptedFailure:
        if (self.node is None) == (self.rack is None):
            raise ValueError("a scripted failure names exactly one of 'node' or 'rack'")
        return self


class FailureModel(BaseModel):
    """How nodes and racks fail and come back (see the module docstring for the defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_mtbi_days: float = Field(default=490.0, gt=0)
    """Mean days between interruptions of one node; `enabled: false` turns random ones off."""
    enabled: bool = True
    """Random node and rack failures; scripted ones happen either way."""
    repair: dict[str, Lognormal] = Field(default_factory=_default_repairs)
    """Repair time per cause category of the Llama 3 table; missing categories take the
    default `repair_default`."""
    repair_default: Lognormal = Lognormal(median_hours=24)
    rack_mtbi_days: float = Field(default=730.0, ge=0)
    """Mean days between rack-level faults of one rack (NVSwitch tray, power); 0: none."""
    rack_repair: Lognormal = Lognormal(median_hours=12, sigma=0.8)
    scripted: tuple[ScriptedFailure, ...] = ()

    def repair_for(self, category: str) -> Lognormal:
        """The repair-time distribution of a cause category."""
        return self.repair.get(category, self.repair_default)


@dataclass(frozen=True, slots=True)
class RootCause:
    """One row of the interruption table."""

    component: str
    category: str
    count: int


@cache
def root_causes() -> tuple[RootCause, ...]:
    """The Llama 3 interruption table shipped with the package (`data/`)."""
    text = resources.files("rackplane.sim").joinpath("data/llama3_interruptions.csv").read_text()
    rows = [line for line in text.splitlines() if line and not line.startswith("#")]
    return tuple(
        RootCause(r["component"], r["category"], int(r["count"]))
        for r in csv.DictReader(io.StringIO("\n".join(rows)))
    )


def mean_repair_hours(model: FailureModel) -> float:
    """Mean repair time of a node failure, over the root causes weighted by count."""
    causes = root_causes()
    total = sum(c.count for c in causes)
    return sum(c.count * model.repair_for(c.category).mean_hours for c in causes) / total


def expected_unavailability(model: FailureModel) -> float:
    """Long-run share of time a node is failed: MTTR / (MTBI + MTTR) (random failures only)."""
    if not model.enabled:
        return 0.0
    mttr = mean_repair_hours(model) / 24.0
    return mttr / (model.node_mtbi_days + mttr)


@dataclass(frozen=True, slots=True)
class Failure:
    """One failure of the schedule: a node (with its root cause) or a whole rack."""

    at: datetime
    repaired_at: datetime
    node: NodeId | None
    rack: RackId
    cause: str
    category: str


def failure_schedule(
    topology: Topology, model: FailureModel, *, start: datetime, end: datetime, seed: int
) -> list[Failure]:
    """Every failure between `start` and `end`, in time order (ties: racks, then nodes, in
    topology order). Drawn from `random.Random(f"{seed}:failures")`: the same for every policy.

    Raises:
        ValueError: a scripted failure names a node or rack the topology lacks.
    """
    rng = random.Random(f"{seed}:failures")
    causes = root_causes()
    weights = [c.count for c in causes]
    out: list[Failure] = []
    if model.enabled:
        node_rate = 1.0 / (model.node_mtbi_days * 86_400.0)
        for rack in topology.racks:
            for node in rack.nodes:
                t = _after(start, rng.expovariate(node_rate), end)
                while t is not None:
                    cause = rng.choices(causes, weights)[0]
                    back = t + model.repair_for(cause.category).draw(rng)
                    what = f"{cause.component} ({cause.category})"
                    out.append(Failure(t, back, node, rack.id, what, cause.category))
                    t = _after(back, rng.expovariate(node_rate), end)
        if model.rack_mtbi_days > 0:
            rack_rate = 1.0 / (model.rack_mtbi_days * 86_400.0)
            for rack in topology.racks:
                t = _after(start, rng.expovariate(rack_rate), end)
                while t is not None:
                    back = t + model.rack_repair.draw(rng)
                    out.append(Failure(t, back, None, rack.id, "NVSwitch tray fault", "Rack"))
                    t = _after(back, rng.expovariate(rack_rate), end)
    out.extend(_scripted(topology, model, start))
    order = {r.id: i for i, r in enumerate(topology.racks)}
    return sorted(out, key=lambda f: (f.at, f.node is not None, order[f.rack], f.node or ""))


def _after(t: datetime, seconds: float, end: datetime) -> datetime | None:
    """`t` plus `seconds`, or None when that is at or past `end` (or beyond the calendar)."""
    if t >= end or seconds >= (end - t).total_seconds():
        return None
    return t + timedelta(seconds=seconds)


def _scripted(topology: Topology, model: FailureModel, start: datetime) -> list[Failure]:
    rack_of = {n: r.id for r in topology.racks for n in r.nodes}
    racks = {r.id for r in topology.racks}
    out = []
    for s in model.scripted:
        at = start + timedelta(hours=s.at_hours)
        back = at + timedelta(hours=s.repair_hours)
        if s.node is not None:
            if s.node not in rack_of:
                raise ValueError(f"scripted failure names node {s.node!r}, not in the cluster")
            out.append(Failure(at, back, s.node, rack_of[s.node], s.cause, "Scripted"))
        else:
            assert s.rack is not None
            if s.rack not in racks:
                raise ValueError(f"scripted failure names rack {s.rack!r}, not in the cluster")
            out.append(Failure(at, back, None, s.rack, s.cause, "Rack"))
    return out
