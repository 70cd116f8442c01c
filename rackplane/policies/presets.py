"""Named policy stacks, as the simulator, the demo and what-if replays compare them.

Each preset is a list of policies (in the order the engine offers them events) and the
settings it implies. Failures are always answered (a slice with a dead node cannot go on):
without spares, `spare_swap` still swaps onto any free node, then migrates or re-queues.
"""

from __future__ import annotations

from collections.abc import Sequence

from rackplane.models import PolicySettings
from rackplane.policies.base import Policy
from rackplane.policies.defrag import Defrag
from rackplane.policies.reclaim import Reclaim
from rackplane.policies.reservations import Reservations
from rackplane.policies.spare_swap import SpareSwap
from rackplane.policies.tas import NaiveScheduler, TopologyAwareScheduler
from rackplane.policies.time_limits import TimeLimits

PRESETS = ("naive", "tas", "tas+spares", "tas+spares+defrag", "tas+spares+defrag+ntp")


def preset(name: str, base: PolicySettings | None = None) -> tuple[list[Policy], PolicySettings]:
    """Policies and settings of a preset.

    Args:
        name: one of `PRESETS`.
        base: settings to start from (slice size, restart overhead...); the preset overrides
            only what it is about: rack-local slices, spares, defrag, NTP.

    Raises:
        ValueError: for an unknown name.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(PRESETS)}")
    base = base or PolicySettings()
    parts = set(name.split("+"))
    spares = base.spares_per_rack if "spares" in parts else 0
    settings = base.model_copy(
        update={
            "rack_local_slices": name != "naive",
            "spares_per_rack": spares,
            "defrag_enabled": "defrag" in parts,
            "ntp_allowed": "ntp" in parts,
        }
    )
    scheduler: Policy = NaiveScheduler() if name == "naive" else TopologyAwareScheduler()
    policies: list[Policy] = [SpareSwap(), scheduler, Reclaim(), TimeLimits(), Reservations()]
    if "defrag" in parts:
        policies.append(Defrag())
    return policies, settings


def default_policies() -> Sequence[Policy]:
    """The production stack: spare_swap, tas, reclaim, defrag, time_limits, reservations (NTP
    and defrag follow the settings; reclaim acts only where queues are set, time_limits on
    jobs with a time limit, reservations where an admin reserved nodes)."""
    return (
        SpareSwap(),
        TopologyAwareScheduler(),
        Reclaim(),
        Defrag(),
        TimeLimits(),
        Reservations(),
    )
