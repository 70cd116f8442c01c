"""Admin authorization: who may uncordon, change policy, preempt or defrag by hand, cancel.

Racks below (6 nodes each, 1 spare), admins `operator:alice` unless a case says otherwise:

    r01  [n01 n02 n03 n04 n05 n06]   j1 (owner user:bob, 4 nodes) on n01-n04, n05 cordoned
    r02  [n01 n02 n03 n04 n05 n06]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from rackplane.models import (
    CancelJob,
    Command,
    CommandRejected,
    ConfigurePolicy,
    CordonNode,
    JobKind,
    PlaceJob,
    PlanDefrag,
    PolicySettings,
    PreemptJobs,
    SliceAssignment,
    SubmitJob,
    UncordonNode,
)
from tests.builders import Harness, cmd, job, node, nodes, rack, register

ALICE, BOB, MALLORY = "operator:alice", "user:bob", "operator:mallory"
R01, R02 = rack("r01", 6), rack("r02", 6)


def given(admins: tuple[str, ...] | None = (ALICE,), kind: JobKind = JobKind.MANAGED) -> Harness:
    return Harness().given(
        register(R01, R02, spares_per_rack=1, admins=admins),
        cmd(SubmitJob, job=job("j1", 4, slice_size=4, owner=BOB, kind=kind), actor=BOB),
        cmd(PlaceJob, job="j1", slices=(SliceAssignment(nodes=nodes("r01", 1, 4)),)),
        cmd(CordonNode, node=node("r01", 5), actor=BOB),
    )


def settings(h: Harness, **changes: Any) -> PolicySettings:
    return h.state.settings.model_copy(update=changes)


@dataclass
class Case:
    id: str
    when: Callable[[Harness], Command]
    want: str
    """The event type, or `not_authorized`."""
    admins: tuple[str, ...] | None = (ALICE,)
    kind: JobKind = JobKind.MANAGED


CASES = [
    Case("an admin uncordons", lambda h: cmd(UncordonNode, node=node("r01", 5), actor=ALICE),
         "NodeUncordoned"),
    Case("anyone else may not uncordon",
         lambda h: cmd(UncordonNode, node=node("r01", 5), actor=BOB), "not_authorized"),
    Case("anyone may cordon", lambda h: cmd(CordonNode, node=node("r02", 1), actor=MALLORY),
         "NodeCordoned"),
    Case("an admin allows interactive preemption, saying why",
         lambda h: cmd(ConfigurePolicy, settings=settings(h, allow_interactive_preemption=True),
                       reason="hero run", actor=ALICE), "PolicyConfigured"),
    Case("anyone else may not allow interactive preemption",
         lambda h: cmd(ConfigurePolicy, settings=settings(h, allow_interactive_preemption=True),
                       reason="I want the rack", actor=MALLORY), "not_authorized"),
    Case("anyone else may not make themselves an admin",
         lambda h: cmd(ConfigurePolicy, settings=settings(h, admins=(ALICE, MALLORY)),
                       actor=MALLORY), "not_authorized"),
    Case("anyone else may not re-register the cluster with new settings",
         lambda h: register(R01, R02, spares_per_rack=0, admins=(MALLORY,)).model_copy(
             update={"actor": MALLORY}), "not_authorized"),
    Case("an admin re-registers the cluster",
         lambda h: register(R01, R02, spares_per_rack=0, admins=(ALICE,)).model_copy(
             update={"actor": ALICE}), "TopologyRegistered"),
    Case("an admin preempts by hand", lambda h: cmd(PreemptJobs, jobs=("j1",), actor=ALICE),
         "JobPreempted"),
    Case("anyone else may not preempt by hand",
         lambda h: cmd(PreemptJobs, jobs=("j1",), actor=BOB), "not_authorized"),
    Case("the defrag policy preempts without an admin",
         lambda h: cmd(PreemptJobs, jobs=("j1",), cause="defrag", actor="policy:defrag"),
         "JobPreempted"),
    Case("an admin triggers a defrag",
         lambda h: cmd(PlanDefrag, job="j1", target_racks=("r02",), cost_gpu_hours=0,
                       actor=ALICE), "DefragPlanned"),
    Case("anyone else may not trigger a defrag",
         lambda h: cmd(PlanDefrag, job="j1", target_racks=("r02",), cost_gpu_hours=0,
                       actor=MALLORY), "not_authorized"),
    Case("the owner cancels their own job", lambda h: cmd(CancelJob, job="j1", actor=BOB),
         "JobCancelled"),
    Case("an admin cancels someone else's job", lambda h: cmd(CancelJob, job="j1", actor=ALICE),
         "JobCancelled"),
    Case("anyone else may not cancel someone else's job",
         lambda h: cmd(CancelJob, job="j1", actor=MALLORY), "not_authorized"),
    Case("without an admin list everyone may uncordon",
         lambda h: cmd(UncordonNode, node=node("r01", 5), actor=MALLORY), "NodeUncordoned",
         admins=None),
    Case("without an admin list everyone may cancel any job",
         lambda h: cmd(CancelJob, job="j1", actor=MALLORY), "JobCancelled", admins=None),
    Case("an empty admin list lets nobody uncordon",
         lambda h: cmd(UncordonNode, node=node("r01", 5), actor=ALICE), "not_authorized",
         admins=()),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_admin_commands_need_an_admin(case: Case) -> None:
    h = given(case.admins, case.kind)
    before = h.state
    events = h.when(case.when(h))
    if case.want == "not_authorized":
        (rejected,) = events
        assert isinstance(rejected, CommandRejected)
        assert rejected.code == "not_authorized"
        assert rejected.actor in rejected.reason
        assert "admin" in rejected.reason
        assert h.state.jobs == before.jobs
        assert h.state.nodes == before.nodes
        assert h.state.settings == before.settings
    else:
        assert [type(e).__name__ for e in events][:1] == [case.want]


def test_a_refusal_names_the_action_and_the_actor() -> None:
    h = given()
    (rejected,) = h.when(cmd(UncordonNode, node=node("r01", 5), actor=BOB))
    assert isinstance(rejected, CommandRejected)
    assert rejected.reason == (
        "uncordoning node r01-n05 needs an admin: 'user:bob' is not in the cluster's admin list "
        "(policy setting `admins`)"
    )


def test_allowing_interactive_preemption_without_a_reason_is_refused() -> None:
    h = given()
    allow = settings(h, allow_interactive_preemption=True)
    (rejected,) = h.when(cmd(ConfigurePolicy, settings=allow, actor=ALICE))
    assert isinstance(rejected, CommandRejected)
    assert rejected.code == "reason_required"


def test_the_override_records_who_and_why() -> None:
    h = given(kind=JobKind.INTERACTIVE)
    allow = settings(h, allow_interactive_preemption=True)
    h.when(cmd(ConfigurePolicy, settings=allow, reason="hero run due friday", actor=ALICE))
    assert h.state.interactive_preemption_allowed_by == ALICE
    assert h.state.interactive_preemption_reason == "hero run due friday"
    (preempted,) = h.when(
        cmd(PreemptJobs, jobs=("j1",), cause="defrag", allow_interactive=True, actor="policy:x")
    )
    assert preempted.interactive_allowed_by == ALICE  # type: ignore[union-attr]
    assert preempted.interactive_allowed_reason == "hero run due friday"  # type: ignore[union-attr]
