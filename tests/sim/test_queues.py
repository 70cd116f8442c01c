"""Shared clusters in the simulator: queue trees in scenarios, per-queue figures, Jain's index.

The reclaim story's cluster: four racks of 18 nodes, 2 spares each, so 64 nodes take work;
every job is one slice of 16 (a whole rack's room).

    r0001 [16] r0002 [16] r0003 [16] r0004 [16]
    team-a nominal 32          team-b nominal 32 (may borrow)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from rackplane.cli._sim import register
from rackplane.sim import (
    ScenarioDoc,
    ScenarioError,
    build_scenario,
    jain_index,
    load_scenario,
    simulate,
)

EXAMPLES = Path(__file__).parents[2] / "examples"
runner = CliRunner()


def test_the_shared_cluster_example_loads_four_teams_under_two_orgs() -> None:
    s = load_scenario(EXAMPLES / "shared-cluster.yaml")
    leaves = {q.name: q.parent for q in s.settings.queues if q.parent is not None}
    assert leaves == {
        "pretrain": "research",
        "rl": "research",
        "batch": "product",
        "interactive": "product",
    }
    assert sum(q.nominal_nodes for q in s.settings.queues) <= 128 * 16  # nodes outside spares
    assert {c.queue for c in s.workload.classes} == set(leaves)


def _doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "cluster": {"racks": 4, "nodes_per_rack": 18},
        "policy": {
            "slice_size": 16,
            "queues": [
                {"name": "team-a", "nominal_nodes": 32},
                {"name": "team-b", "nominal_nodes": 32},
            ],
        },
        "days": 2,
        "failures": {"enabled": False, "rack_mtbi_days": 0},
        "workload": {"classes": [], "jobs": []},
    }
    return doc | changes


@pytest.mark.parametrize(
    ("workload", "want"),
    [
        pytest.param(
            {
                "classes": [
                    {
                        "name": "x",
                        "queue": "team-c",
                        "nodes": 1,
                        "arrivals_per_day": 1,
                        "duration_hours": 1,
                    }
                ]
            },
            "workload.classes[0] (x): queue 'team-c' is not in policy.queues "
            "(leaves: team-a, team-b)",
            id="a-class-naming-a-queue-the-tree-lacks",
        ),
        pytest.param(
            {"jobs": [{"submit_hours": 0, "nodes": 1, "duration_hours": 1}]},
            "workload.jobs[0]: names no queue and policy.default_queue is not set; "
            "name one of team-a, team-b",
            id="a-job-naming-no-queue-without-a-default",
        ),
        pytest.param(
            {
                "jobs": [
                    {
                        "submit_hours": 0,
                        "nodes": 1,
                        "duration_hours": 1,
                        "kind": "interactive",
                        "queue": "team-a",
                    }
                ]
            },
            None,
            id="a-job-of-a-kind-its-queue-runs",
        ),
    ],
)
def test_a_workload_must_name_leaf_queues_of_the_tree(
    workload: dict[str, Any], want: str | None
) -> None:
    doc = ScenarioDoc.model_validate(_doc(workload={"classes": [], **workload}))
    if want is None:
        build_scenario(doc)
        return
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert str(err.value) == want


def test_a_bad_queue_in_a_scenario_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    doc = _doc(
        workload={
            "classes": [
                {
                    "name": "x",
                    "queue": "nope",
                    "nodes": 1,
                    "arrivals_per_day": 1,
                    "duration_hours": 1,
                }
            ]
        }
    )
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).startswith(f"{path}: workload.classes[0] (x): queue 'nope' is not")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("xs", "want"),
    [
        pytest.param([0.7, 0.7, 0.7, 0.7], 1.0, id="equal-use-is-perfectly-fair"),
        pytest.param([1.0, 0.0, 0.0, 0.0], 0.25, id="one-queue-hogging-is-1-over-n"),
        pytest.param([2.0, 0.0], 0.5, id="one-of-two-is-a-half"),
        pytest.param([1.0, 3.0], 16 / 20, id="one-and-three"),
        pytest.param([0.0, 0.0], None, id="nobody-used-anything"),
        pytest.param([], None, id="no-queues"),
    ],
)
def test_jains_index(xs: list[float], want: float | None) -> None:
    got = jain_index(xs)
    assert got == (None if want is None else pytest.approx(want))


def test_guaranteed_work_of_a_returning_team_reclaims_what_another_borrowed() -> None:
    # team-b fills the cluster at hour 0 (two racks its own, two borrowed from team-a) for
    # 100 hours; team-a comes back at hour 10 with two 10-hour jobs of 16 nodes: within its
    # nominal, so they reclaim team-b's two borrowing jobs at once, which come back at 20 h.
    b_jobs = [
        {
            "submit_hours": 0,
            "nodes": 16,
            "duration_hours": 100,
            "queue": "team-b",
            "class": "b",
            "checkpoint_minutes": 30,
        }
        for _ in range(4)
    ]
    a_jobs = [
        {
            "submit_hours": 10,
            "nodes": 16,
            "duration_hours": 10,
            "queue": "team-a",
            "class": "a",
            "checkpoint_minutes": 30,
        }
        for _ in range(2)
    ]
    doc = ScenarioDoc.model_validate(_doc(workload={"classes": [], "jobs": b_jobs + a_jobs}))
    m = simulate(build_scenario(doc), "tas+spares+defrag")
    a, b = m.queues
    want_a_held = 32 * 10 / 48
    want_b_held = (64 * 10 + 32 * 10 + 64 * 28) / 48
    assert (a.queue, a.nominal_nodes, b.queue, b.nominal_nodes) == ("team-a", 32, "team-b", 32)
    assert (a.jobs_submitted, a.jobs_placed, a.jobs_finished) == (2, 2, 2)
    assert (b.jobs_submitted, b.jobs_placed, b.jobs_finished) == (4, 4, 0)
    assert (a.preemptions, b.preemptions) == ({}, {"reclaim": 2})
    assert (a.wait_hours_mean, a.wait_hours_p95) == (0.0, 0.0)
    assert a.held_nodes_mean == pytest.approx(want_a_held)
    assert b.held_nodes_mean == pytest.approx(want_b_held)
    assert a.quota_utilisation == pytest.approx(want_a_held / 32)
    assert b.cluster_share == pytest.approx(want_b_held / 72)
    assert (a.borrowing_fraction, b.borrowing_fraction) == (0.0, pytest.approx(38 / 48))
    assert m.jain_index == pytest.approx(jain_index([want_a_held / 32, want_b_held / 32]))


def test_a_cluster_without_queues_reports_none() -> None:
    doc = _doc(policy={"slice_size": 16})
    doc["workload"] = {
        "classes": [],
        "jobs": [{"submit_hours": 0, "nodes": 16, "duration_hours": 1}],
    }
    m = simulate(build_scenario(ScenarioDoc.model_validate(doc)), "tas")
    assert (m.queues, m.jain_index) == ((), None)


SHARED = """\
name: tiny-shared
cluster: {racks: 4, nodes_per_rack: 18}
policy:
  slice_size: 16
  queues:
    - {name: research}
    - {name: pretrain, parent: research, nominal_nodes: 32}
    - {name: rl, parent: research, nominal_nodes: 16, borrowing_limit: 16}
    - {name: serving, nominal_nodes: 16}
days: 1
seed: 2
failures: {enabled: false, rack_mtbi_days: 0}
workload:
  rate_basis: cluster
  classes:
    - {name: hero, queue: pretrain, nodes: 16, arrivals_per_day: 6, duration_hours: 6}
    - {name: rollout, queue: rl, nodes: [2, 4], arrivals_per_day: 40, duration_hours: 2}
    - {name: batch, queue: serving, nodes: 8, arrivals_per_day: 12, duration_hours: 4}
"""


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_simulate_prints_a_table_of_the_queues_with_jains_index(
    app: typer.Typer, tmp_path: Path
) -> None:
    path = tmp_path / "shared.yaml"
    path.write_text(SHARED, encoding="utf-8")
    result = runner.invoke(app, ["simulate", str(path), "--policy", "tas"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    for text in (
        "Queues (tas): Jain's fairness index 0.",
        "pretrain",
        "rl",
        "serving",
        "held / nominal",
        "time borrowing",
        "preempted: reclaim",
        "(sum x)^2",
    ):
        assert text in result.stdout


def test_simulate_json_carries_every_leaf_queue_and_jains_index(
    app: typer.Typer, tmp_path: Path
) -> None:
    path = tmp_path / "shared.yaml"
    path.write_text(SHARED, encoding="utf-8")
    result = runner.invoke(app, ["simulate", str(path), "--policy", "tas", "--json"])
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout)["policies"]
    assert [q["queue"] for q in run["queues"]] == ["pretrain", "rl", "serving"]
    assert 0 < run["jain_index"] <= 1
    for q in run["queues"]:
        assert q["jobs_submitted"] >= q["jobs_placed"] >= q["jobs_finished"] > 0
        assert set(q) >= {
            "nominal_nodes",
            "held_nodes_mean",
            "quota_utilisation",
            "cluster_share",
            "borrowing_fraction",
            "wait_hours_mean",
            "wait_hours_p95",
            "preemptions",
        }


def test_simulate_refuses_a_class_of_an_unknown_queue_in_one_line(
    app: typer.Typer, tmp_path: Path
) -> None:
    path = tmp_path / "shared.yaml"
    path.write_text(SHARED.replace("queue: serving", "queue: servng"), encoding="utf-8")
    result = runner.invoke(app, ["simulate", str(path)])
    assert result.exit_code == 2
    assert "queue 'servng' is not in policy.queues (leaves: pretrain, rl, serving)" in (
        result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1
