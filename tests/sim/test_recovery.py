"""A swap or a degrade costs the job what `rackplane.sim.recovery` says: rollback, stall, pace."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rackplane.sim import (
    FailureModel,
    GeneratedCluster,
    PolicyMetrics,
    RecoveryModel,
    ScenarioDoc,
    ScenarioError,
    ScriptedFailure,
    TraceJob,
    Workload,
    build_scenario,
    load_scenario,
    simulate,
)

NTP = "tas+spares+defrag+ntp"


def run(
    jobs: list[TraceJob],
    *,
    fail_at: float,
    policy: str = "tas+spares",
    racks: int = 2,
    settings: dict[str, Any] | None = None,
    recovery: dict[str, Any] | None = None,
    runtime: dict[str, Any] | None = None,
) -> PolicyMetrics:
    """One day on `racks` racks of 18 where node r0001n03 fails at `fail_at` hours."""
    doc = ScenarioDoc(
        cluster=GeneratedCluster(racks=racks, nodes_per_rack=18),
        days=1,
        policy=settings or {},
        failures=FailureModel(
            enabled=False,
            scripted=(ScriptedFailure(at_hours=fail_at, node="r0001n03", repair_hours=48),),
        ),
        workload=Workload(classes=(), jobs=tuple(jobs), rate_basis="cluster"),
        recovery=RecoveryModel(**(recovery or {})),
        runtime=runtime or {},
    )
    return simulate(build_scenario(doc), policy)


def job(nodes: int, hours: float, *, at: float = 0.0, **fields: Any) -> TraceJob:
    return TraceJob(submit_hours=at, nodes=nodes, duration_hours=hours, **fields)


def lost(m: PolicyMetrics) -> float:
    """Allocated GPU-hours that produced nothing kept."""
    return m.gpu_hours_allocated - m.gpu_hours_useful


# Swaps. A 5-hour job with a 45-minute checkpoint, 16 nodes (64 GPUs) per rack, spares kept:
#
#     r0001  [A A x A A A A A A A A A A A A A s s]     x: r0001n03 fails after an hour;
#     r0002  [A A A A A A A A A A A A A A A A s s]        a spare of r0001 takes its place
#
# The whole job (both slices of the 32-node one) goes back to its checkpoint at 45 minutes and
# stalls while the spare joins: the default stall is the cluster's restart overhead, 10 minutes.


@pytest.mark.parametrize(
    ("nodes", "fail_at", "recovery", "want_gpus", "want_minutes"),
    [
        pytest.param(16, 1.0, {}, 64, 15 + 10, id="one-slice-job:15-min-rollback+10-min-stall"),
        pytest.param(32, 1.0, {}, 128, 15 + 10, id="two-slice-job-rolls-back-together"),
        pytest.param(
            16,
            1.05,
            {"memory_checkpoint_minutes": 5},
            64,
            3 + 10,
            id="in-memory-checkpoint-3-min-before-the-failure",
        ),
        pytest.param(16, 1.0, {"swap_stall_minutes": 30}, 64, 15 + 30, id="a-30-minute-join-stall"),
    ],
)
def test_a_swap_costs_the_whole_job_its_work_since_the_checkpoint_and_the_stall(
    nodes: int, fail_at: float, recovery: dict[str, Any], want_gpus: int, want_minutes: float
) -> None:
    m = run([job(nodes, 5, checkpoint_minutes=45)], fail_at=fail_at, recovery=recovery)
    want_lost = want_gpus * want_minutes / 60
    assert (m.swaps, m.migrations, m.degrades) == (1, 0, 0)
    assert m.gpu_hours_lost_swaps == pytest.approx(want_lost)
    assert m.gpu_hours_lost_degrades == 0.0
    assert lost(m) == pytest.approx(want_lost)
    # It finishes that much later, holding its GPUs all along.
    assert m.gpu_hours_allocated == pytest.approx(want_gpus * (5 + want_minutes / 60))
    assert m.goodput == pytest.approx(1 - want_lost / m.gpu_hours_allocated)
    assert m.jobs_completed == 1


def test_a_swap_before_the_job_started_costs_nothing() -> None:
    # Placed at 0, started 30 minutes later; the swap at 15 minutes meets no running process.
    m = run([job(16, 5, checkpoint_minutes=45)], fail_at=0.25, runtime={"startup_minutes": 30})
    assert m.swaps == 1
    assert m.gpu_hours_lost_swaps == 0.0


def test_an_inference_service_loses_no_progress_to_a_swap_only_the_stall() -> None:
    service = job(16, 5, kind="inference")
    m = run([service], fail_at=1.0 + 7 / 60)
    assert m.gpu_hours_lost_swaps == pytest.approx(64 * 10 / 60)


# Degrades. No spares, and a 2-node job takes the rack's two free nodes, so when r0001n03
# fails the 16-node job (NTP down to 14 nodes) goes on with 15:
#
#     r0001  [A A x A A A A A A A A A A A A A f f]     f: the filler, 2 nodes for 30 h
#
# The failure at 1 h falls on a 30-minute checkpoint: no rollback. The job stalls 10 minutes
# on its 60 GPUs, then does its 9 hours of work left at pace p: 9 / p hours on 60 GPUs, of
# which 60 x (1 - p) x 9 / p GPU-hours are lost.


def degraded_run(**kwargs: Any) -> PolicyMetrics:
    jobs = [
        job(16, 10, checkpoint_minutes=30, min_nodes_per_slice=14),
        job(2, 30, at=0.1),
    ]
    settings = {"spares_per_rack": 0, **kwargs.pop("settings", {})}
    return run(jobs, fail_at=1.0, policy=NTP, settings=settings, **kwargs)


def degrade_loss(pace: float, stall_minutes: float = 10) -> float:
    return 60 * stall_minutes / 60 + 60 * (1 - pace) * 9 / pace


@pytest.mark.parametrize(
    ("settings", "recovery", "want_pace"),
    [
        pytest.param({}, {}, 0.99, id="boosted-15-of-16-keeps-pace-less-the-1%-reshard"),
        pytest.param({"ntp_power_boost": False}, {}, 15 / 16 * 0.99, id="no-boost-15-of-16"),
        pytest.param(
            {}, {"power_boost_speedup": 1.05}, 15 / 16 * 1.05 * 0.99, id="a-weak-boost-helps-part"
        ),
        pytest.param({}, {"reshard_overhead": 0.0}, 1.0, id="boosted-and-no-reshard-cost"),
    ],
)
def test_a_degrade_costs_the_stall_and_the_pace_of_k_of_n_nodes(
    settings: dict[str, Any], recovery: dict[str, Any], want_pace: float
) -> None:
    m = degraded_run(settings=settings, recovery=recovery)
    assert (m.degrades, m.swaps, m.migrations) == (1, 0, 0)
    want_lost = degrade_loss(want_pace)
    assert m.gpu_hours_lost_degrades == pytest.approx(want_lost)
    assert m.gpu_hours_lost_swaps == 0.0
    assert lost(m) == pytest.approx(want_lost)
    # 64 GPUs for the first hour, then 60 for the stall and the 9 hours of work at pace p, and
    # the filler's 8 GPUs from 0.1 h to the end of the day.
    want_allocated = 64 * 1 + 60 * (10 / 60 + 9 / want_pace) + 8 * (24 - 0.1)
    assert m.gpu_hours_allocated == pytest.approx(want_allocated)
    assert m.jobs_completed == 1


def test_without_a_boost_a_degrade_costs_more_than_with_one() -> None:
    boosted = degraded_run()
    stock = degraded_run(settings={"ntp_power_boost": False})
    assert stock.gpu_hours_lost_degrades > 3 * boosted.gpu_hours_lost_degrades
    assert stock.goodput is not None and boosted.goodput is not None
    assert stock.goodput < boosted.goodput < 1.0
    assert stock.cost_usd_lost > boosted.cost_usd_lost


@pytest.mark.parametrize(
    ("model", "slices", "boosted", "want"),
    [
        pytest.param({}, [(16, 16), (16, 16)], True, 1.0, id="healthy-job"),
        pytest.param({}, [(15, 16), (16, 16)], False, 15 / 16 * 0.99, id="15-of-16-no-boost"),
        pytest.param({}, [(15, 16), (16, 16)], True, 0.99, id="15-of-16-boosted"),
        pytest.param({}, [(13, 16)], True, 13 / 16 * 8 / 7 * 0.99, id="13-of-16-boost-falls-short"),
        pytest.param({}, [(15, 16), (14, 16)], False, 14 / 16 * 0.99, id="slowest-replica-sets-it"),
        pytest.param({"power_boost_speedup": 1.0}, [(15, 16)], True, 15 / 16 * 0.99, id="stock"),
        pytest.param({"reshard_overhead": 0.0}, [(15, 16)], False, 15 / 16, id="no-reshard-cost"),
    ],
)
def test_the_pace_of_a_job_with_a_degraded_slice(
    model: dict[str, Any], slices: list[tuple[int, int]], boosted: bool, want: float
) -> None:
    assert RecoveryModel(**model).job_pace(slices, boosted=boosted) == pytest.approx(want)


def test_stalls_default_to_the_cluster_restart_overhead() -> None:
    overhead = timedelta(minutes=7)
    assert RecoveryModel().swap_stall(overhead) == overhead
    assert RecoveryModel().degrade_stall(overhead) == overhead
    model = RecoveryModel(swap_stall_minutes=3, degrade_stall_minutes=0)
    assert (model.swap_stall(overhead), model.degrade_stall(overhead)) == (
        timedelta(minutes=3),
        timedelta(0),
    )


def test_a_scenario_file_sets_the_recovery_model_and_refuses_unknown_keys(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "cluster: {racks: 2}\nrecovery: {swap_stall_minutes: 4, memory_checkpoint_minutes: 2}\n"
    )
    recovery = load_scenario(good).recovery
    assert (recovery.swap_stall_minutes, recovery.memory_checkpoint_seconds) == (4, 120)
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {racks: 2}\nrecovery: {swap_stall: 4}\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: recovery.swap_stall"):
        load_scenario(bad)
