"""Capacity planning: how many nodes are usable when every slice must fit inside one rack.

The model (exact):

- A cluster has R racks of N nodes; each node is unavailable (failed, in repair) with
  probability P, independently of every other node. The healthy nodes of one rack are then
  k ~ Binomial(N, 1 - P).
- A rack keeps `spares` nodes aside as hot spares (default 0): at most N - spares of its nodes
  are ever given to slices, and failures eat into the spares first. A rack with k healthy nodes
  therefore hosts floor(min(k, N - spares) / s) slices of s nodes, which use
  s * floor(min(k, N - spares) / s) nodes.
- Usable nodes of the cluster = R * E[s * floor(min(k, N - spares) / s)], the expectation taken
  over the binomial. The usable fraction is that over R * N.

`monte_carlo_usable` samples the same thing node by node (independent Bernoulli draws per node,
seeded), as a check of the exact sum and for what-ifs the formula does not cover.

Unavailability from reliability figures: P = MTTR / (MTBI + MTTR) (the share of time a node
spends in repair in a renewal process of MTBI up, MTTR down).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from rackplane.models.jobs import MAX_SLICE_NODES

DEFAULT_SLICE_SIZES = (8, 9, 16, 18)
MAX_RACK_NODES = MAX_SLICE_NODES
"""The largest rack the model takes: the largest slice rackplane places (1,024 nodes; the exact
sum's binomial coefficients still fit a float there)."""
MAX_DRAWS = 1_000_000_000
"""Most node states one Monte Carlo estimate draws (racks x nodes x trials): ~10 s of numpy."""
MAX_SWEEP_POINTS = 10_001
_CHUNK = 2_000_000
"""Node states drawn at once: bounds the memory of a draw to ~16 MB of floats."""


def default_slice_sizes(nodes_per_rack: int, spares: int = 0) -> tuple[int, ...]:
    """The slice sizes compared when none are given: those of `DEFAULT_SLICE_SIZES` that fit a
    rack's room (its nodes less its spares), and the room itself.

    With 2 spares on an NVL72 that is (8, 9, 16): 18 no longer fits beside the spares, and the
    question is still worth asking. A rack without room gets `DEFAULT_SLICE_SIZES`, so the
    check of the spares says what is wrong.

    >>> default_slice_sizes(18, spares=2)
    (8, 9, 16)
    >>> default_slice_sizes(18, spares=1)
    (8, 9, 16, 17)
    """
    room = nodes_per_rack - spares
    if room < 1:
        return DEFAULT_SLICE_SIZES
    fitting = tuple(s for s in DEFAULT_SLICE_SIZES if s <= room)
    return fitting if room in fitting else (*fitting, room)


class CapacityError(ValueError):
    """The question has no answer (a slice larger than a rack, a probability outside [0, 1])."""


class SliceCapacity(BaseModel):
    """Usable capacity for one slice size."""

    model_config = ConfigDict(frozen=True)

    slice_size: int
    usable_nodes: float
    usable_fraction: float
    monte_carlo: float | None = None
    """The sampled estimate of `usable_nodes` (None unless asked for)."""


class Advantage(BaseModel):
    """How much more capacity the best slice size gives than another one."""

    model_config = ConfigDict(frozen=True)

    slice_size: int
    extra_nodes: float
    extra_fraction: float | None
    """(best - other) / other; None when the other gives nothing at all."""


class CapacityReport(BaseModel):
    """Usable capacity of a cluster at one unavailability, for several slice sizes."""

    model_config = ConfigDict(frozen=True)

    racks: int
    nodes_per_rack: int
    unavailability: float
    spares: int = 0
    results: tuple[SliceCapacity, ...]
    best_slice_size: int
    advantage: tuple[Advantage, ...]
    """The best slice size against each other one."""


def unavailability_from(mtbi_days: float, mttr_days: float) -> float:
    """P = MTTR / (MTBI + MTTR).

    Raises:
        CapacityError: a negative or non-finite time (NaN, infinity), or both zero.
    """
    if not (math.isfinite(mtbi_days) and math.isfinite(mttr_days)):
        raise CapacityError(f"MTBI and MTTR must be numbers of days, got {mtbi_days}, {mttr_days}")
    if mtbi_days < 0 or mttr_days < 0 or mtbi_days + mttr_days <= 0:
        raise CapacityError("MTBI and MTTR must be non-negative and not both zero")
    return mttr_days / (mtbi_days + mttr_days)


def check_shape(nodes_per_rack: int, slice_size: int, spares: int = 0, racks: int = 1) -> None:
    """Raise `CapacityError` unless a slice of `slice_size` fits a rack with its spares kept (and
    the rack has 1 to `MAX_RACK_NODES` nodes, the cluster a rack at least)."""
    if racks < 1:
        raise CapacityError(f"a cluster needs at least one rack, got {racks}")
    if nodes_per_rack < 1:
        raise CapacityError(f"a rack needs at least one node, got {nodes_per_rack}")
    if nodes_per_rack > MAX_RACK_NODES:
        raise CapacityError(
            f"a rack of {nodes_per_rack:,} nodes is beyond the model: at most "
            f"{MAX_RACK_NODES:,} (an NVL72 rack has 18)"
        )
    if spares < 0 or spares >= nodes_per_rack:
        raise CapacityError(
            f"spares per rack must be between 0 and {nodes_per_rack - 1}, got {spares}"
        )
    if slice_size < 1:
        raise CapacityError(f"slice size must be at least 1, got {slice_size}")
    room = nodes_per_rack - spares
    if slice_size > room:
        kept = f" after keeping {spares} spares" if spares else ""
        raise CapacityError(
            f"a slice of {slice_size} nodes cannot fit in one rack of {nodes_per_rack} nodes"
            f"{kept} (at most {room}); choose a slice size of at most {room}"
        )


def _check_probability(p: float) -> None:
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        raise CapacityError(f"unavailability is a probability in [0, 1], got {p}")


def rack_usable(healthy: int, nodes_per_rack: int, slice_size: int, spares: int = 0) -> int:
    """Nodes a rack with `healthy` healthy nodes gives to slices of `slice_size`."""
    usable = min(healthy, nodes_per_rack - spares)
    return slice_size * (usable // slice_size)


def usable_nodes(
    racks: int, nodes_per_rack: int, unavailability: float, slice_size: int, spares: int = 0
) -> float:
    """Expected usable nodes of the cluster (exact; see the module docstring).

    Raises:
        CapacityError: a slice that cannot fit a rack, or P outside [0, 1].
    """
    check_shape(nodes_per_rack, slice_size, spares, racks)
    _check_probability(unavailability)
    n, q = nodes_per_rack, 1.0 - unavailability
    expected = 0.0
    for k in range(n + 1):
        used = rack_usable(k, n, slice_size, spares)
        if used:
            expected += used * math.comb(n, k) * q**k * unavailability ** (n - k)
    return racks * expected


def monte_carlo_usable(
    racks: int,
    nodes_per_rack: int,
    unavailability: float,
    slice_sizes: Sequence[int],
    *,
    trials: int,
    seed: int,
    spares: int = 0,
) -> dict[int, float]:
    """Sampled usable nodes per slice size: each node of each rack of each trial is drawn
    unavailable with probability P (one seeded generator, the same draws for every size).

    Raises:
        CapacityError: as `usable_nodes`, fewer than one trial, or more than `MAX_DRAWS` draws.
    """
    if trials < 1:
        raise CapacityError(f"Monte Carlo needs at least one trial, got {trials}")
    for s in slice_sizes:
        check_shape(nodes_per_rack, s, spares, racks)
    _check_probability(unavailability)
    draws = racks * nodes_per_rack * trials
    if draws > MAX_DRAWS:
        raise CapacityError(
            f"Monte Carlo would draw {draws:,} node states (racks x nodes x trials); at most "
            f"{MAX_DRAWS:,}: ask for fewer trials"
        )
    rng = np.random.default_rng(seed)
    totals = dict.fromkeys(slice_sizes, 0.0)
    # At most _CHUNK draws at once: several trials of a small cluster, or a block of racks of
    # one trial of a large one.
    trials_at_once = max(1, _CHUNK // (racks * nodes_per_rack))
    racks_at_once = max(1, min(racks, _CHUNK // nodes_per_rack))
    done = 0
    while done < trials:
        m = min(trials_at_once, trials - done)
        for first in range(0, racks, racks_at_once):
            block = min(racks_at_once, racks - first)
            down = rng.random((m, block, nodes_per_rack)) < unavailability
            healthy = nodes_per_rack - down.sum(axis=2)
            room = np.minimum(healthy, nodes_per_rack - spares)
            for s in slice_sizes:
                totals[s] += float((s * (room // s)).sum())
        done += m
    return {s: totals[s] / trials for s in slice_sizes}


def capacity_report(
    racks: int,
    nodes_per_rack: int,
    unavailability: float,
    slice_sizes: Sequence[int] = DEFAULT_SLICE_SIZES,
    *,
    spares: int = 0,
    trials: int | None = None,
    seed: int = 0,
) -> CapacityReport:
    """Usable capacity for each slice size, the best one, and its advantage over the others.

    Args:
        racks: racks in the cluster.
        nodes_per_rack: nodes per rack (18 for an NVL72).
        unavailability: probability that a node is unavailable.
        slice_sizes: slice sizes to compare (each must fit a rack).
        spares: nodes per rack kept as hot spares.
        trials: Monte Carlo trials beside the exact figure; None for none.
        seed: the Monte Carlo seed.

    Raises:
        CapacityError: a slice size that cannot fit a rack, or a bad probability.
    """
    if not slice_sizes:
        raise CapacityError("give at least one slice size")
    sizes = tuple(dict.fromkeys(slice_sizes))
    exact = {s: usable_nodes(racks, nodes_per_rack, unavailability, s, spares) for s in sizes}
    sampled: dict[int, float] = {}
    if trials is not None:
        sampled = monte_carlo_usable(
            racks, nodes_per_rack, unavailability, sizes, trials=trials, seed=seed, spares=spares
        )
    total = racks * nodes_per_rack
    results = tuple(
        SliceCapacity(
            slice_size=s,
            usable_nodes=exact[s],
            usable_fraction=exact[s] / total,
            monte_carlo=sampled.get(s),
        )
        for s in sizes
    )
    best = max(sizes, key=lambda s: (exact[s], -s))
    advantage = tuple(
        Advantage(
            slice_size=s,
            extra_nodes=exact[best] - exact[s],
            extra_fraction=(exact[best] - exact[s]) / exact[s] if exact[s] > 0 else None,
        )
        for s in sizes
        if s != best
    )
    return CapacityReport(
        racks=racks,
        nodes_per_rack=nodes_per_rack,
        unavailability=unavailability,
        spares=spares,
        results=results,
        best_slice_size=best,
        advantage=advantage,
    )


def parse_sweep(text: str) -> list[float]:
    """`START:STOP:STEP` -> the probabilities from START to STOP inclusive.

    Raises:
        CapacityError: not three numbers, a step that is not positive, values outside [0, 1],
            or more than `MAX_SWEEP_POINTS` points.
    """
    parts = text.split(":")
    try:
        start, stop, step = (float(p) for p in parts)
    except ValueError:
        raise CapacityError(f"expected START:STOP:STEP (e.g. 0:0.1:0.01), got {text!r}") from None
    if not all(map(math.isfinite, (start, stop, step))):
        raise CapacityError(f"expected three finite numbers START:STOP:STEP, got {text!r}")
    if step <= 0:
        raise CapacityError(f"the sweep step must be positive, got {step}")
    if not (0 <= start <= 1 and 0 <= stop <= 1) or stop < start:
        raise CapacityError(f"the sweep must go up within [0, 1], got {start} to {stop}")
    count = math.floor((stop - start) / step + 1e-9) + 1
    if count > MAX_SWEEP_POINTS:
        raise CapacityError(
            f"the sweep has {count:,} points; at most {MAX_SWEEP_POINTS:,}: take a larger step"
        )
    return [round(start + i * step, 12) for i in range(count)]
