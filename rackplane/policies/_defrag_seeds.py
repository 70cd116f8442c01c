"""Step 2 of Auto Defrag: the options of one slice, rack by rack (see `defrag`).

An option is a rack and a minimal set of its victims whose nodes make room there (nothing to
preempt when the rack already has room). `Seeds` builds them lazily for the search: a rack
that needs victims first shows only a lower bound of its options' cost (its cheapest victim)
and is expanded when the search reaches that bound. Searches stop after a few validations,
so most racks are never expanded (on a simulated year, ~2% of them were).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from rackplane.models import JobId, RackId

MAX_SUBSETS_PER_RACK = 4096
"""Exhaustive victim subsets per rack up to 12 candidates; greedy beyond."""


@dataclass(frozen=True, slots=True)
class Option:
    cost: float
    rack: RackId
    victims: tuple[JobId, ...]


class RackVictims:
    """One plan's victims as the options see them: per rack, the nodes each would free, their
    total, and the cheapest victim by (cost, id)."""

    def __init__(self, in_rack: dict[RackId, dict[JobId, int]], cost: dict[JobId, float]) -> None:
        self.in_rack = in_rack
        self.cost = cost
        self.total = {r: sum(per.values()) for r, per in in_rack.items()}
        self.cheapest = {r: min((cost[v], v) for v in per) for r, per in in_rack.items() if per}

    def low(self, rack: RackId, taken: set[JobId]) -> float | None:
        """The cost of the rack's cheapest victim not `taken`; None when there is none."""
        best = self.cheapest.get(rack)
        if best is None:
            return None
        if best[1] not in taken:
            return best[0]
        cost = self.cost
        return min((cost[v] for v in self.in_rack[rack] if v not in taken), default=None)


class Ranked:
    """Victims in (cost, id) order, less `skip`, sorted only as far as read: one heapify
    (O(victims)), then one pop per victim read; a search reads a few of thousands."""

    def __init__(self, cost: dict[JobId, float], skip: Iterable[JobId] = ()) -> None:
        skip = set(skip)
        self._heap = [(c, v) for v, c in cost.items() if v not in skip]
        heapq.heapify(self._heap)
        self._read: list[JobId] = []

    def get(self, i: int) -> JobId | None:
        """The `i`-th victim, or None when there are no more than `i`."""
        read, heap = self._read, self._heap
        while len(read) <= i and heap:
            read.append(heapq.heappop(heap)[1])
        return read[i] if i < len(read) else None


class Seeds:
    """The options of one slice on `racks` (in order): those without victims at once, the
    others per rack on demand, each rack with a lower bound of its options' cost."""

    def __init__(
        self,
        usable: dict[RackId, int],
        racks: Iterable[RackId],
        size: int,
        victims: RackVictims,
        taken: set[JobId],
    ) -> None:
        self.usable, self.size, self.victims, self.taken = usable, size, victims, taken
        self.racks = list(racks)
        self.ready: list[Option] = []
        self.pending: list[tuple[float, RackId]] = []
        self.expanded: dict[RackId, list[Option]] = {}
        """The racks expanded so far, with their options (each rack's are built once)."""
        total, low_of = victims.total, victims.low
        for r in self.racks:
            room = usable[r]
            if room >= size:
                self.ready.append(Option(0.0, r, ()))
                continue
            if room + total.get(r, 0) < size:
                continue  # even every victim of the rack would not make room
            low = low_of(r, taken)
            if low is not None:
                # An option costs the sum of its victims' costs: at least the cheapest one
                # when no cost is negative (none is: GPU-hours at risk, weighted).
                self.pending.append((low if low >= 0 else -math.inf, r))

    def expand(self, rack: RackId) -> list[Option]:
        """The options of a rack that needs victims, in `options` order."""
        got = self.expanded.get(rack)
        if got is None:
            v = self.victims
            got = rack_options(self.usable, rack, self.size, v.in_rack, v.cost, self.taken)
            self.expanded[rack] = got
        return got

    def all(self) -> list[Option]:
        """Every option, in `options` order."""
        v = self.victims
        return options(self.usable, self.racks, self.size, v.in_rack, v.cost, self.taken)


def options(
    usable: dict[RackId, int],
    racks: Iterable[RackId],
    size: int,
    in_rack: dict[RackId, dict[JobId, int]],
    cost: dict[JobId, float],
    taken: set[JobId],
) -> list[Option]:
    """Per rack in order: no victims when it has room, else each minimal set of its victims
    (not `taken`) that makes room."""
    return [o for r in racks for o in rack_options(usable, r, size, in_rack, cost, taken)]


def rack_options(
    usable: dict[RackId, int],
    rack: RackId,
    size: int,
    in_rack: dict[RackId, dict[JobId, int]],
    cost: dict[JobId, float],
    taken: set[JobId],
) -> list[Option]:
    """The options of one rack (see `options`)."""
    room = usable[rack]
    if room >= size:
        return [Option(0.0, rack, ())]
    per = in_rack.get(rack)
    if not per or room + sum(per.values()) < size:
        return []  # even every victim of the rack would not make room
    freeable = {v: n for v, n in per.items() if v not in taken}
    return [
        Option(sum(cost[v] for v in subset), rack, subset)
        for subset in minimal_subsets(freeable, size - room, cost)
    ]


def minimal_subsets(
    freeable: dict[JobId, int], need: int, cost: dict[JobId, float]
) -> list[tuple[JobId, ...]]:
    """Sets of victims freeing at least `need` nodes, none of whose members is superfluous."""
    if sum(freeable.values()) < need:
        return []
    ids = sorted(freeable, key=lambda v: (cost[v], v))
    if len(ids) > 12:
        # Greedy by cost per node freed, plus every single victim that suffices alone.
        greedy: list[JobId] = []
        got = 0
        for v in sorted(ids, key=lambda v: (cost[v] / freeable[v], v)):
            greedy.append(v)
            got += freeable[v]
            if got >= need:
                break
        singles = [(v,) for v in ids if freeable[v] >= need]
        return [tuple(greedy), *singles]
    return [
        tuple(ids[i] for i in t) for t in _minimal_index_sets(tuple(freeable[v] for v in ids), need)
    ]


@lru_cache(maxsize=65536)
def _minimal_index_sets(sizes: tuple[int, ...], need: int) -> tuple[tuple[int, ...], ...]:
    """`minimal_subsets` on positions: it depends only on the sizes in cost order and the need,
    which repeat from plan to plan (a rack's victims change slowly), so it is remembered."""
    # Depth-first over the positions: a set that reaches `need` is not extended (its supersets
    # are not minimal); a branch that cannot reach `need` is cut.
    after = list(itertools.accumulate(reversed(sizes), initial=0))[::-1]
    found: list[tuple[int, ...]] = []

    def walk(start: int, chosen: tuple[int, ...], got: int, smallest: int) -> None:
        for i in range(start, len(sizes)):
            g = got + sizes[i]
            low = min(smallest, sizes[i])
            if g >= need:
                if g - low < need:
                    found.append((*chosen, i))
            elif g + after[i + 1] >= need:
                walk(i + 1, (*chosen, i), g, low)

    walk(0, (), 0, after[0] + 1)
    found.sort(key=lambda t: (len(t), t))  # the order of itertools.combinations by size
    return tuple(found[:MAX_SUBSETS_PER_RACK])
