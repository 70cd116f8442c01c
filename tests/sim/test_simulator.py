"""The simulator drives the real controller and policies in virtual time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from rackplane.models import (
    CommandRejected,
    Event,
    JobPlaced,
    NodeSwapped,
    SliceDegraded,
    SliceMigrated,
)
from rackplane.policies import PRESETS, preset
from rackplane.projections import ClusterState, cluster_summary, rack_occupancy
from rackplane.sim import (
    FailureModel,
    GeneratedCluster,
    JobClass,
    NodeRange,
    Scenario,
    ScenarioDoc,
    ScriptedFailure,
    TraceJob,
    Workload,
    build_scenario,
    simulate,
)
from tests.invariants import check_invariants


def scenario(
    racks: int = 2,
    nodes: int = 18,
    *,
    jobs: Sequence[TraceJob] = (),
    classes: Sequence[JobClass] = (),
    failures: FailureModel | None = None,
    days: float = 1.0,
    seed: int = 1,
) -> Scenario:
    """A small generated cluster with a given workload; random failures off unless given."""
    return build_scenario(
        ScenarioDoc(
            cluster=GeneratedCluster(racks=racks, nodes_per_rack=nodes),
            days=days,
            seed=seed,
            failures=failures or FailureModel(enabled=False),
            workload=Workload(classes=tuple(classes), jobs=tuple(jobs), rate_basis="cluster"),
        )
    )


def trace(nodes: int, hours: float = 10.0, at: float = 0.0, **fields: Any) -> TraceJob:
    return TraceJob(submit_hours=at, nodes=nodes, duration_hours=hours, **fields)


class Recorder:
    """An observer keeping every event, and checking the state after every command."""

    def __init__(self, check: bool = False) -> None:
        self.events: list[Event] = []
        self.check = check

    def __call__(self, state: ClusterState, events: Sequence[Event]) -> None:
        self.events.extend(events)
        if self.check:
            check_conservation(state)
            check_invariants(state, events)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


def check_conservation(state: ClusterState) -> None:
    """allocated + free + spare + failed + unavailable = total, per rack and cluster-wide."""
    s = cluster_summary(state)
    assert s.allocated + s.free + s.spare + s.failed + s.unavailable == s.nodes
    for r in rack_occupancy(state):
        assert r.allocated + r.free + r.spare + r.failed + r.unavailable == r.nodes, r.rack


# A busy little cluster: four racks, jobs of every kind, nodes failing every ~3 weeks, rack
# faults, for three days.
BUSY = scenario(
    racks=4,
    days=3,
    classes=(
        JobClass(
            name="hero",
            nodes=[32, 48],
            arrivals_per_day=1,
            duration_hours=20,
            priority=10,
            min_nodes_per_slice=14,
        ),
        JobClass(name="mid", nodes=16, arrivals_per_day=3, duration_hours=8, priority=5),
        JobClass(
            name="small", nodes=NodeRange(min=1, max=8), arrivals_per_day=20, duration_hours=4
        ),
        JobClass(
            name="interactive",
            kind="interactive",
            nodes=[1, 2],
            arrivals_per_day=4,
            duration_hours=6,
            checkpoint_minutes=None,
            priority=20,
        ),
        JobClass(
            name="inference",
            kind="inference",
            nodes=4,
            arrivals_per_day=1,
            duration_hours=48,
            checkpoint_minutes=None,
            priority=30,
        ),
    ),
    failures=FailureModel(node_mtbi_days=20, rack_mtbi_days=40),
)


@pytest.mark.parametrize("policy", PRESETS)
def test_nodes_are_conserved_and_invariants_hold_after_every_command(policy: str) -> None:
    seen = Recorder(check=True)
    metrics = simulate(BUSY, policy, observer=seen)
    assert metrics.node_failures > 0 and metrics.jobs_completed > 0
    assert metrics.runtime_rejections == 0


def test_the_same_seed_gives_the_same_result() -> None:
    a = simulate(BUSY, "tas+spares+defrag+ntp")
    b = simulate(BUSY, "tas+spares+defrag+ntp")
    c = simulate(BUSY, "tas+spares+defrag+ntp", seed=2)
    assert a == b
    assert a != c


def test_every_policy_meets_the_same_jobs_and_failures_on_one_seed() -> None:
    results = [simulate(BUSY, p) for p in ("naive", "tas+spares")]
    assert len({m.jobs_submitted for m in results}) == 1
    assert len({m.node_failures for m in results}) == 1


@pytest.mark.parametrize("policy", ["tas", "tas+spares", "tas+spares+defrag+ntp"])
def test_under_a_topology_aware_policy_every_placed_slice_is_rack_local(policy: str) -> None:
    seen = Recorder()
    metrics = simulate(BUSY, policy, observer=seen)
    placed = seen.of(JobPlaced)
    assert placed
    assert all(s.rack_local for e in placed for s in e.slices)
    assert all(e.to_rack is not None for e in seen.of(SliceMigrated))
    assert metrics.slices_rack_local_fraction == 1.0
    assert metrics.jobs_rack_local_fraction == 1.0
    assert metrics.iteration_penalty_max == 0.0


# Two jobs of 12 on two racks of 18. `naive` takes nodes first fit in node order:
#
#     r0001  [a a a a a a a a a a a a b b b b b b]     a: 12 nodes, one slice, rack-local
#     r0002  [b b b b b b . . . . . . . . . . . .]     b: 12 nodes, one slice over two racks
#
# `tas` puts each in its own rack.

FRAGMENTED = scenario(jobs=(trace(12), trace(12)))


def test_under_naive_on_a_fragmented_cluster_some_slices_span_racks() -> None:
    seen = Recorder()
    metrics = simulate(FRAGMENTED, "naive", observer=seen)
    spans = [s.racks for e in seen.of(JobPlaced) for s in e.slices]
    assert spans == [("r0001",), ("r0001", "r0002")]
    assert metrics.slices_rack_local_fraction == 0.5
    assert metrics.jobs_rack_local_fraction == 0.5
    assert metrics.iteration_penalty_max > 0
    assert metrics.gpu_hours_lost_cross_rack > 0


def test_the_same_jobs_under_tas_each_get_their_own_rack() -> None:
    seen = Recorder()
    metrics = simulate(FRAGMENTED, "tas", observer=seen)
    assert sorted(s.racks for e in seen.of(JobPlaced) for s in e.slices) == [
        ("r0001",),
        ("r0002",),
    ]
    assert metrics.gpu_hours_lost_cross_rack == 0.0


# Swaps. preset("tas") keeps no spares (spares_per_rack = 0) but runs spare_swap, which swaps
# a failed node for any free healthy node of the same rack. A 16-node job in a rack of 18:
#
#     r0001  [A A A A A A A A A A A A A A A A . .]     the two free nodes are not reserved
#     r0002  [. . . . . . . . . . . . . . . . . .]
#
# Node r0001n03 fails after an hour. With a 2-node job filling the free nodes first, `tas` has
# nothing to swap in and moves the slice; `tas+spares` keeps the two nodes as spares (the
# filler goes to r0002) and swaps.


def test_preset_tas_keeps_no_spares_and_tas_spares_keeps_the_base_two() -> None:
    _, tas = preset("tas")
    _, spares = preset("tas+spares")
    assert (tas.spares_per_rack, spares.spares_per_rack) == (0, 2)


FAIL_N03 = FailureModel(
    enabled=False, scripted=(ScriptedFailure(at_hours=1, node="r0001n03", repair_hours=12),)
)


@pytest.mark.parametrize(
    ("policy", "filler", "want_swaps", "want_migrations"),
    [
        pytest.param("tas", False, 1, 0, id="tas-swaps-onto-a-free-non-spare-node"),
        pytest.param("tas", True, 0, 1, id="tas-with-the-free-nodes-taken-moves-the-slice"),
        pytest.param("tas+spares", True, 1, 0, id="tas+spares-swaps-onto-a-kept-spare"),
    ],
)
def test_swaps_happen_only_onto_a_free_node_of_the_same_rack(
    policy: str, filler: bool, want_swaps: int, want_migrations: int
) -> None:
    jobs = (trace(16, at=0), *([trace(2, at=0.1)] if filler else []))
    seen = Recorder(check=True)
    before: dict[str, frozenset[str]] = {}

    def observe(state: ClusterState, events: Sequence[Event]) -> None:
        for e in events:
            if isinstance(e, NodeSwapped):
                assert e.new_node in before[e.rack], "a swap must take a free node"
        before.update({r: rs.free for r, rs in state.racks.items()})
        seen(state, events)

    sim = scenario(jobs=jobs, failures=FAIL_N03)
    metrics = simulate(sim, policy, observer=observe)
    swaps = seen.of(NodeSwapped)
    assert (len(swaps), metrics.migrations) == (want_swaps, want_migrations)
    for e in swaps:
        assert (e.old_node, e.rack) == ("r0001n03", "r0001")
    if policy == "tas":
        assert all(e.spares_left >= 0 for e in swaps)


def test_a_third_failure_in_a_rack_degrades_the_slice_under_ntp() -> None:
    # Two spares absorb two failures; the third drops the node (NTP) instead of moving.
    failures = FailureModel(
        enabled=False,
        scripted=tuple(
            ScriptedFailure(at_hours=1 + i, node=f"r0001n0{i + 1}", repair_hours=48)
            for i in range(3)
        ),
    )
    jobs = (trace(16, hours=24, checkpoint_minutes=30, min_nodes_per_slice=14),)
    seen = Recorder(check=True)
    metrics = simulate(
        scenario(jobs=jobs, failures=failures), "tas+spares+defrag+ntp", observer=seen
    )
    assert (metrics.swaps, metrics.degrades, metrics.migrations) == (2, 1, 0)
    (degraded,) = seen.of(SliceDegraded)
    assert (degraded.nodes_before, degraded.nodes_after) == (16, 15)


def test_a_migration_restarts_from_the_last_checkpoint_and_costs_gpu_hours() -> None:
    jobs = (trace(16, hours=5, checkpoint_minutes=45), trace(2, at=0.1))
    metrics = simulate(scenario(jobs=jobs, failures=FAIL_N03), "tas")
    # The failure at 1 h: 15 minutes since the 45-minute checkpoint, plus the 10-minute
    # restart overhead, on 64 GPUs.
    assert metrics.gpu_hours_lost_migrations == pytest.approx(64 * 25 / 60)
    assert metrics.goodput is not None and metrics.goodput < 1.0
    assert metrics.jobs_completed == 2


def test_a_job_alone_on_a_healthy_cluster_is_all_goodput_and_finishes_on_time() -> None:
    metrics = simulate(scenario(jobs=(trace(16, hours=6),)), "tas+spares")
    assert metrics.jobs_completed == 1
    assert metrics.gpu_hours_allocated == pytest.approx(64 * 6)
    assert metrics.goodput == pytest.approx(1.0)
    assert metrics.gpu_utilisation == pytest.approx(64 * 6 / (2 * 18 * 4 * 24))


def test_runtime_commands_are_never_rejected() -> None:
    seen = Recorder()
    simulate(BUSY, "tas+spares+defrag+ntp", observer=seen)
    ours = [e for e in seen.of(CommandRejected) if e.actor.startswith("sim:")]
    assert ours == []


def test_a_warm_up_is_simulated_but_not_measured() -> None:
    doc = ScenarioDoc(
        cluster=GeneratedCluster(racks=2),
        days=1,
        failures=FailureModel(enabled=False),
        workload=Workload(classes=(), jobs=(trace(16, hours=30),), rate_basis="cluster"),
        runtime={"warmup_days": 0.5},
    )
    metrics = simulate(build_scenario(doc), "tas")
    assert metrics.jobs_submitted == 0  # it arrived during the warm-up
    assert metrics.gpu_hours_allocated == pytest.approx(64 * 18)  # measured from 12 h to 30 h
