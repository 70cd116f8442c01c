"""Auto Defrag against exhaustive search on small random clusters.

Each instance: up to 6 racks of 18 nodes in 2 pods, up to 12 jobs placed by `tas` and then
some of them finished (fragmentation), and a blocked job of one slice. The exhaustive search
tries every subset of preemptible jobs (cheapest first) and every rack for the blocked job,
validating with the same rules as the plan (every victim re-placed at once outside the target
rack); the first valid subset is the optimum. It is held to the search's documented bound:
at most `MAX_EXTRAS` victims from outside the target rack (a plan that preempts more jobs
elsewhere to make room for their re-placement is out of scope: hypothesis found one that moved
six jobs for a six-node job, which the planner rightly does not look for).
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from hypothesis import assume, event, example, given, settings
from hypothesis import strategies as st

from rackplane.engine import Engine
from rackplane.models import (
    CommandRejected,
    CompleteJob,
    JobKind,
    PolicySettings,
    RegisterTopology,
    StartJob,
    SubmitJob,
)
from rackplane.policies import Capacity, Placement, find_placement, plan_defrag, preset
from rackplane.policies._defrag_search import MAX_EXTRAS
from rackplane.policies.defrag import candidates, proposals, replace_victims, victim_cost
from rackplane.projections import ClusterState
from tests.builders import CLUSTER, T0, cmd, job, rack, topology
from tests.invariants import check_invariants

M = JobKind.MANAGED


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


workload = st.lists(
    st.tuples(
        st.integers(2, 14),  # nodes
        st.sampled_from([1, 2, 4, 8, 12]),  # slice size
        st.sampled_from([JobKind.MANAGED] * 4 + [JobKind.INTERACTIVE, JobKind.INFERENCE]),
        st.integers(0, 2),  # priority
        st.integers(5, 240),  # minutes since start
        st.sampled_from([10, 30, 60, None]),  # checkpoint interval, minutes
        st.sampled_from([True, False, False]),  # finishes before the hero arrives
    ),
    min_size=4,
    max_size=12,
)


def build(n_racks: int, spares: int, jobs: list, hero: tuple[int, int] | None) -> ClusterState:  # type: ignore[type-arg]
    racks = [rack(f"r{i:02d}", 18, pod=f"p{i % 2}") for i in range(n_racks)]
    clock = Clock()
    policies, chosen = preset("tas+spares", PolicySettings(spares_per_rack=spares))
    engine = Engine(CLUSTER, clock=clock, policies=policies)
    engine.handle(cmd(RegisterTopology, topology=topology(*racks), settings=chosen))
    for i, (n, s, kind, prio, _, ckpt, _) in enumerate(jobs):
        spec = job(
            f"j{i}",
            n,
            slice_size=s,
            kind=kind,
            priority=prio,
            checkpoint_interval=timedelta(minutes=ckpt) if ckpt else None,
        )
        engine.handle(cmd(SubmitJob, job=spec))
    # Start the placed jobs at their own times, then finish some: free nodes scatter.
    horizon = T0 + timedelta(hours=5)
    for i, (*_, age, _, _) in enumerate(jobs):
        j = engine.state.jobs.get(f"j{i}")
        if j is not None and j.status.value == "placed":
            clock.now = horizon - timedelta(minutes=age)
            engine.handle(cmd(StartJob, job=f"j{i}"))
    clock.now = horizon
    for i, (*_, ends) in enumerate(jobs):
        if ends and f"j{i}" in engine.state.jobs and engine.state.jobs[f"j{i}"].status.holds_nodes:
            engine.handle(cmd(CompleteJob, job=f"j{i}"))
    # From here on nothing places automatically: the hero stays queued for the planner.
    engine.policies = ()
    if hero is not None:
        size, prio = hero
        engine.handle(cmd(SubmitJob, job=job("hero", size, slice_size=size, priority=prio)))
    return engine.state


def add_hero(state: ClusterState, size: int, priority: int) -> ClusterState:
    engine = Engine(CLUSTER, clock=lambda: state.at, state=state)  # type: ignore[arg-type, return-value]
    engine.handle(cmd(SubmitJob, job=job("hero", size, slice_size=size, priority=priority)))
    return engine.state


def exhaustive(state: ClusterState, now: datetime) -> float | None:
    hero = state.jobs["hero"]
    size = hero.spec.nodes
    pool = candidates(state, hero)
    cost = {v.id: victim_cost(state, v, hero.spec.priority, now) for v in pool}
    base = Capacity(state)
    subsets = [combo for k in range(len(pool) + 1) for combo in itertools.combinations(pool, k)]
    subsets.sort(key=lambda c: sum(cost[v.id] for v in c))
    racks = [r.id for r in state.index.racks if state.racks[r.id].healthy]  # type: ignore[union-attr]
    for combo in subsets:
        for r in racks:
            outside = [v for v in combo if all(state.nodes[n].rack != r for n in v.nodes)]
            if len(outside) > MAX_EXTRAS:
                continue
            if replace_victims(state, base, list(combo), [(r, size)], now=now) is not None:
                return sum(cost[v.id] for v in combo)
    return None


@settings(max_examples=250, deadline=None)
@given(
    n_racks=st.integers(2, 5),
    spares=st.integers(0, 2),
    jobs=workload,
    extra=st.integers(0, 6),
    priority=st.integers(1, 3),
)
@example(  # the budget's instance (found in CI, 2026-12-01): 5 racks, 12 jobs, hero of 10
    n_racks=5, spares=1, extra=2, priority=2,
    jobs=[(2, 1, M, 0, 5, 10, True), (2, 1, M, 0, 5, 10, False), (14, 2, M, 0, 5, 10, False),
          (2, 1, M, 0, 5, 10, False), (2, 1, M, 0, 5, 10, True), (10, 1, M, 0, 5, 10, True),
          (10, 2, M, 0, 5, 10, False), (2, 1, M, 0, 5, 10, True), (8, 1, M, 1, 5, 10, False),
          (10, 2, M, 0, 5, 10, False), (10, 4, M, 0, 5, 10, False), (12, 4, M, 2, 5, 10, False)],
)  # fmt: skip
def test_the_plan_costs_within_5_percent_of_the_exhaustive_optimum(  # type: ignore[no-untyped-def]
    n_racks, spares, jobs, extra, priority
):
    state = build(n_racks, spares, jobs, None)
    # The hero is one slice just larger than the largest room: blocked, and rack-shaped.
    room = max(Capacity(state).view().values())
    size = min(room + 1 + extra, 18 - spares)
    assume(size > room)
    state = add_hero(state, size, priority)
    assert not isinstance(find_placement(Capacity(state), (size,)), Placement)
    now = state.at
    assert now is not None
    optimum = exhaustive(state, now)
    plan = plan_defrag(state, "hero", now=now)
    event("no plan exists" if optimum is None else "a plan exists")
    if optimum is None:
        assert plan is None
        return
    if plan is None:
        # The planner's other documented bound: MAX_TRIES validations per plan. Hypothesis
        # found an instance whose plan needs ~130 (the cheaper options all fail). The same
        # search without that bound must then find it, within 5%: the order was right and
        # only the budget stopped it.
        event("the default budget ran out")
        plan = plan_defrag(state, "hero", now=now, max_tries=100_000)
    assert plan is not None, f"exhaustive search found a plan of {optimum:.3f} GPU-h"
    assert plan.cost <= optimum * 1.05 + 1e-9, (plan.cost, optimum)
    _assert_valid(state, plan)


def _assert_valid(state: ClusterState, plan) -> None:  # type: ignore[no-untyped-def]
    """Every command of the plan is accepted by the controller, and the hero runs in a rack."""
    engine = Engine(CLUSTER, clock=lambda: state.at, state=state)  # type: ignore[arg-type, return-value]
    for command in proposals(state, plan):
        events = engine.handle(command)
        assert not [e for e in events if isinstance(e, CommandRejected)], events
        check_invariants(engine.state, events)
    hero = engine.state.jobs["hero"]
    assert hero.status.value == "placed" and all(s.rack_local for s in hero.slices)
    for v in plan.victims:
        assert engine.state.jobs[v].status.value == "placed"
        assert not set(engine.state.jobs[v].slices[0].racks) & set(plan.target_racks)


@settings(max_examples=60, deadline=None)
@given(
    n_racks=st.integers(3, 6),
    spares=st.integers(0, 2),
    jobs=workload,
    slices=st.integers(2, 3),
    size=st.sampled_from([8, 12, 16]),
)
def test_every_plan_for_a_multi_slice_job_is_valid(n_racks, spares, jobs, slices, size):  # type: ignore[no-untyped-def]
    state = build(n_racks, spares, jobs, (size, 3))
    engine = Engine(CLUSTER, clock=lambda: state.at, state=state)  # type: ignore[arg-type, return-value]
    engine.handle(cmd(SubmitJob, job=job("wide", size * slices, slice_size=size, priority=3)))
    plan = plan_defrag(engine.state, "wide", now=engine.state.at)  # type: ignore[arg-type]
    event("planned" if plan is not None else "no plan")
    if plan is not None:
        assert len(plan.placement.slices) == slices
        engine2 = Engine(CLUSTER, clock=lambda: state.at, state=engine.state)  # type: ignore[arg-type, return-value]
        for command in proposals(engine.state, plan):
            events = engine2.handle(command)
            assert not [e for e in events if isinstance(e, CommandRejected)], events
        wide = engine2.state.jobs["wide"]
        assert wide.status.value == "placed" and all(s.rack_local for s in wide.slices)
