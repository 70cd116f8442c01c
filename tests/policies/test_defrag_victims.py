"""Step 1 of Auto Defrag (`count_victims`) against its plain definition, node by node.

Clusters as in `test_defrag_quality` (random jobs placed by `tas`, some finished), then some
nodes fail or are cordoned under their jobs and a reservation keeps some nodes: what the
counted victims say must be what the victims' nodes, read one by one, say.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event, given, settings
from hypothesis import strategies as st

from rackplane.models import Health, JobId, JobKind, NodeId, RackId
from rackplane.policies._defrag_victims import Victims, count_victims, eligible, prime
from rackplane.policies.defrag import victim_weight
from rackplane.projections import ClusterState
from rackplane.projections.state import restart_cost
from tests.policies.test_defrag_quality import add_hero, build, workload


def _by_definition(
    state: ClusterState, kept: frozenset[NodeId], beneficiary: JobId = "hero"
) -> tuple[dict[JobId, float], dict[JobId, float], dict[JobId, dict[RackId, int]]]:
    """Costs and freed nodes as first written: every victim's nodes read one by one (for a
    beneficiary of the hero's priority)."""
    priority = state.jobs["hero"].spec.priority
    pool = eligible(state, beneficiary, priority)
    lost = {v.id: restart_cost(state, v, state.at) for v in pool}  # type: ignore[arg-type]
    cost = {v.id: lost[v.id] * victim_weight(v, priority) for v in pool}
    freed_in: dict[JobId, dict[RackId, int]] = {}
    for v in pool:
        mine: dict[RackId, int] = {}
        for n in v.nodes:
            node = state.nodes[n]
            if node.in_service and n not in kept:
                mine[node.rack] = mine.get(node.rack, 0) + 1
        if mine:
            freed_in[v.id] = mine
    return lost, cost, freed_in


@settings(max_examples=150, deadline=None)
@given(
    n_racks=st.integers(2, 5),
    jobs=workload,
    priority=st.integers(0, 3),
    data=st.data(),
)
def test_counted_victims_are_what_their_nodes_say_one_by_one(  # type: ignore[no-untyped-def]
    n_racks, jobs, priority, data
):
    state = add_hero(build(n_racks, 1, jobs, None), 4, priority)
    # Counted once before the changes below: the per-job memo must not carry them over.
    count_victims(state, "hero", priority, state.at, frozenset())  # type: ignore[arg-type]
    if data.draw(st.booleans()):
        state = _one_slice_across_racks(state)
    held = sorted(n for n, node in state.nodes.items() if node.job is not None)
    every = sorted(state.nodes)
    # Some held nodes fail or are cordoned (before any swap), some nodes are kept.
    down = data.draw(st.lists(st.sampled_from(held), unique=True, max_size=6)) if held else []
    if held and data.draw(st.booleans()):
        # Every node of one job: it frees nothing on its racks (its entries must go).
        gone = state.nodes[data.draw(st.sampled_from(held))].job
        down += [n for n in held if state.nodes[n].job == gone and n not in down]
    nodes = state.nodes
    for i, n in enumerate(down):
        change = {"health": Health.FAILED} if i % 2 else {"cordoned": True}
        nodes = nodes.set(n, nodes[n]._replace(**change))
    state = replace(state, nodes=nodes)
    # Some jobs' disruption budgets refuse, some become interactive (not victims while no
    # operator allows it): new job states, which the per-job memo must not mistake for the
    # old ones.
    ids = sorted(state.jobs)
    changed = data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=4))
    jobs = state.jobs
    for i, j in enumerate(changed):
        old = jobs[j]
        if i % 2:
            jobs = jobs.set(j, old._replace(protected_by="pdb"))
        else:
            spec = old.spec.model_copy(update={"kind": JobKind.INTERACTIVE})
            jobs = jobs.set(j, old._replace(spec=spec))
    state = replace(state, jobs=jobs)
    kept = frozenset(data.draw(st.lists(st.sampled_from(every), unique=True, max_size=8)))
    # The beneficiary: the queued hero, or a job that holds nodes (never its own victim),
    # counted after the hero's count on the same state (one pool for both: the hero's again
    # afterwards must still hold that job).
    holders = sorted(j.id for j in state.jobs.values() if j.status.holds_nodes)
    beneficiary = data.draw(st.sampled_from(["hero", *holders]))
    if data.draw(st.booleans()):  # what a worker does to a replica it has just rebuilt
        prime(state, [priority])
    count_victims(state, "hero", priority, state.at, kept)  # type: ignore[arg-type]
    got = count_victims(state, beneficiary, priority, state.at, kept)  # type: ignore[arg-type]
    _same(got, state, kept, beneficiary)
    again = count_victims(state, "hero", priority, state.at, kept)  # type: ignore[arg-type]
    _same(again, state, kept, "hero")
    event("a beneficiary that holds nodes" if beneficiary != "hero" else "a queued beneficiary")
    event("victims free nodes" if got.freed_in else "no victim frees a node")
    event("a slice spans racks" if _spans(state) else "every slice in one rack")


def _same(got: Victims, state: ClusterState, kept: frozenset[NodeId], beneficiary: JobId) -> None:
    """`got` is what the definition says, field by field."""
    lost, cost, freed_in = _by_definition(state, kept, beneficiary)
    assert sorted(got.by_id) == sorted(lost)
    assert got.lost == lost  # exactly: the same operations in the same order
    assert got.cost == cost
    assert got.freed_in == freed_in
    assert got.freed_total == {v: sum(per.values()) for v, per in freed_in.items()}
    in_rack: dict[RackId, dict[JobId, int]] = {}
    for v, per in freed_in.items():
        for r, k in per.items():
            in_rack.setdefault(r, {})[v] = k
    assert got.in_rack == in_rack
    assert got.demand == {v: state.jobs[v].spec.nodes for v in lost}


def _spans(state: ClusterState) -> bool:
    return any(len(s.racks) > 1 for j in state.jobs.values() for s in j.slices)


def _one_slice_across_racks(state: ClusterState) -> ClusterState:
    """Two one-slice jobs on different racks become one job whose slice spans both (what the
    naive baseline places), node states following."""
    one = [j for j in state.jobs.values() if len(j.slices) == 1 and j.status.holds_nodes]
    one.sort(key=lambda j: j.id)
    pair = next(((a, b) for a in one for b in one if a.slices[0].racks < b.slices[0].racks), None)
    if pair is None:
        return state
    a, b = pair
    sa, sb = a.slices[0], b.slices[0]
    merged = sa._replace(
        size=sa.size + sb.size, nodes=sa.nodes + sb.nodes, racks=(*sa.racks, *sb.racks)
    )
    spec = a.spec.model_copy(update={"nodes": a.spec.nodes + b.spec.nodes})
    jobs = state.jobs.set(a.id, a._replace(spec=spec, slices=(merged,))).delete(b.id)
    nodes = state.nodes
    for n in sb.nodes:
        nodes = nodes.set(n, nodes[n]._replace(job=a.id, slice=sa.index))
    return replace(state, jobs=jobs, nodes=nodes)
