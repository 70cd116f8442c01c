"""find_placement and the scheduling cycle, as tables over small drawn clusters.

Legend: `#` allocated, `.` free, `x` failed. Spares per rack as each case says.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackplane.models import (
    BlockJob,
    ConfigurePolicy,
    Health,
    JobKind,
    PlaceJob,
    PolicySettings,
    RackHealth,
    RegisterTopology,
    ReportNodeHealth,
    ReportRackHealth,
    SliceAssignment,
    SubmitJob,
)
from rackplane.policies import Capacity, Placement, Unplaceable, find_placement, schedule
from rackplane.policies.tas import _closest_racks, _could_ever_fit
from rackplane.projections import ClusterState
from tests.builders import (
    Harness,
    cmd,
    job,
    rack,
    racks_healthy_degraded_failed,
    register,
    topology,
)


def drawn(*rows: str, spares: int = 0, pods: tuple[str, ...] = ()) -> ClusterState:
    """A cluster from a drawing: one string per rack, `#` allocated, `.` free, `x` failed."""
    racks = [
        rack(f"r{i + 1}", len(row), pod=pods[i] if pods else "p1") for i, row in enumerate(rows)
    ]
    h = Harness().given(
        cmd(
            RegisterTopology,
            topology=topology(*racks),
            settings=PolicySettings(spares_per_rack=spares),
        )
    )
    for i, row in enumerate(rows):
        r = racks[i]
        taken = tuple(n for n, c in zip(r.nodes, row, strict=True) if c == "#")
        if taken:
            h.given(
                cmd(SubmitJob, job=job(f"fill-{r.id}", len(taken), slice_size=len(taken))),
                cmd(PlaceJob, job=f"fill-{r.id}", slices=(SliceAssignment(nodes=taken),)),
            )
        for n, c in zip(r.nodes, row, strict=True):
            if c == "x":
                h.given(cmd(ReportNodeHealth, node=n, health=Health.FAILED))
    return h.state


@dataclass
class Case:
    id: str
    racks: tuple[str, ...]
    sizes: tuple[int, ...]
    want_racks: tuple[str, ...] | None = None
    want_reason: str | None = None
    spares: int = 0
    pods: tuple[str, ...] = ()


CASES = [
    # r1 ##....      r2 ......
    Case(
        "a small job packs into the partly used rack before opening an empty one",
        ("##....", "......"),
        (3,),
        want_racks=("r1",),
    ),
    # r1 ###...      r2 #.....      r3 ......
    Case(
        "best fit: the rack with the fewest free nodes that still fits",
        ("###...", "#.....", "......"),
        (3,),
        want_racks=("r1",),
    ),
    # r1 ####..      r2 ......   (1 spare per rack: r1 offers 1, r2 offers 5)
    Case(
        "spares are never offered to placement",
        ("####..", "......"),
        (2,),
        want_racks=("r2",),
        spares=1,
    ),
    # r1 ...... (pod a)   r2 ...... (pod b)   r3 ...... (pod a)
    Case(
        "the slices of one job go to racks of one pod",
        ("......", "......", "......"),
        (6, 6),
        want_racks=("r1", "r3"),
        pods=("a", "b", "a"),
    ),
    # r1 ..........  (10 nodes) takes two slices of 4 and the remainder of 2
    Case(
        "one rack takes several slices when it holds them all",
        ("..........",),
        (4, 4, 2),
        want_racks=("r1", "r1", "r1"),
    ),
    # r1 ###...      r2 ###...      (6 free in total, 3 per rack)
    Case(
        "enough nodes in total but not in one rack is a topology block",
        ("###...", "###..."),
        (6,),
        want_reason="topology",
    ),
    # r1 #####.      r2 #####.
    Case(
        "too few nodes in total is a capacity block",
        ("#####.", "#####."),
        (3,),
        want_reason="capacity",
    ),
    # r1 xx....      r2 #.....
    Case("failed nodes are not capacity", ("xx....", "#....."), (5,), want_racks=("r2",)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_find_placement(case: Case) -> None:
    state = drawn(*case.racks, spares=case.spares, pods=case.pods)
    result = find_placement(Capacity(state), case.sizes)
    if case.want_reason is not None:
        assert isinstance(result, Unplaceable)
        assert result.reason == case.want_reason
        assert result.explanation
    else:
        assert isinstance(result, Placement), result
        assert result.racks == case.want_racks
        assert tuple(len(s) for s in result.slices) == case.sizes
        for nodes, r in zip(result.slices, result.racks, strict=True):
            assert all(state.nodes[n].rack == r and state.nodes[n].available for n in nodes)


def test_the_queue_is_served_by_priority_then_first_come() -> None:
    #   r1 ......   r2 ......
    state = drawn("......", "......")
    h = Harness(state)
    h.given(
        cmd(SubmitJob, job=job("low", 6, slice_size=6, priority=0)),
        cmd(SubmitJob, job=job("first", 6, slice_size=6, priority=5)),
        cmd(SubmitJob, job=job("second", 6, slice_size=6, priority=5)),
    )
    proposals = schedule(h.state)
    placed = [c.job for c in proposals if isinstance(c, PlaceJob)]
    blocked = [c.job for c in proposals if isinstance(c, BlockJob)]
    assert placed == ["first", "second"]
    assert blocked == ["low"]


def test_a_blocked_head_of_line_job_holds_racks_so_small_jobs_do_not_starve_it() -> None:
    #   r1 ###...   r2 ###...   r3 #####.
    # A 6-node hero (priority 5) fits nowhere; small 2-node jobs (priority 0) wait behind it.
    state = drawn("###...", "###...", "#####.")
    h = Harness(state)
    h.given(cmd(SubmitJob, job=job("hero", 6, slice_size=6, priority=5)))
    for i in range(3):
        h.given(cmd(SubmitJob, job=job(f"small{i}", 1, slice_size=1)))
    proposals = schedule(h.state)
    placed = {c.job: c.slices[0].nodes for c in proposals if isinstance(c, PlaceJob)}
    # The hero holds r1 (the rack closest to fitting it); small jobs go elsewhere.
    assert all(h.state.nodes[nodes[0]].rack != "r1" for nodes in placed.values())
    assert any(isinstance(c, BlockJob) and c.job == "hero" for c in proposals)


def test_a_job_that_could_never_fit_does_not_hold_racks() -> None:
    #   r1 ......   r2 ......   (1 spare per rack: at most 5 nodes per slice, ever)
    # "wide" was submitted before the racks kept a spare (now it would be refused).
    h = Harness(drawn("......", "......", spares=0))
    h.given(
        cmd(SubmitJob, job=job("wide", 6, slice_size=6, priority=9)),
        cmd(ConfigurePolicy, settings=PolicySettings(spares_per_rack=1)),
        cmd(SubmitJob, job=job("small", 5, slice_size=5)),
    )
    proposals = schedule(h.state)
    assert [c.job for c in proposals if isinstance(c, PlaceJob)] == ["small"]


def test_short_preemptible_work_borrows_spares_only_when_allowed() -> None:
    #   r1 ####..   (2 spares: nothing above the reserve)
    short = job("short", 2, slice_size=2, expected_duration=timedelta(minutes=30))
    for borrow, want in ((False, []), (True, ["short"])):
        h = Harness(drawn("####..", spares=2))
        h.given(
            cmd(
                RegisterTopology,
                topology=topology(rack("r1", 6)),
                settings=PolicySettings(spares_per_rack=2, borrow_spares=borrow),
            )
        )
        h.given(cmd(SubmitJob, job=short))
        placed = [c for c in schedule(h.state) if isinstance(c, PlaceJob)]
        assert [c.job for c in placed] == want
        assert all(c.borrowing for c in placed)


def test_interactive_and_long_jobs_never_borrow_spares() -> None:
    h = Harness(drawn("####..", spares=2))
    h.given(
        cmd(
            RegisterTopology,
            topology=topology(rack("r1", 6)),
            settings=PolicySettings(spares_per_rack=2, borrow_spares=True),
        )
    )
    h.given(
        cmd(
            SubmitJob,
            job=job(
                "dev",
                1,
                slice_size=1,
                kind=JobKind.INTERACTIVE,
                expected_duration=timedelta(minutes=5),
            ),
        ),
        cmd(SubmitJob, job=job("long", 1, slice_size=1, expected_duration=timedelta(hours=12))),
    )
    assert not [c for c in schedule(h.state) if isinstance(c, PlaceJob)]


@settings(max_examples=150, deadline=None)
@given(
    healths=st.lists(st.sampled_from("hdf"), min_size=1, max_size=12),
    rooms=st.lists(st.integers(-3, 8), min_size=12, max_size=12),
    others=st.sets(st.integers(0, 11), max_size=4),
    slices=st.integers(1, 5),
)
def test_the_racks_a_blocked_head_holds_are_the_first_by_health_room_and_order(
    healths: list[str], rooms: list[int], others: set[int], slices: int
) -> None:
    """`_closest_racks` (which ranks only racks with room when enough healthy ones have it)
    picks what ranking every rack in service by (degraded, most usable, rack order) picks."""
    h = Harness().given(register(*(rack(f"r{i:02d}", 8) for i in range(len(healths)))))
    for i, health in enumerate(healths):
        if health != "h":
            status = RackHealth.DEGRADED if health == "d" else RackHealth.FAILED
            h.given(cmd(ReportRackHealth, rack=f"r{i:02d}", health=status))
    capacity = Capacity(h.state)
    for i, room in enumerate(rooms[: len(healths)]):
        if healths[i] != "f":  # a failed rack's room stays far below zero
            capacity.usable[f"r{i:02d}"] = room
    out = {f"r{i:02d}" for i in others}
    order = capacity.index.rack_order
    expected = sorted(
        (r for r in capacity.usable if r not in out and h.state.racks[r].in_service),
        key=lambda r: (r in capacity.degraded, -capacity.usable[r], order[r]),
    )[:slices]
    assert _closest_racks(capacity, (4,) * slices, out) == set(expected)


def test_whether_a_job_could_ever_fit_follows_the_spares_kept() -> None:
    """The answer is kept per topology and spares setting: a new setting asks again."""
    h = Harness().given(register(rack("r1", 6), rack("r2", 6), spares_per_rack=0))
    assert _could_ever_fit(h.state, (6,))
    assert _could_ever_fit(h.state, (6, 6))
    assert not _could_ever_fit(h.state, (6, 6, 6))
    h.given(cmd(ConfigurePolicy, settings=PolicySettings(spares_per_rack=1)))
    assert not _could_ever_fit(h.state, (6,))
    assert _could_ever_fit(h.state, (5, 5))
    h.given(register(rack("r1", 6), rack("r2", 6), rack("r3", 7), spares_per_rack=1))  # new racks
    assert _could_ever_fit(h.state, (6,))


def test_a_capacity_lists_the_racks_in_service_in_topology_order() -> None:
    """Healthy and degraded racks, not the failed one, whatever the cycle took or released."""
    h = racks_healthy_degraded_failed()
    capacity = Capacity(h.state, keep_spares=False)
    assert capacity.in_service() == ["r01", "r02"]
    capacity.release(h.state.index.rack("r03").nodes)  # nodes of a failed rack come back
    capacity.take(h.state.index.rack("r01").nodes)
    assert capacity.in_service() == ["r01", "r02"]
