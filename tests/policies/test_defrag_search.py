"""The search inside Auto Defrag: victim subsets and the count-only validation."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from rackplane.models import JobId
from rackplane.policies._defrag_seeds import minimal_subsets

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
