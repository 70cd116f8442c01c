"""The search inside Auto Defrag: victim subsets and the count-only validation."""

from __future__ import annotations

import heapq
import itertools
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rackplane.models import JobId, RackId
from rackplane.policies._defrag_search import MAX_EXTRAS, Budget, RoomBound, Search, room_for
from rackplane.policies._defrag_seeds import (
    Option,
    RackVictims,
    Ranked,
    Seeds,
    minimal_subsets,
    options,
)

JOBS = [JobId(f"j{i}") for i in range(12)]


def _by_definition(
    freeable: dict[JobId, int], need: int, cost: dict[JobId, float]
) -> list[tuple[JobId, ...]]:
    """Every subset that frees `need` nodes and none of whose members is superfluous, by size,
    then in cost order: the enumeration written out."""
    ids = sorted(freeable, key=lambda v: (cost[v], v))
    out = []
    for k in range(1, len(ids) + 1):
        for sub in itertools.combinations(ids, k):
            freed = sum(freeable[v] for v in sub)
            if freed >= need and freed - min(freeable[v] for v in sub) < need:
                out.append(sub)
    return out


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.sampled_from(JOBS), st.integers(1, 18), max_size=12),
    st.integers(1, 40),
    st.data(),
)
def test_minimal_victim_sets_are_exactly_the_sets_without_a_superfluous_member(
    freeable: dict[JobId, int], need: int, data: st.DataObject
) -> None:
    cost = {v: data.draw(st.sampled_from([0.0, 1.0, 2.5, 7.0])) for v in freeable}
    assert minimal_subsets(freeable, need, cost) == _by_definition(freeable, need, cost)


def test_a_rack_without_enough_freeable_nodes_offers_no_victim_set() -> None:
    assert minimal_subsets({JOBS[0]: 3, JOBS[1]: 4}, 8, {JOBS[0]: 1.0, JOBS[1]: 1.0}) == []


# -- the room bound and the lazy search against their plain definitions -----------------------

RACKS = [RackId(f"r{i}") for i in range(6)]


def _victim(vid: JobId, nodes: int) -> SimpleNamespace:
    """What `room_for` reads of a job: its id and the nodes it asked for."""
    return SimpleNamespace(id=vid, spec=SimpleNamespace(nodes=nodes))


@st.composite
def _cluster(draw: st.DrawFn) -> dict[str, Any]:
    """Usable nodes per rack (negative: a reserve eaten into), and what each of up to 8 jobs
    would free per rack, never more than it asked for."""
    usable = {r: draw(st.integers(-3, 18)) for r in RACKS}
    freed_in: dict[JobId, dict[RackId, int]] = {}
    demand: dict[JobId, int] = {}
    for v in JOBS[: draw(st.integers(1, 8))]:
        per = draw(st.dictionaries(st.sampled_from(RACKS), st.integers(1, 8), max_size=3))
        if per:
            freed_in[v] = per
        demand[v] = sum(per.values()) + draw(st.integers(0, 2))  # a degraded job frees less
    cost = {v: draw(st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0])) for v in demand}
    return {"usable": usable, "freed_in": freed_in, "demand": demand, "cost": cost}


def _bound(c: dict[str, Any], chosen: list[JobId], targets: set[RackId]) -> RoomBound:
    base = SimpleNamespace(usable=c["usable"])
    room_total = sum(u for u in c["usable"].values() if u > 0)
    totals = {v: sum(per.values()) for v, per in c["freed_in"].items()}
    return RoomBound(base, room_total, c["freed_in"], totals, c["demand"], chosen, targets)


@settings(max_examples=300, deadline=None)
@given(_cluster(), st.data())
def test_the_room_bound_agrees_with_room_for_for_any_victims_and_targets(
    c: dict[str, Any], data: st.DataObject
) -> None:
    ids = list(c["demand"])
    chosen = data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=3))
    targets = data.draw(st.sets(st.sampled_from(RACKS), max_size=3))
    rack = data.draw(st.sampled_from(RACKS))
    rest = [v for v in ids if v not in chosen]
    victims = data.draw(st.lists(st.sampled_from(rest), unique=True, max_size=4)) if rest else []
    bound = _bound(c, chosen, targets)
    base = SimpleNamespace(usable=c["usable"])
    room_total = sum(u for u in c["usable"].values() if u > 0)
    jobs = [_victim(v, c["demand"][v]) for v in (*chosen, *victims)]
    want = room_for(jobs, targets | {rack}, base, room_total, c["freed_in"])
    assert bound.admits(rack, victims) == want
    assert all(bound.victim(rack, v) <= 0 for v in victims)


def _eager_search(
    seeds: list[Option], ranked: list[JobId], cost: dict[JobId, float], bound: RoomBound, tries: int
) -> list[tuple[str, Option]]:
    """The search as first written: every seed on the heap from the start, every option summed
    and bounded from scratch; what it yields and what it skips, in order."""
    extras = list(ranked)
    counter = itertools.count()
    heap = []

    def push(seed: Option, extra: tuple[JobId, ...], last: int) -> None:
        c = seed.cost + sum(cost[v] for v in extra)
        key = (round(c, 9), len(seed.victims) + len(extra), 0, RACKS.index(seed.rack))
        heapq.heappush(heap, ((*key, next(counter)), seed, extra, last))

    for seed in seeds:
        push(seed, (), -1)
    out: list[tuple[str, Option]] = []
    seen: set[tuple[RackId, frozenset[JobId]]] = set()
    left, skips = tries, 50 * tries
    while heap and left > 0:
        _, seed, extra, last = heapq.heappop(heap)
        nxt = last + 1
        while nxt < len(extras) and extras[nxt] in seed.victims:
            nxt += 1
        if nxt < len(extras):
            if len(extra) < MAX_EXTRAS:
                push(seed, (*extra, extras[nxt]), nxt)
            if extra:
                push(seed, (*extra[:-1], extras[nxt]), nxt)
        victims = seed.victims + extra
        if (seed.rack, frozenset(victims)) in seen:
            continue
        seen.add((seed.rack, frozenset(victims)))
        option = Option(seed.cost + sum(cost[v] for v in extra), seed.rack, victims)
        if victims and not bound.admits(seed.rack, victims):
            out.append(("skipped", option))
            skips -= 1
            if skips <= 0:
                break
            continue
        out.append(("yielded", option))
        left -= 1
    return out


@settings(max_examples=300, deadline=None)
@given(_cluster(), st.integers(1, 12), st.integers(1, 20), st.data())
def test_the_lazy_search_visits_options_in_the_order_of_the_eager_one(
    c: dict[str, Any], size: int, tries: int, data: st.DataObject
) -> None:
    in_rack: dict[RackId, dict[JobId, int]] = {}
    for v, per in c["freed_in"].items():
        for r, k in per.items():
            in_rack.setdefault(r, {})[v] = k
    cost = c["cost"]
    usable = {r: max(0, u) for r, u in c["usable"].items()}
    # A later slice: victims chosen and racks targeted for the earlier ones.
    chosen = data.draw(st.lists(st.sampled_from(list(cost)), unique=True, max_size=2))
    targets = data.draw(st.sets(st.sampled_from(RACKS), max_size=2)) if chosen else set()
    offer = RackVictims(in_rack, cost)
    seeds = Seeds(usable, RACKS, size, offer, set(chosen))
    eager = options(usable, RACKS, size, in_rack, cost, set(chosen))
    assert seeds.all() == eager
    index = SimpleNamespace(rack_order={r: i for i, r in enumerate(RACKS)}, hops=None)
    bound = _bound(c, chosen, targets)
    search = Search(seeds, Ranked(cost, chosen), chosen, cost, index, None, Budget(tries), bound)
    got: list[tuple[str, Option]] = []
    failed = search.failed

    def record(o: Option, counted: bool = True) -> None:
        got.append(("skipped", o))
        failed(o, counted=counted)

    search.failed = record  # type: ignore[method-assign]
    for option in search:
        got.append(("yielded", option))
    extras = [v for v in sorted(cost, key=lambda v: (cost[v], v)) if v not in chosen]
    assert got == _eager_search(eager, extras, cost, bound, tries)
    # The alternatives: the lazy pick of the costlier seeds is the eager sort's head.
    if eager:
        picked = data.draw(st.sampled_from(eager))
        want = data.draw(st.integers(1, 4))
        assert search.costlier(picked, want) == _eager_costlier(search, eager, picked, want)


def _eager_costlier(search: Search, eager: list[Option], picked: Option, want: int) -> list[Option]:
    """`Search.costlier` as first written: every seed ranked, then filtered."""
    rank = {r: i for i, r in enumerate(RACKS)}
    ranked = sorted(
        enumerate(eager),
        key=lambda p: (round(p[1].cost, 9), len(p[1].victims), 0, rank[p[1].rack], p[0]),
    )
    out = [
        o
        for _, o in ranked
        if (o.rack, o.victims) != (picked.rack, picked.victims)
        and o.cost >= picked.cost
        and (o.cost, o.rack, o.victims) not in search._rejected_keys
    ]
    return out[:want]


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(JOBS), st.sampled_from([0.0, 0.5, 1.0, 7.0])),
    st.sets(st.sampled_from(JOBS)),
)
def test_ranked_victims_read_in_cost_then_id_order_without_the_skipped(
    cost: dict[JobId, float], skip: set[JobId]
) -> None:
    ranked = Ranked(cost, skip)
    want = [v for v in sorted(cost, key=lambda v: (cost[v], v)) if v not in skip]
    assert [ranked.get(i) for i in range(len(want) + 2)] == [*want, None, None]
    assert ranked.get(0) == (want[0] if want else None)  # reading again reads the same
