"""The search inside Auto Defrag: options per rack, chains of extra victims, a budget.

See `rackplane.policies.defrag` for the algorithm overview; this module holds its step 2
(options) and the cost-ordered enumeration of step 3.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from rackplane.models import DefragAlternative, JobId, RackId, TopologyIndex
from rackplane.policies.placement import Capacity
from rackplane.projections.state import JobState

MAX_EXTRAS = 3
"""Extra victims (outside the target rack) a chain may add to a seed."""
MAX_SUBSETS_PER_RACK = 4096
"""Exhaustive victim subsets per rack up to 12 candidates; greedy beyond."""
ALTERNATIVES_KEPT = 3


@dataclass(frozen=True, slots=True)
class Option:
    cost: float
    rack: RackId
    victims: tuple[JobId, ...]


class Budget:
    """Validations left to one plan, and options skipped without one (bounded too)."""

    def __init__(self, tries: int) -> None:
        self.left = tries
        self.skips_left = 50 * tries


def room_for(
    victims: Sequence[JobState],
    targets: set[RackId],
    base: Capacity,
    room_total: int,
    freed_in: dict[JobId, dict[RackId, int]],
) -> bool:
    """A necessary condition for re-placing `victims` outside `targets`: as many usable
    nodes there (now free, or freed by the victims) as the victims ask for."""
    need = sum(v.spec.nodes for v in victims)
    room = room_total - sum(max(0, base.usable[r]) for r in targets)
    for v in victims:
        room += sum(k for r, k in freed_in.get(v.id, {}).items() if r not in targets)
    return room >= need


class Search:
    """Victim sets for one slice in order of cost: each seed (a rack and a minimal set of its
    victims) first alone, then with extra victims elsewhere, whose leaving can make room to
    re-place the others (a chain of at most `MAX_EXTRAS`). Extras are enumerated lazily,
    cheapest subsets first: from (set, last) the next are (set + next) and (set - last + next),
    which visits every subset of the extras exactly once in non-decreasing cost. Stops after
    the plan's budget of validations."""

    def __init__(
        self,
        seeds: list[Option],
        pool: list[JobState],
        chosen: list[JobId],
        cost: dict[JobId, float],
        index: TopologyIndex,
        anchor: RackId | None,
        budget: Budget,
    ) -> None:
        self.budget = budget
        self.cost = cost
        self.index = index
        self.anchor = anchor
        taken = set(chosen)
        self.extras = sorted((v.id for v in pool if v.id not in taken), key=lambda v: (cost[v], v))
        self.heap: list[tuple[tuple[float, int, int, int, int], Option, tuple[JobId, ...], int]]
        self.heap = []
        self.counter = itertools.count()
        self.seen: set[tuple[RackId, frozenset[JobId]]] = set()
        self.rejected: list[Option] = []
        self.seeds = seeds
        for seed in seeds:
            self._push(seed, (), -1)

    def _key(self, o: Option) -> tuple[float, int, int, int, int]:
        hops = self.index.hops(self.anchor, o.rack) if self.anchor else 0
        return (
            round(o.cost, 9),
            len(o.victims),
            hops,
            self.index.rack_order[o.rack],
            next(self.counter),
        )

    def _push(self, seed: Option, extra: tuple[JobId, ...], last: int) -> None:
        victims = seed.victims + extra
        option = Option(seed.cost + sum(self.cost[v] for v in extra), seed.rack, victims)
        heapq.heappush(self.heap, (self._key(option), seed, extra, last))

    def __iter__(self) -> Iterator[Option]:
        while self.heap and self.budget.left > 0:
            _, seed, extra, last = heapq.heappop(self.heap)
            nxt = last + 1
            while nxt < len(self.extras) and self.extras[nxt] in seed.victims:
                nxt += 1
            if nxt < len(self.extras):
                if len(extra) < MAX_EXTRAS:
                    self._push(seed, (*extra, self.extras[nxt]), nxt)
                if extra:
                    self._push(seed, (*extra[:-1], self.extras[nxt]), nxt)
            victims = seed.victims + extra
            key = (seed.rack, frozenset(victims))
            if key in self.seen:
                continue
            self.seen.add(key)
            self.budget.left -= 1
            yield Option(seed.cost + sum(self.cost[v] for v in extra), seed.rack, victims)

    def failed(self, option: Option, *, counted: bool = True) -> None:
        self.rejected.append(option)
        if not counted:
            self.budget.left += 1
            self.budget.skips_left -= 1
            if self.budget.skips_left <= 0:
                self.budget.left = 0

    def alternatives(self, picked: Option) -> list[DefragAlternative]:
        """Options that lost: cheaper ones that were invalid, then the next seeds by cost."""
        out = [
            DefragAlternative(
                target_racks=(o.rack,),
                victims=o.victims,
                cost_gpu_hours=o.cost,
                why_not="a victim could not be re-placed elsewhere",
            )
            for o in self.rejected[:ALTERNATIVES_KEPT]
        ]
        costlier = sorted(
            (o for o in self.seeds if (o.rack, o.victims) != (picked.rack, picked.victims)),
            key=self._key,
        )
        for o in costlier:
            if len(out) >= ALTERNATIVES_KEPT:
                break
            if o.cost >= picked.cost and o not in self.rejected:
                out.append(
                    DefragAlternative(
                        target_racks=(o.rack,),
                        victims=o.victims,
                        cost_gpu_hours=o.cost,
                        why_not="costlier",
                    )
                )
        return out


def options(
    capacity: Capacity,
    racks: Iterable[RackId],
    size: int,
    in_rack: dict[RackId, dict[JobId, int]],
    cost: dict[JobId, float],
    taken: set[JobId],
) -> list[Option]:
    out = []
    for r in racks:
        room = capacity.usable[r]
        if room >= size:
            out.append(Option(0.0, r, ()))
            continue
        per = in_rack.get(r)
        if not per or room + sum(per.values()) < size:
            continue  # even every victim of the rack would not make room
        freeable = {v: n for v, n in per.items() if v not in taken}
        for subset in minimal_subsets(freeable, size - room, cost):
            out.append(Option(sum(cost[v] for v in subset), r, subset))
    return out


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
    # Depth-first over the ids in cost order: a set that reaches `need` is not extended (its
    # supersets are not minimal); a branch that cannot reach `need` is cut.
    sizes = [freeable[v] for v in ids]
    after = list(itertools.accumulate(reversed(sizes), initial=0))[::-1]
    found: list[tuple[int, ...]] = []

    def walk(start: int, chosen: tuple[int, ...], got: int, smallest: int) -> None:
        for i in range(start, len(ids)):
            g = got + sizes[i]
            low = min(smallest, sizes[i])
            if g >= need:
                if g - low < need:
                    found.append((*chosen, i))
            elif g + after[i + 1] >= need:
                walk(i + 1, (*chosen, i), g, low)

    walk(0, (), 0, after[0] + 1)
    found.sort(key=lambda t: (len(t), t))  # the order of itertools.combinations by size
    return [tuple(ids[i] for i in t) for t in found[:MAX_SUBSETS_PER_RACK]]
