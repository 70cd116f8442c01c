"""The workload: synthetic classes, inline jobs and trace CSVs, turned into arrivals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rackplane.models import JobKind
from rackplane.sim import (
    DEFAULT_CLASSES,
    JobClass,
    NodeRange,
    TraceError,
    TraceJob,
    Workload,
    generate_arrivals,
    parse_trace_csv,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)

TRACE = """\
# a small trace: hours, nodes, hours of work, kind, priority, checkpoint minutes
submit_hours,nodes,duration_hours,kind,priority,checkpoint_minutes,class
0,16,10,managed,5,30,
0.5,2,8,interactive,20,,
1,128,72,managed,10,30,hero
"""


def test_a_trace_csv_reads_its_documented_columns() -> None:
    jobs = parse_trace_csv(TRACE, "trace.csv")
    assert [(j.submit_hours, j.nodes, j.duration_hours) for j in jobs] == [
        (0, 16, 10),
        (0.5, 2, 8),
        (1, 128, 72),
    ]
    assert jobs[1].kind is JobKind.INTERACTIVE and jobs[1].checkpoint_minutes is None
    assert jobs[2].job_class == "hero"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("nodes,duration_hours\n4,1\n", "trace.csv:1: missing columns", id="no-submit"),
        pytest.param(
            "submit_hours,nodes,duration_hours\n0,4,1\n1,zero,1\n",
            "trace.csv:3: nodes",
            id="bad-row",
        ),
        pytest.param("# only a comment\n", "empty", id="empty"),
    ],
)
def test_a_bad_trace_names_the_file_and_line(text: str, want: str) -> None:
    with pytest.raises(TraceError, match=want):
        parse_trace_csv(text, "trace.csv")


def test_the_same_seed_gives_the_same_arrivals() -> None:
    end = T0 + timedelta(days=7)
    a = generate_arrivals(Workload(), nodes=2304, start=T0, end=end, seed=1)
    b = generate_arrivals(Workload(), nodes=2304, start=T0, end=end, seed=1)
    c = generate_arrivals(Workload(), nodes=2304, start=T0, end=end, seed=2)
    assert a == b and a != c
    assert [x.spec.id for x in a] == [f"j{i}" for i in range(1, len(a) + 1)]
    assert [x.at for x in a] == sorted(x.at for x in a)


def test_the_default_mix_has_every_class_at_its_rate() -> None:
    days = 60
    end = T0 + timedelta(days=days)
    got = generate_arrivals(Workload(), nodes=2304, start=T0, end=end, seed=3)
    counts = {c.name: 0 for c in DEFAULT_CLASSES}
    for a in got:
        counts[a.job_class] += 1
    for c in DEFAULT_CLASSES:
        want = c.arrivals_per_day * 2.304 * days
        assert counts[c.name] == pytest.approx(want, rel=0.35, abs=5), c.name
    heroes = [a for a in got if a.hero]
    assert heroes and all(64 <= a.spec.nodes <= 512 for a in heroes)
    assert all(a.spec.min_nodes_per_slice == 14 for a in heroes)
    kinds = {a.job_class: a.spec.kind for a in got}
    assert kinds["interactive"] is JobKind.INTERACTIVE
    assert kinds["inference"] is JobKind.INFERENCE


def test_inline_jobs_are_classed_by_size_unless_they_say() -> None:
    workload = Workload(
        classes=(),
        jobs=(
            TraceJob(submit_hours=0, nodes=4, duration_hours=1),
            TraceJob(submit_hours=0, nodes=32, duration_hours=1),
            TraceJob(submit_hours=0, nodes=256, duration_hours=1),
            TraceJob(submit_hours=0, nodes=2, duration_hours=1, kind=JobKind.INFERENCE),
            TraceJob.model_validate(
                {"submit_hours": 0, "nodes": 8, "duration_hours": 1, "class": "mine"}
            ),
        ),
    )
    got = generate_arrivals(workload, nodes=2304, start=T0, end=T0 + timedelta(days=1), seed=0)
    assert [a.job_class for a in got] == ["small", "mid", "hero", "inference", "mine"]
    assert [a.hero for a in got] == [False, False, True, False, False]


def test_jobs_larger_than_the_cluster_are_capped_and_an_ntp_floor_above_the_slice_dropped() -> None:
    workload = Workload(
        classes=(
            JobClass(
                name="x",
                nodes=NodeRange(min=8, max=8),
                arrivals_per_day=50,
                duration_hours=1,
                min_nodes_per_slice=14,
            ),
            JobClass(name="y", nodes=500, arrivals_per_day=50, duration_hours=1),
        ),
        rate_basis="cluster",
    )
    got = generate_arrivals(workload, nodes=72, start=T0, end=T0 + timedelta(days=1), seed=0)
    assert {a.spec.nodes for a in got if a.job_class == "y"} == {72}
    assert {a.spec.min_nodes_per_slice for a in got if a.job_class == "x"} == {None}


def test_per_1000_node_rates_scale_with_the_cluster() -> None:
    one = JobClass(name="c", nodes=1, arrivals_per_day=100, duration_hours=1)
    end = T0 + timedelta(days=10)
    small = generate_arrivals(Workload(classes=(one,)), nodes=500, start=T0, end=end, seed=0)
    large = generate_arrivals(Workload(classes=(one,)), nodes=4000, start=T0, end=end, seed=0)
    assert len(small) == pytest.approx(500, rel=0.15)
    assert len(large) == pytest.approx(4000, rel=0.1)


def test_a_class_arriving_once_in_a_trillion_days_arrives_never_instead_of_overflowing() -> None:
    """The first gap drawn is ~1e12 days, beyond what a timedelta holds (was OverflowError)."""
    rare = JobClass(name="rare", arrivals_per_day=1e-12, nodes=1, duration_hours=1)
    arrivals = generate_arrivals(
        Workload(classes=(rare,)), nodes=8, start=T0, end=T0 + timedelta(days=7), seed=0
    )
    assert arrivals == []
