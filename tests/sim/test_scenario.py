"""Scenarios: files that name a cluster, settings, failures, a workload and a duration."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackplane.policies import PRESETS
from rackplane.sim import ScenarioError, expected_unavailability, load_scenario, simulate

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize(
    ("name", "want_racks", "want_nodes"),
    [
        pytest.param("fragmentation.yaml", 8, 144, id="fragmentation-generates-8-racks"),
        pytest.param("failures-128.yaml", 128, 2304, id="failures-128-names-the-cluster-file"),
        pytest.param("failures-128-stress.yaml", 128, 2304, id="failures-128-stress-too"),
        pytest.param("hero-128x8.yaml", 10, 180, id="hero-128x8-generates-10-racks"),
    ],
)
def test_the_example_scenarios_load(name: str, want_racks: int, want_nodes: int) -> None:
    s = load_scenario(EXAMPLES / name)
    assert (len(s.topology.racks), s.topology.node_count) == (want_racks, want_nodes)
    assert s.name == name.removesuffix(".yaml")
    assert all(p in PRESETS for p in s.policies)


def test_failures_128_puts_about_2_percent_of_the_nodes_out_of_service() -> None:
    s = load_scenario(EXAMPLES / "failures-128.yaml")
    assert expected_unavailability(s.failures) == pytest.approx(0.02, abs=0.002)
    assert s.topology.cluster == "gb200-128"


def test_the_hero_example_runs_one_128_node_job_on_8_racks() -> None:
    s = load_scenario(EXAMPLES / "hero-128x8.yaml")
    (hero,) = [j for j in s.workload.jobs if j.job_class == "hero"]
    assert (hero.nodes, hero.min_nodes_per_slice) == (128, 14)
    m = simulate(s, "tas+spares", days=0.5)
    assert m.racks == 10 and m.slices_rack_local_fraction == 1.0


def test_a_scenario_may_read_a_trace_next_to_it(tmp_path: Path) -> None:
    (tmp_path / "jobs.csv").write_text(
        "submit_hours,nodes,duration_hours,kind,priority,checkpoint_minutes\n"
        "0,16,2,managed,0,30\n1,4,1,interactive,20,\n"
    )
    (tmp_path / "s.yaml").write_text(
        "cluster: {racks: 2}\ndays: 1\nfailures: {enabled: false}\n"
        "workload: {classes: [], trace: jobs.csv}\n"
    )
    s = load_scenario(tmp_path / "s.yaml")
    assert [j.nodes for j in s.workload.jobs] == [16, 4]
    assert simulate(s, "tas").jobs_completed == 2


def test_the_scenario_policy_overrides_the_cluster_file_field_by_field(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "cluster: c\nracks:\n  - {id: r1, nodes: 'n[01-18]'}\npolicy: {spares_per_rack: 1}\n"
    )
    (tmp_path / "s.yaml").write_text("cluster: c.yaml\npolicy: {slice_size: 8}\n")
    s = load_scenario(tmp_path / "s.yaml")
    assert (s.settings.spares_per_rack, s.settings.slice_size) == (1, 8)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("days: 3\n", "cluster", id="no-cluster"),
        pytest.param("cluster: nope.yaml\n", "nope.yaml", id="missing-cluster-file"),
        pytest.param("cluster: {racks: 2}\nspeed: 3\n", "speed", id="unknown-key"),
        pytest.param("cluster: {racks: 2}\npolicies: [fast]\n", "fast", id="unknown-policy"),
        pytest.param("cluster: {racks: 2}\npolicy: {spares: 2}\n", "spares", id="bad-setting"),
        pytest.param("cluster: [\n", "YAML", id="bad-yaml"),
        pytest.param(
            "cluster: {racks: 2}\nworkload: {trace: gone.csv}\n", "gone.csv", id="missing-trace"
        ),
    ],
)
def test_a_bad_scenario_names_the_file_and_the_problem(
    tmp_path: Path, text: str, want: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=want) as err:
        load_scenario(path)
    assert "bad.yaml" in str(err.value)
