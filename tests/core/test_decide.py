"""Given/when/then tables for the controller's decider.

Racks used below (6 nodes each, one IB pod, 1 spare per rack unless a case says otherwise):

    r01  [n01 n02 n03 n04 n05 n06]
    r02  [n01 n02 n03 n04 n05 n06]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pytest

from rackplane.models import (
    BlockJob,
    CancelJob,
    Command,
    CommandIgnored,
    CommandPosition,
    CommandRejected,
    CompleteJob,
    ConfigurePolicy,
    CordonNode,
    DegradeSlice,
    FailJob,
    Health,
    JobKind,
    MigrateSlice,
    PlaceJob,
    PolicySettings,
    PreemptJobs,
    RackHealth,
    RegisterTopology,
    RepairNode,
    ReportDisruptionBudget,
    ReportJobRuntime,
    ReportNodeHealth,
    ReportRackHealth,
    SliceAssignment,
    StartJob,
    SubmitJob,
    SwapNode,
    UncordonNode,
)
from rackplane.policies import decide, refuse_oversized
from rackplane.projections import SeenCommands, fold, initial_state
from tests.builders import CLUSTER, Harness, cmd, job, node, nodes, rack, register, topology

R01, R02 = rack("r01", 6), rack("r02", 6)


def two_racks(**settings: Any) -> Command:
    settings.setdefault("spares_per_rack", 1)
    return register(R01, R02, **settings)


def submit(job_id: str, n: int, **fields: Any) -> Command:
    fields.setdefault("slice_size", 4)
    return cmd(SubmitJob, job=job(job_id, n, **fields))


def place(job_id: str, *slices: tuple[str, ...]) -> Command:
    return cmd(PlaceJob, job=job_id, slices=tuple(SliceAssignment(nodes=s) for s in slices))


def fail(n: str) -> Command:
    return cmd(ReportNodeHealth, node=n, health=Health.FAILED, cause="XID 79")


@dataclass
class Case:
    id: str
    given: list[Callable[[], Command]]
    when: Callable[[], Command]
    want: list[str] = field(default_factory=list)
    want_code: str | None = None


def c(
    id: str,
    given: list[Callable[[], Command]],
    when: Callable[[], Command],
    *want: str,
    code: str | None = None,
) -> Any:
    """A case; with neither `want` nor `code` the command has nothing to do (CommandIgnored)."""
    if not want and code is None:
        want = ("CommandIgnored",)
    return pytest.param(Case(id, given, when, list(want), code), id=id)


def r01_is(health: RackHealth) -> Callable[[], Command]:
    return lambda: cmd(ReportRackHealth, rack="r01", health=health)


DEGRADED, FAILED = RackHealth.DEGRADED, RackHealth.FAILED
A4 = nodes("r01", 1, 4)  # r01 n01-n04
B4 = nodes("r02", 1, 4)  # r02 n01-n04

CASES = [
    # -- topology and settings
    c("a command before any topology is refused", [], lambda: submit("j1", 4), code="no_topology"),
    c("registering the same topology twice changes nothing", [two_racks], two_racks),
    c(
        "a topology of another cluster is refused",
        [],
        lambda: cmd(RegisterTopology, topology=topology(R01, cluster="other")),
        code="wrong_cluster",
    ),
    c(
        "new policy settings are recorded",
        [two_racks],
        lambda: cmd(ConfigurePolicy, settings=PolicySettings(spares_per_rack=0)),
        "PolicyConfigured",
    ),
    # -- submission
    c("a job joins the queue", [two_racks], lambda: submit("j1", 8), "JobSubmitted"),
    c(
        "a duplicate job id is refused",
        [two_racks, lambda: submit("j1", 4)],
        lambda: submit("j1", 4),
        code="duplicate_job",
    ),
    c(
        "a slice larger than every rack is refused",
        [two_racks],
        lambda: submit("j1", 8, slice_size=8),
        code="too_large",
    ),
    c(
        "a slice that fits a rack only with its spares is refused",
        [two_racks],  # 6 nodes a rack, 1 a spare
        lambda: submit("j1", 6, slice_size=6),
        code="too_large",
    ),
    c(
        "a slice that fits a rack only with its spares is taken from a job that may borrow",
        [lambda: two_racks(borrow_spares=True)],
        lambda: submit("j1", 6, slice_size=6, expected_duration=timedelta(minutes=30)),
        "JobSubmitted",
    ),
    c(
        "a job larger than the room outside the spares is refused",
        [two_racks],
        lambda: submit("j1", 11, slice_size=4),
        code="too_large",
    ),
    c(
        "a job larger than the cluster is refused",
        [two_racks],
        lambda: submit("j1", 16),
        code="too_large",
    ),
    c(
        "a minimum slice above the cluster's slice size is refused",
        [lambda: two_racks(slice_size=4)],
        lambda: cmd(SubmitJob, job=job("j1", 4, min_nodes_per_slice=5)),
        code="shape_mismatch",
    ),
    # -- placement
    c(
        "a job is placed on free nodes, one slice per rack",
        [two_racks, lambda: submit("j1", 8)],
        lambda: place("j1", A4, B4),
        "JobPlaced",
    ),
    c(
        "placing on a failed node is refused",
        [two_racks, lambda: submit("j1", 4), lambda: fail(node("r01", 1))],
        lambda: place("j1", A4),
        code="node_unavailable",
    ),
    c(
        "placing on a cordoned node is refused",
        [two_racks, lambda: submit("j1", 4), lambda: cmd(CordonNode, node=node("r01", 2))],
        lambda: place("j1", A4),
        code="node_unavailable",
    ),
    c(
        "placing on a degraded node is refused",
        [
            two_racks,
            lambda: submit("j1", 4),
            lambda: cmd(ReportNodeHealth, node=node("r01", 2), health=Health.DEGRADED),
        ],
        lambda: place("j1", A4),
        code="node_unavailable",
    ),
    c(
        "placing on an allocated node is refused",
        [two_racks, lambda: submit("j0", 4), lambda: place("j0", A4), lambda: submit("j1", 4)],
        lambda: place("j1", nodes("r01", 3, 6)),
        code="node_unavailable",
    ),
    c(
        "placing on an unknown node is refused",
        [two_racks, lambda: submit("j1", 4)],
        lambda: place("j1", ("r01-n01", "r01-n02", "r01-n03", "ghost")),
        code="unknown_node",
    ),
    c(
        "a node proposed twice is refused",
        [two_racks, lambda: submit("j1", 4)],
        lambda: place("j1", (*nodes("r01", 1, 3), node("r01", 1))),
        code="shape_mismatch",
    ),
    c(
        "a slice across two racks is refused",
        [two_racks, lambda: submit("j1", 4)],
        lambda: place("j1", (*nodes("r01", 1, 2), *nodes("r02", 1, 2))),
        code="slice_spans_racks",
    ),
    c(
        "the naive baseline may place a slice across racks",
        [lambda: two_racks(rack_local_slices=False), lambda: submit("j1", 4)],
        lambda: place("j1", (*nodes("r01", 1, 2), *nodes("r02", 1, 2))),
        "JobPlaced",
    ),
    c(
        "placement never eats a rack's spares",
        [  # submitted before the cluster kept spares
            lambda: two_racks(spares_per_rack=0),
            lambda: submit("j1", 6, slice_size=6),
            lambda: cmd(ConfigurePolicy, settings=PolicySettings(spares_per_rack=1)),
        ],
        lambda: place("j1", nodes("r01", 1, 6)),
        code="spare_reserve",
    ),
    c(
        "a slice of the wrong size is refused",
        [two_racks, lambda: submit("j1", 4)],
        lambda: place("j1", nodes("r01", 1, 3)),
        code="shape_mismatch",
    ),
    c(
        "a placed job is not placed again",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: place("j1", B4),
        code="invalid_state",
    ),
    c(
        "placing onto a failed rack is refused",
        [
            two_racks,
            lambda: submit("j1", 4),
            lambda: cmd(ReportRackHealth, rack="r01", health=RackHealth.FAILED, cause="NVSwitch"),
        ],
        lambda: place("j1", A4),
        code="node_unavailable",
    ),
    c(
        "a blocked job is recorded with its numbers",
        [two_racks, lambda: submit("j1", 8)],
        lambda: cmd(BlockJob, job="j1", reason="capacity", allocatable_nodes=4, placeable_slices=1),
        "JobBlocked",
    ),
    c(
        "the same block twice is recorded once",
        [
            two_racks,
            lambda: submit("j1", 8),
            lambda: cmd(
                BlockJob, job="j1", reason="capacity", allocatable_nodes=4, placeable_slices=1
            ),
        ],
        lambda: cmd(BlockJob, job="j1", reason="capacity", allocatable_nodes=4, placeable_slices=1),
    ),
    # -- nodes
    c(
        "cordoning a cordoned node changes nothing",
        [two_racks, lambda: cmd(CordonNode, node=node("r01", 1))],
        lambda: cmd(CordonNode, node=node("r01", 1)),
    ),
    c(
        "uncordoning a node that is not cordoned changes nothing",
        [two_racks],
        lambda: cmd(UncordonNode, node=node("r01", 1)),
    ),
    c(
        "cordoning an unknown node is refused",
        [two_racks],
        lambda: cmd(CordonNode, node="ghost"),
        code="unknown_node",
    ),
    c(
        "a failure report marks the node failed",
        [two_racks],
        lambda: fail(node("r01", 1)),
        "NodeFailed",
    ),
    c(
        "a repeated failure report changes nothing",
        [two_racks, lambda: fail(node("r01", 1))],
        lambda: fail(node("r01", 1)),
    ),
    c(
        "a healthy report cannot bring back a failed node: repair is explicit",
        [two_racks, lambda: fail(node("r01", 1))],
        lambda: cmd(ReportNodeHealth, node=node("r01", 1), health=Health.HEALTHY),
        code="invalid_state",
    ),
    c(
        "a degraded node that reports healthy recovers",
        [two_racks, lambda: cmd(ReportNodeHealth, node=node("r01", 1), health=Health.DEGRADED)],
        lambda: cmd(ReportNodeHealth, node=node("r01", 1), health=Health.HEALTHY),
        "NodeRecovered",
    ),
    c(
        "a failed node is repaired",
        [two_racks, lambda: fail(node("r01", 1))],
        lambda: cmd(RepairNode, node=node("r01", 1), note="tray reseated"),
        "NodeRepaired",
    ),
    c(
        "repairing a healthy node is refused",
        [two_racks],
        lambda: cmd(RepairNode, node=node("r01", 1)),
        code="invalid_state",
    ),
    c(
        "a rack fault is recorded",
        [two_racks],
        lambda: cmd(ReportRackHealth, rack="r01", health=RackHealth.FAILED),
        "RackFailed",
    ),
    c("a lost NVSwitch tray degrades the rack", [two_racks], r01_is(DEGRADED), "RackDegraded"),
    c(
        "a degraded rack losing its fabric fails",
        [two_racks, r01_is(DEGRADED)],
        r01_is(FAILED),
        "RackFailed",
    ),
    c(
        "a failed rack with part of its fabric back is degraded",
        [two_racks, r01_is(FAILED)],
        r01_is(DEGRADED),
        "RackDegraded",
    ),
    c(
        "a degraded rack whose tray is replaced recovers",
        [two_racks, r01_is(DEGRADED)],
        r01_is(RackHealth.HEALTHY),
        "RackRecovered",
    ),
    c(
        "a new slice may go to a degraded rack (placement prefers healthy ones)",
        [two_racks, r01_is(DEGRADED), lambda: submit("j1", 4)],
        lambda: place("j1", A4),
        "JobPlaced",
    ),
    c(
        "a fault on an unknown rack is refused",
        [two_racks],
        lambda: cmd(ReportRackHealth, rack="r09", health=RackHealth.FAILED),
        code="unknown_rack",
    ),
    # -- swaps, migrations, degradation
    c(
        "a failed node is swapped for a free node of the same rack, spares included",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4), lambda: fail(node("r01", 2))],
        lambda: cmd(SwapNode, job="j1", slice=0, old_node=node("r01", 2), new_node=node("r01", 6)),
        "NodeSwapped",
    ),
    c(
        "a swap into another rack is refused",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(SwapNode, job="j1", slice=0, old_node=node("r01", 2), new_node=node("r02", 6)),
        code="slice_spans_racks",
    ),
    c(
        "a swap of a node outside the slice is refused",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(SwapNode, job="j1", slice=0, old_node=node("r01", 5), new_node=node("r01", 6)),
        code="invalid_state",
    ),
    c(
        "a slice migrates to free nodes of another rack",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(MigrateSlice, job="j1", slice=0, nodes=B4),
        "SliceMigrated",
    ),
    c(
        "a migration that would eat the target's spares is refused",
        [
            two_racks,
            lambda: submit("j0", 2, slice_size=2),
            lambda: place("j0", nodes("r02", 5, 6)),
            lambda: submit("j1", 4),
            lambda: place("j1", A4),
        ],
        lambda: cmd(MigrateSlice, job="j1", slice=0, nodes=B4),
        code="spare_reserve",
    ),
    c(
        "a slice degrades when its job allows it",
        [two_racks, lambda: submit("j1", 4, min_nodes_per_slice=3), lambda: place("j1", A4)],
        lambda: cmd(DegradeSlice, job="j1", slice=0, remove=(node("r01", 1),)),
        "SliceDegraded",
    ),
    c(
        "a job without a minimum slice does not degrade",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(DegradeSlice, job="j1", slice=0, remove=(node("r01", 1),)),
        code="not_degradable",
    ),
    c(
        "a slice does not degrade below its minimum",
        [two_racks, lambda: submit("j1", 4, min_nodes_per_slice=3), lambda: place("j1", A4)],
        lambda: cmd(DegradeSlice, job="j1", slice=0, remove=nodes("r01", 1, 2)),
        code="not_degradable",
    ),
    c(
        "degradation is refused when NTP is off for the cluster",
        [
            lambda: two_racks(ntp_allowed=False),
            lambda: submit("j1", 4, min_nodes_per_slice=3),
            lambda: place("j1", A4),
        ],
        lambda: cmd(DegradeSlice, job="j1", slice=0, remove=(node("r01", 1),)),
        code="not_degradable",
    ),
    # -- preemption
    c(
        "a managed job is preempted",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(PreemptJobs, jobs=("j1",), reason="defrag"),
        "JobPreempted",
    ),
    c(
        "an inference job is never preempted",
        [two_racks, lambda: submit("j1", 4, kind=JobKind.INFERENCE), lambda: place("j1", A4)],
        lambda: cmd(PreemptJobs, jobs=("j1",), allow_interactive=True),
        code="not_preemptible",
    ),
    c(
        "an interactive job is not preempted without the operator's consent",
        [two_racks, lambda: submit("j1", 4, kind=JobKind.INTERACTIVE), lambda: place("j1", A4)],
        lambda: cmd(PreemptJobs, jobs=("j1",)),
        code="not_preemptible",
    ),
    c(
        "an interactive job is preempted with the operator's consent",
        [two_racks, lambda: submit("j1", 4, kind=JobKind.INTERACTIVE), lambda: place("j1", A4)],
        lambda: cmd(PreemptJobs, jobs=("j1",), allow_interactive=True, reason="hero run"),
        "JobPreempted",
    ),
    c(
        "preempting an interactive job by hand without saying why is refused",
        [two_racks, lambda: submit("j1", 4, kind=JobKind.INTERACTIVE), lambda: place("j1", A4)],
        lambda: cmd(PreemptJobs, jobs=("j1",), allow_interactive=True),
        code="reason_required",
    ),
    c(
        "preempting a queued job is refused",
        [two_racks, lambda: submit("j1", 4)],
        lambda: cmd(PreemptJobs, jobs=("j1",)),
        code="invalid_state",
    ),
    # -- job lifecycle
    c(
        "a placed job starts",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(StartJob, job="j1"),
        "JobStarted",
    ),
    c(
        "a queued job does not start",
        [two_racks, lambda: submit("j1", 4)],
        lambda: cmd(StartJob, job="j1"),
        code="invalid_state",
    ),
    c(
        "a running job completes",
        [
            two_racks,
            lambda: submit("j1", 4),
            lambda: place("j1", A4),
            lambda: cmd(StartJob, job="j1"),
        ],
        lambda: cmd(CompleteJob, job="j1"),
        "JobCompleted",
    ),
    c(
        "a queued job cannot complete",
        [two_racks, lambda: submit("j1", 4)],
        lambda: cmd(CompleteJob, job="j1"),
        code="invalid_state",
    ),
    c(
        "a job fails by itself",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(FailJob, job="j1", reason="NaN loss"),
        "JobFailed",
    ),
    c(
        "a queued job is cancelled",
        [two_racks, lambda: submit("j1", 4)],
        lambda: cmd(CancelJob, job="j1"),
        "JobCancelled",
    ),
    c(
        "cancelling a cancelled job changes nothing",
        [two_racks, lambda: submit("j1", 4), lambda: cmd(CancelJob, job="j1")],
        lambda: cmd(CancelJob, job="j1"),
    ),
    c(
        "cancelling a completed job is refused",
        [
            two_racks,
            lambda: submit("j1", 4),
            lambda: place("j1", A4),
            lambda: cmd(CompleteJob, job="j1"),
        ],
        lambda: cmd(CancelJob, job="j1"),
        code="invalid_state",
    ),
    c(
        "cancelling an unknown job is refused",
        [two_racks],
        lambda: cmd(CancelJob, job="nope"),
        code="unknown_job",
    ),
    # -- what the runtime did
    c(
        "a runtime's report of a restart on the job's nodes is on record",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(ReportJobRuntime, job="j1", action="restarted", nodes=A4, detail="x"),
        "JobRuntimeReported",
    ),
    c(
        "a runtime's report of a requeue needs no nodes",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(ReportJobRuntime, job="j1", action="requeued"),
        "JobRuntimeReported",
    ),
    c(
        "a runtime cannot run a job on nodes it does not hold",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(ReportJobRuntime, job="j1", action="restarted", nodes=B4),
        code="invalid_state",
    ),
    # -- disruption budgets
    c(
        "a budget that refuses protects the job",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(ReportDisruptionBudget, job="j1", allows=False, budget="pdb ns/j1"),
        "DisruptionBudgetReported",
    ),
    c(
        "a budget that allows an unprotected job changes nothing",
        [two_racks, lambda: submit("j1", 4), lambda: place("j1", A4)],
        lambda: cmd(ReportDisruptionBudget, job="j1", allows=True),
    ),
    c(
        "a budget that allows again lifts the protection",
        [
            two_racks,
            lambda: submit("j1", 4),
            lambda: place("j1", A4),
            lambda: cmd(ReportDisruptionBudget, job="j1", allows=False, budget="pdb"),
        ],
        lambda: cmd(ReportDisruptionBudget, job="j1", allows=True),
        "DisruptionBudgetReported",
    ),
    c(
        "a protected job is not preempted by hand",
        [
            two_racks,
            lambda: submit("j1", 4),
            lambda: place("j1", A4),
            lambda: cmd(ReportDisruptionBudget, job="j1", allows=False, budget="pdb"),
        ],
        lambda: cmd(PreemptJobs, jobs=("j1",), reason="make room"),
        code="not_preemptible",
    ),
    c(
        "a protected job is still requeued when a failure leaves its slice short",
        [
            two_racks,
            lambda: submit("j1", 4),
            lambda: place("j1", A4),
            lambda: cmd(ReportDisruptionBudget, job="j1", allows=False, budget="pdb"),
            lambda: cmd(ReportNodeHealth, node=A4[0], health=Health.FAILED, cause="xid 79"),
        ],
        lambda: cmd(PreemptJobs, jobs=("j1",), cause="failure", reason="no spare"),
        "JobPreempted",
    ),
    c(
        "a budget report on a finished job is refused",
        [
            two_racks,
            lambda: submit("j1", 4),
            lambda: place("j1", A4),
            lambda: cmd(CompleteJob, job="j1"),
        ],
        lambda: cmd(ReportDisruptionBudget, job="j1", allows=False),
        code="invalid_state",
    ),
    c(
        "a runtime's report on an unknown job is refused",
        [two_racks],
        lambda: cmd(ReportJobRuntime, job="nope", action="requeued"),
        code="unknown_job",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_decide(case: Case) -> None:
    h = Harness().given(*(make() for make in case.given))
    before = h.state
    events = h.when(case.when())
    if case.want_code is not None:
        assert [type(e).__name__ for e in events] == ["CommandRejected"]
        rejected = events[0]
        assert isinstance(rejected, CommandRejected)
        assert rejected.code == case.want_code, rejected.reason
    else:
        assert [type(e).__name__ for e in events] == case.want
    if isinstance(events[0], CommandRejected | CommandIgnored):
        # The outcome is on record and nothing else changed.
        assert (h.state.nodes, h.state.jobs, h.state.racks, h.state.settings) == (
            before.nodes,
            before.jobs,
            before.racks,
            before.settings,
        )


def test_a_redelivered_command_is_a_no_op() -> None:
    h = Harness().given(two_racks())
    submit_j1 = submit("j1", 4)
    assert len(h.when(submit_j1)) == 1
    assert h.when(submit_j1) == []


def test_events_are_numbered_without_gaps_and_name_their_cause() -> None:
    h = Harness()
    h.given(two_racks(), submit("j1", 4), submit("j2", 4))
    preempt = cmd(PreemptJobs, jobs=("j1", "j2"))
    h.given(place("j1", A4), place("j2", B4))
    events = h.when(preempt)
    assert [e.seq for e in h.log] == list(range(1, len(h.log) + 1))
    assert [e.causation_id for e in events] == [preempt.id, preempt.id]
    assert events[0].id == f"{CLUSTER}/{events[0].seq}"


def test_a_submitted_job_takes_the_clusters_slice_size_when_it_names_none() -> None:
    h = Harness().given(two_racks(slice_size=3))
    (event,) = h.when(cmd(SubmitJob, job=job("j1", 7)))
    assert event.job.slice_size == 3  # type: ignore[union-attr]
    assert h.state.jobs["j1"].spec.slice_sizes == (3, 3, 1)


def test_placing_a_job_allocates_its_nodes_and_takes_them_from_the_free_index() -> None:
    h = Harness().given(two_racks(), submit("j1", 8), place("j1", A4, B4))
    job_state = h.state.jobs["j1"]
    assert [s.racks for s in job_state.slices] == [("r01",), ("r02",)]
    assert {h.state.nodes[n].job for n in A4 + B4} == {"j1"}
    assert h.state.racks["r01"].free == frozenset(nodes("r01", 5, 6))


def test_a_swap_moves_the_slice_to_the_spare_and_leaves_the_failed_node_out() -> None:
    h = Harness().given(two_racks(), submit("j1", 4), place("j1", A4), fail(node("r01", 2)))
    (swap,) = h.when(
        cmd(SwapNode, job="j1", slice=0, old_node=node("r01", 2), new_node=node("r01", 6))
    )
    assert swap.spares_left == 1  # type: ignore[union-attr]
    s0 = h.state.jobs["j1"].slices[0]
    assert s0.nodes == (node("r01", 1), node("r01", 6), node("r01", 3), node("r01", 4))
    failed = h.state.nodes[node("r01", 2)]
    assert (failed.job, failed.health) == (None, Health.FAILED)
    assert node("r01", 2) not in h.state.racks["r01"].free


def test_a_migration_counts_the_gpu_hours_lost_since_the_last_checkpoint() -> None:
    h = Harness().given(
        two_racks(restart_overhead=timedelta(minutes=6)),
        submit("j1", 4, checkpoint_interval=timedelta(minutes=30)),
        place("j1", A4),
        cmd(StartJob, job="j1"),
    )
    h.tick(timedelta(minutes=44))  # 45 minutes after start: 15 since the checkpoint at 30
    (moved,) = h.when(cmd(MigrateSlice, job="j1", slice=0, nodes=B4))
    # 16 GPUs x (15 min at risk + 6 min restart) = 16 x 0.35 h
    assert moved.lost_gpu_hours == pytest.approx(16 * 0.35)  # type: ignore[union-attr]
    assert h.state.racks["r01"].free == frozenset(nodes("r01", 1, 6))


def test_a_preempted_job_is_queued_again_with_its_place_in_line() -> None:
    h = Harness().given(two_racks(), submit("j1", 4), place("j1", A4), submit("j2", 4))
    h.when(cmd(PreemptJobs, jobs=("j1",), reason="defrag"))
    assert [j.id for j in h.state.queued()] == ["j1", "j2"]
    assert h.state.jobs["j1"].preemptions == 1
    assert h.state.racks["r01"].free == frozenset(nodes("r01", 1, 6))


def test_preempting_an_interactive_job_records_who_allowed_it_and_why() -> None:
    h = Harness().given(two_racks(), submit("j1", 4, kind=JobKind.INTERACTIVE), place("j1", A4))
    (event,) = h.when(
        cmd(PreemptJobs, jobs=("j1",), allow_interactive=True, actor="alice", reason="hero run")
    )
    assert event.interactive_allowed_by == "alice"  # type: ignore[union-attr]
    assert event.interactive_allowed_reason == "hero run"  # type: ignore[union-attr]


def test_a_rack_fault_names_the_jobs_in_the_rack_and_takes_its_nodes_out_of_service() -> None:
    h = Harness().given(two_racks(), submit("j1", 4), place("j1", A4))
    (event,) = h.when(cmd(ReportRackHealth, rack="r01", health=RackHealth.FAILED))
    assert event.jobs == ("j1",)  # type: ignore[union-attr]
    assert h.state.racks["r01"].available == frozenset()
    assert h.state.spares_left("r01") == 0


def test_a_failure_report_on_an_allocated_node_names_its_job_and_slice() -> None:
    h = Harness().given(two_racks(), submit("j1", 8), place("j1", A4, B4))
    (event,) = h.when(fail(node("r02", 3)))
    assert (event.job, event.slice, event.rack) == ("j1", 1, "r02")  # type: ignore[union-attr]


def test_the_topology_may_grow_but_may_not_move_allocated_nodes() -> None:
    h = Harness().given(two_racks(), submit("j1", 4), place("j1", A4))
    grown = h.when(register(R01, R02, rack("r03", 6), spares_per_rack=1))
    assert [type(e).__name__ for e in grown] == ["TopologyRegistered"]
    assert h.state.jobs["j1"].nodes == A4
    assert len(h.state.racks) == 3
    shrunk = h.when(register(R02, spares_per_rack=1))
    assert isinstance(shrunk[0], CommandRejected)
    assert shrunk[0].code == "topology_conflict"


def test_a_command_for_another_cluster_is_a_routing_bug() -> None:
    with pytest.raises(ValueError, match="sent to"):
        decide(initial_state(CLUSTER), cmd(CancelJob, job="j", cluster="c2"), now=Harness().now)


def test_event_times_never_run_backwards() -> None:
    h = Harness().given(two_racks())
    events = decide(h.state, submit("j1", 4), now=h.now - timedelta(hours=1))
    assert events[0].at == h.state.at


# -- where a command was read: dedupe that does not expire ---------------------------------


def test_a_command_read_at_or_below_the_last_decided_offset_is_not_decided_again() -> None:
    h = Harness().given(two_racks())
    first = cmd(CordonNode, node=node("r01", 1), reason="bad fan")
    events = h.when(first, CommandPosition(1, 40))
    assert [(e.command_partition, e.command_offset) for e in events] == [(1, 40)]
    assert dict(h.state.applied) == {1: 40}
    # Its id has long left the window (a redelivery after 400,001 newer commands):
    forgot = replace(h.state, seen=SeenCommands())
    again = cmd(UncordonNode, node=node("r01", 1))  # a new id, but read at an old offset
    assert decide(forgot, again, now=h.now, position=CommandPosition(1, 39)) == []
    assert decide(forgot, first, now=h.now, position=CommandPosition(1, 40)) == []
    # Another partition, or a later offset, is new.
    assert decide(forgot, again, now=h.now, position=CommandPosition(0, 3)) != []
    assert decide(forgot, again, now=h.now, position=CommandPosition(1, 41)) != []


def test_the_last_decided_offsets_are_rebuilt_from_the_log() -> None:
    h = Harness().given(two_racks())
    h.when(cmd(CordonNode, node=node("r01", 1)), CommandPosition(0, 7))
    h.when(cmd(CordonNode, node=node("r01", 2)), CommandPosition(1, 3))
    h.when(cmd(CordonNode, node=node("r01", 3)), CommandPosition(0, 9))
    h.when(cmd(CordonNode, node=node("r01", 4)))  # from no topic (the in-process engine)
    assert dict(h.state.applied) == {0: 9, 1: 3}
    assert dict(fold(initial_state(CLUSTER), h.log).applied) == {0: 9, 1: 3}


def test_a_decision_too_large_for_the_log_is_one_rejection_on_record() -> None:
    h = Harness().given(two_racks())
    command = cmd(CancelJob, job="j1", reason="x")
    events = refuse_oversized(
        h.state, command, now=h.now, size=2_000_000, limit=1_048_576,
        position=CommandPosition(0, 5),
    )  # fmt: skip
    assert len(events) == 1
    rejected = events[0]
    assert isinstance(rejected, CommandRejected)
    assert rejected.code == "event_too_large"
    assert "2,000,000 bytes" in rejected.reason
    assert (rejected.seq, rejected.causation_id, rejected.command_offset) == (
        h.state.seq + 1,
        command.id,
        5,
    )


def test_a_health_report_made_before_the_nodes_last_repair_is_ignored() -> None:
    """The race seen in CI: the GPU Manager's failure report, made on a view of the log from
    before the operator's repair, was decided after it and failed the repaired node again."""
    n = node("r01", 1)
    h = Harness().given(two_racks(), fail(n))
    before = h.state.seq
    (repaired,) = h.when(cmd(RepairNode, node=n, note="tray reseated"))
    assert dict(h.state.repairs) == {n: repaired.seq}

    (stale,) = h.when(cmd(ReportNodeHealth, node=n, health=Health.FAILED, seen=before))
    assert isinstance(stale, CommandIgnored)
    assert stale.reason == (
        f"node {n} was repaired at seq {repaired.seq}, after the view this report was made on "
        f"(seq {before}): its evidence predates the repair"
    )
    assert h.state.nodes[n].health is Health.HEALTHY
    # A report made on the repaired node, or one that does not say its view, is decided.
    (degraded,) = h.when(cmd(ReportNodeHealth, node=n, health=Health.DEGRADED, seen=repaired.seq))
    assert degraded.type == "NodeDegraded"
    (failed,) = h.when(cmd(ReportNodeHealth, node=n, health=Health.FAILED))
    assert failed.type == "NodeFailed"
    # The repair seq is a fact of the log: a rebuild and a snapshot keep it.
    assert dict(fold(initial_state(CLUSTER), h.log).repairs) == {n: repaired.seq}
