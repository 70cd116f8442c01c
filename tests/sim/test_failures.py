"""The failure model: root causes, repair times, and a schedule that ignores the policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rackplane.sim import (
    FailureModel,
    GeneratedCluster,
    Lognormal,
    ScriptedFailure,
    expected_unavailability,
    failure_schedule,
    mean_repair_hours,
    root_causes,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)
SMALL = GeneratedCluster(racks=4).topology()


def test_the_llama3_table_ships_with_the_package() -> None:
    causes = root_causes()
    assert len(causes) == 18
    assert sum(c.count for c in causes) == 419  # unexpected interruptions of 466
    assert (causes[0].component, causes[0].category, causes[0].count) == ("Faulty GPU", "GPU", 148)
    assert {c.category for c in causes} == {
        "GPU",
        "Dependency",
        "Network",
        "Unplanned Maintenance",
        "Host",
        "Unknown",
    }


def test_default_repairs_make_a_node_unavailable_about_half_a_percent_of_the_time() -> None:
    model = FailureModel()
    assert 40 < mean_repair_hours(model) < 70
    assert expected_unavailability(model) == pytest.approx(0.005, abs=0.002)
    assert expected_unavailability(FailureModel(enabled=False)) == 0.0


def test_the_schedule_is_the_same_for_a_seed_and_differs_between_seeds() -> None:
    end = T0 + timedelta(days=60)
    model = FailureModel(node_mtbi_days=30)
    a = failure_schedule(SMALL, model, start=T0, end=end, seed=1)
    b = failure_schedule(SMALL, model, start=T0, end=end, seed=1)
    c = failure_schedule(SMALL, model, start=T0, end=end, seed=2)
    assert a == b
    assert a != c


def test_failures_come_at_the_mtbi_rate_with_causes_from_the_table() -> None:
    days, mtbi = 365.0, 30.0
    end = T0 + timedelta(days=days)
    model = FailureModel(node_mtbi_days=mtbi, rack_mtbi_days=0)
    schedule = failure_schedule(SMALL, model, start=T0, end=end, seed=5)
    nodes = SMALL.node_count
    want = nodes * days / (mtbi + mean_repair_hours(model) / 24)
    assert len(schedule) == pytest.approx(want, rel=0.15)
    components = {c.component for c in root_causes()}
    assert all(f.cause.split(" (")[0] in components for f in schedule)
    assert all(f.repaired_at > f.at for f in schedule)
    assert [f.at for f in schedule] == sorted(f.at for f in schedule)


def test_one_node_never_fails_again_before_it_is_repaired() -> None:
    end = T0 + timedelta(days=200)
    model = FailureModel(node_mtbi_days=5, repair={"GPU": Lognormal(median_hours=100)})
    last: dict[str, datetime] = {}
    for f in failure_schedule(SMALL, model, start=T0, end=end, seed=3):
        if f.node is None:
            continue
        assert f.at >= last.get(f.node, T0)
        last[f.node] = f.repaired_at


def test_rack_faults_take_whole_racks_at_their_own_rate() -> None:
    end = T0 + timedelta(days=365)
    model = FailureModel(node_mtbi_days=1e9, rack_mtbi_days=10)
    racks = [f for f in failure_schedule(SMALL, model, start=T0, end=end, seed=4) if f.node is None]
    assert len(racks) == pytest.approx(4 * 365 / 10, rel=0.25)
    assert {f.category for f in racks} == {"Rack"}


def test_scripted_failures_happen_even_with_random_ones_off() -> None:
    model = FailureModel(
        enabled=False,
        scripted=(
            ScriptedFailure(at_hours=2, node="r0001n03", repair_hours=5),
            ScriptedFailure(at_hours=1, rack="r0002"),
        ),
    )
    got = failure_schedule(SMALL, model, start=T0, end=T0 + timedelta(days=1), seed=0)
    assert [(f.node, f.rack, f.at - T0) for f in got] == [
        (None, "r0002", timedelta(hours=1)),
        ("r0001n03", "r0001", timedelta(hours=2)),
    ]
    assert got[1].repaired_at - got[1].at == timedelta(hours=5)


def test_a_scripted_failure_of_an_unknown_node_is_an_error() -> None:
    model = FailureModel(scripted=(ScriptedFailure(at_hours=1, node="nope"),))
    with pytest.raises(ValueError, match="nope"):
        failure_schedule(SMALL, model, start=T0, end=T0 + timedelta(days=1), seed=0)


def test_a_scripted_failure_names_a_node_or_a_rack_not_both() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ScriptedFailure(at_hours=1, node="r0001n01", rack="r0001")
