"""The stories the product is built on, end to end through the engine and the policies."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from rackplane.engine import Engine
from rackplane.importers import load_cluster_file
from rackplane.models import (
    CompleteJob,
    ConfigurePolicy,
    DefragPlanned,
    Health,
    JobBlocked,
    JobKind,
    JobPlaced,
    JobPreempted,
    NodeSwapped,
    PlaceJob,
    PolicySettings,
    RackHealth,
    RegisterTopology,
    ReportDisruptionBudget,
    ReportNodeHealth,
    ReportRackHealth,
    SliceAssignment,
    SliceDegraded,
    SliceMigrated,
    StartJob,
    SubmitJob,
)
from rackplane.policies import preset
from rackplane.policies.tas import schedule
from tests.builders import CLUSTER, T0, Harness, cmd, job, node, nodes, rack, topology
from tests.invariants import check_invariants

EXAMPLE = Path(__file__).parents[2] / "examples" / "gb200-128.yaml"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def engine_for(name: str, *racks, **settings) -> tuple[Engine, Clock]:  # type: ignore[no-untyped-def]
    clock = Clock()
    policies, chosen = preset(name, PolicySettings(**settings))
    engine = Engine(CLUSTER, clock=clock, policies=policies)
    engine.handle(cmd(RegisterTopology, topology=topology(*racks), settings=chosen))
    return engine, clock


def run(engine: Engine, clock: Clock, *commands, every=timedelta(minutes=1)):  # type: ignore[no-untyped-def]
    events = []
    for c in commands:
        events.extend(engine.handle(c))
        check_invariants(engine.state, events)
        clock.now += every
    return events


def started(engine: Engine, clock: Clock, job_id: str) -> None:
    run(engine, clock, cmd(StartJob, job=job_id))


# (a) Fragmentation. Two racks, 18 nodes, 2 spares each; a managed job of 8 on each:
#
#     r01  [A A A A A A A A . . . . . . . . s s]     A: job "a" (8), checkpointed 5 min ago
#     r02  [B B B B B B B B . . . . . . . . s s]     B: job "b" (8), checkpointed 25 min ago
#
# A 16-node hero run arrives: 16 nodes are free in total, but no rack has 16.


def fragmented(name: str, kind: JobKind = JobKind.MANAGED) -> tuple[Engine, Clock]:
    """Jobs ended at different times and left a and b, one per rack (placed by hand)."""
    policies, settings = preset(name, PolicySettings())
    h = Harness().given(
        cmd(RegisterTopology, topology=topology(rack("r01"), rack("r02")), settings=settings)
    )
    for j, r in (("a", "r01"), ("b", "r02")):
        spec = job(j, 8, slice_size=8, kind=kind, checkpoint_interval=timedelta(minutes=30))
        h.given(
            cmd(SubmitJob, job=spec),
            cmd(PlaceJob, job=j, slices=(SliceAssignment(nodes=nodes(r, 1, 8)),)),
        )
    # b starts 20 minutes before a: at the hero's arrival b has 25 min at risk, a only 5.
    h.given(cmd(StartJob, job="b"))
    h.tick(timedelta(minutes=20))
    h.given(cmd(StartJob, job="a"))
    clock = Clock()
    clock.now = h.now + timedelta(minutes=4)
    return Engine(CLUSTER, clock=clock, policies=policies, state=h.state), clock


def test_fragmentation_naive_splits_the_hero_run_across_two_racks() -> None:
    engine, clock = fragmented("naive")
    events = run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    (placed,) = [e for e in events if isinstance(e, JobPlaced)]
    assert placed.slices[0].racks == ("r01", "r02")


def test_fragmentation_tas_blocks_the_hero_run_for_topology_with_the_numbers() -> None:
    engine, clock = fragmented("tas+spares")
    events = run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    (blocked,) = [e for e in events if isinstance(e, JobBlocked)]
    assert (blocked.reason, blocked.allocatable_nodes, blocked.placeable_slices) == (
        "topology",
        16,
        0,
    )
    assert "each inside one rack" in blocked.explanation


def test_fragmentation_defrag_moves_the_cheaper_job_and_the_hero_runs_in_one_rack() -> None:
    engine, clock = fragmented("tas+spares+defrag")
    rack_of_a = "r01"
    events = run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    (plan,) = [e for e in events if isinstance(e, DefragPlanned)]
    assert plan.victims == ("a",)  # 5 min at risk beats 25
    assert plan.target_racks == (rack_of_a,)
    assert plan.alternatives and plan.alternatives[0].victims == ("b",)
    assert plan.cost_gpu_hours < plan.alternatives[0].cost_gpu_hours
    (preempted,) = [e for e in events if isinstance(e, JobPreempted)]
    assert preempted.cause == "defrag"
    hero = engine.state.jobs["hero"]
    assert hero.slices[0].racks == (rack_of_a,)
    a = engine.state.jobs["a"]
    assert a.status.value == "placed" and a.slices[0].racks != (rack_of_a,)
    assert len(engine.state.reservations) == 0  # released once the hero is placed


def test_a_defrag_plan_says_the_gpu_hours_its_victims_lose_and_ranks_by_a_separate_score() -> None:
    engine, clock = fragmented("tas+spares+defrag")
    events = run(engine, clock, cmd(SubmitJob, job=job("hero", 16, priority=5)))
    (plan,) = [e for e in events if isinstance(e, DefragPlanned)]
    preempted = [e for e in events if isinstance(e, JobPreempted)]
    assert [e.job for e in preempted] == list(plan.victims) == ["a"]
    # What the victim loses: the same figure its JobPreempted says (both at the plan's time).
    assert plan.cost_gpu_hours == pytest.approx(sum(e.lost_gpu_hours for e in preempted))
    assert plan.cost_gpu_hours > 1.0  # 8 nodes x 4 GPUs, 5 min since start, plus a restart
    # The ranking weighs a priority-0 victim for a priority-5 job by 2^-5.
    assert plan.score == pytest.approx(plan.cost_gpu_hours / 32)
    (alt,) = [a for a in plan.alternatives if a.victims == ("b",)]
    assert alt.cost_gpu_hours > plan.cost_gpu_hours and alt.score == pytest.approx(
        alt.cost_gpu_hours / 32
    )
    assert f"{plan.cost_gpu_hours:.2f} GPU-h lost, score {plan.score:.2f}" in plan.explanation


def test_defrag_passes_over_a_job_whose_disruption_budget_refuses() -> None:
    engine, clock = fragmented("tas+spares+defrag")
    run(engine, clock, cmd(ReportDisruptionBudget, job="a", allows=False, budget="pdb ns/a"))
    assert engine.state.jobs["a"].protected_by == "pdb ns/a"
    events = run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    (plan,) = [e for e in events if isinstance(e, DefragPlanned)]
    assert plan.victims == ("b",)  # the cheaper victim is protected: the dearer one goes
    assert all(alt.victims != ("a",) for alt in plan.alternatives)
    assert engine.state.jobs["a"].slices[0].racks == ("r01",)  # a was not touched
    assert engine.state.jobs["hero"].slices[0].racks == ("r02",)


def test_a_job_blocked_behind_protected_jobs_gets_its_defrag_once_a_budget_allows() -> None:
    engine, clock = fragmented("tas+spares+defrag")
    for j in ("a", "b"):
        run(engine, clock, cmd(ReportDisruptionBudget, job=j, allows=False, budget=f"pdb {j}"))
    events = run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    assert not [e for e in events if isinstance(e, DefragPlanned | JobPreempted)]
    assert engine.state.jobs["hero"].blocked is not None
    events = run(engine, clock, cmd(ReportDisruptionBudget, job="b", allows=True))
    (plan,) = [e for e in events if isinstance(e, DefragPlanned)]
    assert plan.victims == ("b",)
    assert engine.state.jobs["hero"].slices[0].racks == ("r02",)


def test_defrag_plans_for_the_first_job_in_queue_order_when_room_may_have_come_back() -> None:
    # Both jobs are blocked for topology while budgets protect a and b; when b's budget
    # allows, the retry plans for the head of the line: hero2 (higher priority), not hero,
    # which came first.
    engine, clock = fragmented("tas+spares+defrag")
    for j in ("a", "b"):
        run(engine, clock, cmd(ReportDisruptionBudget, job=j, allows=False, budget=f"pdb {j}"))
    run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    run(engine, clock, cmd(SubmitJob, job=job("hero2", 16, priority=1)))
    jobs = engine.state.jobs
    assert [jobs[j].blocked.reason for j in ("hero", "hero2")] == ["topology", "topology"]  # type: ignore[union-attr]
    events = run(engine, clock, cmd(ReportDisruptionBudget, job="b", allows=True))
    (plan,) = [e for e in events if isinstance(e, DefragPlanned)]
    assert (plan.job, plan.victims) == ("hero2", ("b",))
    assert engine.state.jobs["hero"].status.value == "queued"


# (b) A 128-node job on the 128-rack example: 8 slices of 16 on 8 racks of one pod, 2 spares
# each. One failure in each of those racks is absorbed by a swap; a third failure in one rack
# (its spares gone) moves only that slice.


def hero_on_example(**settings) -> tuple[Engine, Clock]:  # type: ignore[no-untyped-def]
    topo = load_cluster_file(EXAMPLE).topology
    clock = Clock()
    floor = settings.pop("floor", None)
    policies, chosen = preset("tas+spares+defrag+ntp", PolicySettings(**settings))
    engine = Engine(topo.cluster, clock=clock, policies=policies)
    engine.handle(
        RegisterTopology(id="reg", cluster=topo.cluster, actor="op", topology=topo, settings=chosen)
    )
    engine.handle(
        SubmitJob(
            id="s1",
            cluster=topo.cluster,
            actor="op",
            job=job(
                "llm", 128, checkpoint_interval=timedelta(minutes=30), min_nodes_per_slice=floor
            ),
        )
    )
    engine.handle(StartJob(id="s2", cluster=topo.cluster, actor="runtime", job="llm"))
    return engine, clock


def fail(engine: Engine, node: str, n: int) -> list:  # type: ignore[type-arg]
    return engine.handle(
        ReportNodeHealth(
            id=f"f{n}",
            cluster=engine.state.cluster,
            actor="gpu_manager",
            node=node,
            health=Health.FAILED,
            cause="XID 79",
        )
    )


def test_a_128_node_job_takes_8_slices_of_16_on_8_racks_of_one_pod() -> None:
    engine, _ = hero_on_example()
    llm = engine.state.jobs["llm"]
    racks = [s.racks for s in llm.slices]
    assert len(racks) == 8 and all(len(r) == 1 for r in racks)
    assert len({r[0] for r in racks}) == 8
    pods = {engine.state.index.pod_of(r[0]) for r in racks}  # type: ignore[union-attr]
    assert len(pods) == 1
    assert all(engine.state.spares_left(r[0]) == 2 for r in racks)


def test_one_failure_per_rack_is_swapped_and_the_job_never_stops() -> None:
    engine, _ = hero_on_example()
    before = {s.index: s.racks for s in engine.state.jobs["llm"].slices}
    swaps = []
    for i, s in enumerate(engine.state.jobs["llm"].slices):
        events = fail(engine, s.nodes[3], i)
        swaps += [e for e in events if isinstance(e, NodeSwapped)]
        assert not [e for e in events if isinstance(e, SliceMigrated | JobPreempted)]
    assert len(swaps) == 8
    llm = engine.state.jobs["llm"]
    assert llm.status.value == "running" and llm.swaps == 8
    assert {s.index: s.racks for s in llm.slices} == before
    check_invariants(engine.state)


def test_a_third_failure_in_a_rack_moves_only_that_slice() -> None:
    engine, _ = hero_on_example()
    s0 = engine.state.jobs["llm"].slices[0]
    others = {s.index: s.nodes for s in engine.state.jobs["llm"].slices[1:]}
    fail(engine, s0.nodes[0], 1)
    fail(engine, engine.state.jobs["llm"].slices[0].nodes[1], 2)
    assert engine.state.spares_left(s0.racks[0]) == 0
    events = fail(engine, engine.state.jobs["llm"].slices[0].nodes[2], 3)
    (moved,) = [e for e in events if isinstance(e, SliceMigrated)]
    assert moved.slice == 0 and moved.to_rack != s0.racks[0]
    assert moved.lost_gpu_hours > 0
    llm = engine.state.jobs["llm"]
    assert {s.index: s.nodes for s in llm.slices[1:]} == others
    assert llm.status.value == "running"
    # The job fills all 8 racks of pod01, so the nearest room is one pod away: best fit, then
    # topology order, gives the first rack of pod02.
    assert moved.to_rack == "r009"
    check_invariants(engine.state)


def test_a_third_failure_degrades_the_slice_when_the_job_allows_it() -> None:
    engine, _ = hero_on_example(floor=14)
    s0 = engine.state.jobs["llm"].slices[0]
    fail(engine, s0.nodes[0], 1)
    fail(engine, engine.state.jobs["llm"].slices[0].nodes[1], 2)
    events = fail(engine, engine.state.jobs["llm"].slices[0].nodes[2], 3)
    (degraded,) = [e for e in events if isinstance(e, SliceDegraded)]
    assert (degraded.gpus_before, degraded.gpus_after, degraded.power_boost) == (64, 60, True)
    assert engine.state.jobs["llm"].slices[0].racks == s0.racks


def test_repaired_and_freed_nodes_refill_the_spare_pool() -> None:
    engine, _ = hero_on_example()
    s0 = engine.state.jobs["llm"].slices[0]
    rack_id = s0.racks[0]
    fail(engine, s0.nodes[0], 1)
    assert engine.state.spares_left(rack_id) == 1
    from rackplane.models import RepairNode

    engine.handle(RepairNode(id="r1", cluster=engine.state.cluster, actor="op", node=s0.nodes[0]))
    assert engine.state.spares_left(rack_id) == 2


# (c) Interactive work is never preempted without the operator's flag; inference never.


def protected(kind: JobKind) -> tuple[Engine, Clock]:
    return fragmented("tas+spares+defrag", kind)


def test_interactive_jobs_are_not_preempted_without_the_operators_flag() -> None:
    engine, clock = protected(JobKind.INTERACTIVE)
    events = run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    assert not [e for e in events if isinstance(e, DefragPlanned | JobPreempted)]
    assert engine.state.jobs["hero"].blocked.reason == "topology"  # type: ignore[union-attr]


def test_with_the_operators_flag_an_interactive_job_is_preempted_and_who_and_why_are_kept() -> None:
    engine, clock = protected(JobKind.INTERACTIVE)
    run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    allow = engine.state.settings.model_copy(update={"allow_interactive_preemption": True})
    why = "hero run due friday"
    events = run(engine, clock, cmd(ConfigurePolicy, settings=allow, actor="alice", reason=why))
    (preempted,) = [e for e in events if isinstance(e, JobPreempted)]
    assert preempted.interactive_allowed_by == "alice"
    assert preempted.interactive_allowed_reason == why
    assert engine.state.jobs["hero"].status.value == "placed"


def test_inference_jobs_are_never_preempted_even_with_the_flag() -> None:
    engine, clock = protected(JobKind.INFERENCE)
    allow = engine.state.settings.model_copy(update={"allow_interactive_preemption": True})
    run(engine, clock, cmd(ConfigurePolicy, settings=allow, actor="alice", reason="hero run"))
    events = run(engine, clock, cmd(SubmitJob, job=job("hero", 16)))
    assert not [e for e in events if isinstance(e, DefragPlanned | JobPreempted)]
    assert engine.state.jobs["hero"].status.value == "queued"


# Borrowed spares are given back the moment a swap needs them.
#
#     r01  [L L L L S S]    L: long job (4), S: short job borrowing the 2 spares


def test_a_swap_evicts_short_work_that_borrowed_the_spares() -> None:
    engine, clock = engine_for("tas+spares", rack("r01", 6), spares_per_rack=2, borrow_spares=True)
    run(engine, clock, cmd(SubmitJob, job=job("long", 4, slice_size=4)))
    short = job("short", 2, slice_size=2, expected_duration=timedelta(minutes=20))
    events = run(engine, clock, cmd(SubmitJob, job=short))
    assert [e.borrowing for e in events if isinstance(e, JobPlaced)] == [True]
    events = run(
        engine,
        clock,
        cmd(ReportNodeHealth, node=node("r01", 2), health=Health.FAILED, cause="XID 79"),
    )
    (evicted,) = [e for e in events if isinstance(e, JobPreempted)]
    assert (evicted.job, evicted.cause) == ("short", "eviction")
    (swap,) = [e for e in events if isinstance(e, NodeSwapped)]
    assert swap.new_node in evicted.released
    assert engine.state.jobs["short"].front  # queued again ahead of its peers
    assert engine.state.jobs["long"].status.value == "placed"


# Short work waiting for the spares borrows them when they come back, though a job of its size
# ahead of it met the cycle's verdict first and it is blocked for that same reason already.
#
#     r01  [L L L L B B]    L: long jobs, B: b0 and b1 borrowing the 2 spares of a rack
#     r02  [L L L L B B]    n (2, no expected duration) holds r03, the rack closest to fit it;
#     r03  [L L L . . .]    b (2, 20 min) borrows r02's spares once b1 ends


def test_short_work_blocked_behind_its_size_borrows_the_spares_when_they_free() -> None:
    engine, clock = engine_for(
        "tas+spares", rack("r01", 6), rack("r02", 6), rack("r03", 6),
        spares_per_rack=2, borrow_spares=True,
    )  # fmt: skip

    def same_walks(_: object) -> None:
        # A cycle that passes over the jobs it would offer for nothing proposes what the
        # cycle that offers every job proposes, after every event.
        assert schedule(engine.state) == schedule(engine.state, pass_over=False)

    engine.sinks.append(same_walks)
    short = timedelta(minutes=20)
    for name, size in (("l1", 4), ("l2", 4), ("l3", 3)):
        run(engine, clock, cmd(SubmitJob, job=job(name, size, slice_size=size)))
    for name in ("b0", "b1"):
        run(engine, clock, cmd(SubmitJob, job=job(name, 2, slice_size=2, expected_duration=short)))
        started(engine, clock, name)
    assert [engine.state.jobs[b].slices[0].racks for b in ("b0", "b1")] == [("r01",), ("r02",)]
    run(engine, clock, cmd(SubmitJob, job=job("n", 2, slice_size=2)))
    run(engine, clock, cmd(SubmitJob, job=job("b", 2, slice_size=2, expected_duration=short)))
    jobs = engine.state.jobs
    assert jobs["n"].blocked is not None and jobs["b"].blocked is not None
    assert jobs["b"].blocked.reason == jobs["n"].blocked.reason
    events = run(engine, clock, cmd(CompleteJob, job="b1"))
    placed = [(e.job, e.borrowing, e.slices[0].racks) for e in events if isinstance(e, JobPlaced)]
    assert placed == [("b", True, ("r02",))]
    assert engine.state.jobs["n"].status.value == "queued"


# A rack-level fault (NVSwitch tray) takes the whole NVLink domain: its slices move.
#
#     r01  [A A A A . .]  <- NVSwitch fault          r02  [. . . . . .]


def test_a_rack_fault_evacuates_every_slice_in_the_rack() -> None:
    engine, clock = engine_for("tas+spares", rack("r01", 6), rack("r02", 6), spares_per_rack=1)
    run(engine, clock, cmd(SubmitJob, job=job("a", 4, slice_size=4)))
    assert engine.state.jobs["a"].slices[0].racks == ("r01",)
    events = run(
        engine,
        clock,
        cmd(ReportRackHealth, rack="r01", health=RackHealth.FAILED, cause="NVSwitch tray 3 down"),
    )
    (moved,) = [e for e in events if isinstance(e, SliceMigrated)]
    assert (moved.from_racks, moved.to_rack) == (("r01",), "r02")
    assert engine.state.jobs["a"].slices[0].racks == ("r02",)
