"""The search inside Auto Defrag: options per rack, chains of extra victims, a budget.

See `rackplane.policies.defrag` for the algorithm overview; this module holds its step 2
(options) and the cost-ordered enumeration of step 3.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping, Sequence

from rackplane.models import DefragAlternative, JobId, RackId, TopologyIndex
from rackplane.policies._defrag_seeds import Option, Ranked, Seeds
from rackplane.policies.placement import Capacity
from rackplane.projections.state import JobState

MAX_EXTRAS = 3
"""Extra victims (outside the target rack) a chain may add to a seed."""
ALTERNATIVES_KEPT = 3


_Entry = tuple[
    tuple[float, int, int, int, int],
    Option,
    tuple[JobId, ...],
    int,
    float,
    float,
    int,
    int,
]


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


class RoomBound:
    """`room_for` for every option of one slice, as a slack (room less need) that adds up:
    the victims chosen for earlier slices and the earlier targets are counted once, then an
    option's rack (when new) and each of its victims add a term of their own. Searching
    carries the slack along a chain of extras instead of summing again per option."""

    def __init__(
        self,
        base: Capacity,
        room_total: int,
        freed_in: dict[JobId, dict[RackId, int]],
        freed_total: dict[JobId, int],
        nodes: dict[JobId, int],
        chosen: Sequence[JobId],
        targets: set[RackId],
    ) -> None:
        self.usable = base.usable
        self.freed_in = freed_in
        self.freed_total = freed_total
        self.nodes = nodes
        self.chosen = chosen
        self.targets = targets
        self._outside: dict[JobId, int] = {}
        self._racks: dict[RackId, int] = {}
        room = room_total - sum(max(0, base.usable[r]) for r in targets)
        self.slack = room + sum(self._out(v) - nodes[v] for v in chosen)

    def _out(self, victim: JobId) -> int:
        """Nodes the victim frees outside the earlier targets."""
        out = self._outside.get(victim)
        if out is None:
            per = self.freed_in.get(victim)
            out = self.freed_total[victim] - sum(per.get(t, 0) for t in self.targets) if per else 0
            self._outside[victim] = out
        return out

    def rack(self, rack: RackId) -> int:
        """The slack with `rack` as a target too, before the option's own victims."""
        slack = self._racks.get(rack)
        if slack is None:
            slack = self.slack
            if rack not in self.targets:
                slack -= max(0, self.usable[rack])
                for v in self.chosen:
                    per = self.freed_in.get(v)
                    if per:
                        slack -= per.get(rack, 0)
            self._racks[rack] = slack
        return slack

    def victim(self, rack: RackId, victim: JobId) -> int:
        """What preempting `victim` adds to the slack of an option on `rack` (never > 0 for
        a victim holding at most the nodes it asked for)."""
        delta = self._out(victim) - self.nodes[victim]
        if rack not in self.targets:
            per = self.freed_in.get(victim)
            if per:
                delta -= per.get(rack, 0)
        return delta

    def admits(self, rack: RackId, victims: Sequence[JobId]) -> bool:
        """`room_for(chosen + victims, targets + {rack}, ...)`."""
        return self.rack(rack) + sum(self.victim(rack, v) for v in victims) >= 0


class Search:
    """Victim sets for one slice in order of cost: each seed (a rack and a minimal set of its
    victims) first alone, then with extra victims elsewhere, whose leaving can make room to
    re-place the others (a chain of at most `MAX_EXTRAS`). Extras are enumerated lazily,
    cheapest subsets first: from (set, last) the next are (set + next) and (set - last + next),
    which visits every subset of the extras exactly once in non-decreasing cost. Stops after
    the plan's budget of validations.

    An option with victims that fails the room bound (`RoomBound`) is skipped here: it spends
    no validation, only the budget's skips, and counts as rejected.

    A heap entry is (rank key, seed, extras, last, then the cost and the room slack of the
    extras without their last one and with it): running sums give each option the cost
    `sum()` would (the same additions in the same order) and its slack without summing again;
    a seed's fabric distance and rack order are looked up once."""

    def __init__(
        self,
        seeds: Seeds,
        ranked: Ranked,
        chosen: list[JobId],
        cost: dict[JobId, float],
        index: TopologyIndex,
        anchor: RackId | None,
        budget: Budget,
        bound: RoomBound,
    ) -> None:
        self.budget = budget
        self.bound = bound
        self.cost = cost
        self.index = index
        self.anchor = anchor
        self.extras = ranked  # candidates by (cost, id), none of `chosen`
        self.counter = itertools.count()
        self.seen: set[tuple[RackId, frozenset[JobId]]] = set()
        self.rejected: list[Option] = []
        self._rejected_keys: set[tuple[float, RackId, tuple[JobId, ...]]] = set()
        self.seeds = seeds
        self._place: dict[RackId, tuple[int, int]] = {}
        # Ready seeds on the heap (one heapify); the racks still to expand, by lower bound: a
        # rack is expanded before the heap pops anything ranked at or above its bound, so its
        # options come out exactly where they would have had they been there from the start.
        self.heap: list[_Entry] = [
            self._entry(seed, (), -1, 0, 0, 0, self._seed_slack(seed)) for seed in seeds.ready
        ]
        heapq.heapify(self.heap)
        self.pending = sorted((round(low, 9), i, r) for i, (low, r) in enumerate(seeds.pending))
        self.pending.reverse()  # popped from the end, lowest bound first

    def _expand_up_to(self, heap: list[_Entry]) -> None:
        """Expand every pending rack whose bound does not exceed the heap's next cost."""
        pending = self.pending
        while pending and (not heap or pending[-1][0] <= heap[0][0][0]):
            _, _, rack = pending.pop()
            for option in self.seeds.expand(rack):
                entry = self._entry(option, (), -1, 0, 0, 0, self._seed_slack(option))
                heapq.heappush(heap, entry)

    def _key(self, o: Option) -> tuple[float, int, int, int, int]:
        hops = self.index.hops(self.anchor, o.rack) if self.anchor else 0
        return (
            round(o.cost, 9),
            len(o.victims),
            hops,
            self.index.rack_order[o.rack],
            next(self.counter),
        )

    def _placed(self, rack: RackId) -> tuple[int, int]:
        """The rack's fabric distance to the anchor and its order (looked up once)."""
        place = self._place.get(rack)
        if place is None:
            order = self.index.rack_order[rack]
            place = (self.index.hops(self.anchor, rack) if self.anchor else 0, order)
            self._place[rack] = place
        return place

    def _seed_slack(self, seed: Option) -> int:
        # A seed without victims is never skipped (see `plan_room`), but its chains are.
        bound = self.bound
        return bound.rack(seed.rack) + sum(bound.victim(seed.rack, v) for v in seed.victims)

    def _entry(
        self,
        seed: Option,
        extra: tuple[JobId, ...],
        last: int,
        head: float,
        total: float,
        head_slack: int,
        slack: int,
    ) -> _Entry:
        hops, order = self._placed(seed.rack)
        key = (
            round(seed.cost + total, 9),
            len(seed.victims) + len(extra),
            hops,
            order,
            next(self.counter),
        )
        return (key, seed, extra, last, head, total, head_slack, slack)

    def __iter__(self) -> Iterator[Option]:
        heap, cost, seen, budget = self.heap, self.cost, self.seen, self.budget
        extra_at = self.extras.get
        delta = self.bound.victim
        pending = self.pending
        push, counter = heapq.heappush, self.counter
        while budget.left > 0:
            if pending:
                self._expand_up_to(heap)
            if not heap:
                break
            rank, seed, extra, last, head, total, head_slack, slack = heapq.heappop(heap)
            nxt = last + 1
            v = extra_at(nxt)
            while v is not None and v in seed.victims:
                nxt += 1
                v = extra_at(nxt)
            if v is not None:
                # The children rank on the same rack as their parent: `_entry` without the
                # lookups.
                d = delta(seed.rack, v)
                c = cost[v]
                hops, order, size = rank[2], rank[3], len(seed.victims) + len(extra)
                if len(extra) < MAX_EXTRAS:
                    t = total + c
                    child = (round(seed.cost + t, 9), size + 1, hops, order, next(counter))
                    push(heap, (child, seed, (*extra, v), nxt, total, t, slack, slack + d))
                if extra:
                    t = head + c
                    child = (round(seed.cost + t, 9), size, hops, order, next(counter))
                    push(
                        heap,
                        (child, seed, (*extra[:-1], v), nxt, head, t, head_slack, head_slack + d),
                    )
            victims = seed.victims + extra
            key = (seed.rack, frozenset(victims))
            if key in seen:
                continue
            seen.add(key)
            option = Option(seed.cost + total, seed.rack, victims)
            if victims and slack < 0:
                # Not enough free nodes outside the targets for the victims, shape aside: no
                # placement can work; skipping it does not spend a validation.
                self.failed(option, counted=False)
                continue
            budget.left -= 1
            yield option

    def failed(self, option: Option, *, counted: bool = True) -> None:
        if len(self.rejected) < ALTERNATIVES_KEPT:
            self.rejected.append(option)
        self._rejected_keys.add((option.cost, option.rack, option.victims))
        if not counted:
            self.budget.skips_left -= 1
            if self.budget.skips_left <= 0:
                self.budget.left = 0

    def alternatives(self, picked: Option, lost: Mapping[JobId, float]) -> list[DefragAlternative]:
        """Options that lost: cheaper ones that were invalid, then the next seeds by cost
        (`lost`: each victim's GPU-hours, unweighted)."""

        def lost_to(o: Option, why_not: str) -> DefragAlternative:
            cost = sum(lost[v] for v in o.victims)
            return DefragAlternative(
                target_racks=(o.rack,), victims=o.victims, cost_gpu_hours=cost,
                why_not=why_not, score=o.cost,
            )  # fmt: skip

        out = [lost_to(o, "a victim could not be re-placed elsewhere") for o in self.rejected]
        out += [lost_to(o, "costlier") for o in self.costlier(picked, ALTERNATIVES_KEPT - len(out))]
        return out

    def costlier(self, picked: Option, want: int) -> list[Option]:
        """The first `want` seeds in rank order (`seeds.all()` ranked by `_key`) that are not
        `picked`, cost at least as much and were not rejected.

        Only the racks whose bound can reach them are expanded: the ready ones and those the
        search expanded, then the pending ones in order of bound until the bound passes the
        `want`-th found (a rack's options cost at least its bound). Keys rank by (cost,
        victims, hops, rack order, position among the rack's options), which is `_key`'s
        order: rack order is unique, and the counter follows the options of a rack in turn.
        """
        if want <= 0:
            return []
        rejected, floor = self._rejected_keys, picked.cost
        found: list[tuple[tuple[float, int, int, int, int], Option]] = []

        def add(rack: RackId, options: list[Option]) -> None:
            hops, order = self._placed(rack)
            for pos, o in enumerate(options):
                if o.cost < floor or (o.cost, o.rack, o.victims) in rejected:
                    continue
                if o.rack == picked.rack and o.victims == picked.victims:
                    continue
                found.append(((round(o.cost, 9), len(o.victims), hops, order, pos), o))

        for o in self.seeds.ready:
            add(o.rack, [o])
        for rack, options in self.seeds.expanded.items():
            add(rack, options)
        for low, _, rack in reversed(self.pending):  # lowest bound first
            if len(found) >= want:
                found.sort(key=lambda f: f[0])
                del found[want:]
                if low > found[-1][0][0]:
                    break
            add(rack, self.seeds.expand(rack))
        found.sort(key=lambda f: f[0])
        return [o for _, o in found[:want]]
