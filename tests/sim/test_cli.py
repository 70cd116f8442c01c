"""`rackplane capacity`, `reliability` and `simulate`, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from rackplane.cli._sim import register

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"
SCENARIO = """\
name: tiny
cluster: {racks: 3, nodes_per_rack: 18}
days: 1
seed: 4
failures: {node_mtbi_days: 30}
workload:
  rate_basis: cluster
  classes:
    - {name: small, nodes: {min: 1, max: 8}, arrivals_per_day: 24, duration_hours: 3}
    - {name: hero, nodes: 16, arrivals_per_day: 4, duration_hours: 6, priority: 10}
"""


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SCENARIO)
    return path


def test_capacity_prints_the_documented_json_shape(app: typer.Typer) -> None:
    args = ["capacity", "--racks", "128", "--nodes-per-rack", "18", "--unavailability", "0.02"]
    result = runner.invoke(app, [*args, "--slice-sizes", "8,9,16,18", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["racks"], data["nodes_per_rack"], data["unavailability"]) == (128, 18, 0.02)
    assert [r["slice_size"] for r in data["results"]] == [8, 9, 16, 18]
    for r in data["results"]:
        assert set(r) == {"slice_size", "usable_nodes", "usable_fraction", "monte_carlo"}
        assert r["monte_carlo"] is None
    assert data["best_slice_size"] == 8
    assert {a["slice_size"] for a in data["advantage"]} == {9, 16, 18}


def test_capacity_puts_a_monte_carlo_estimate_beside_the_exact_figure(app: typer.Typer) -> None:
    args = ["capacity", "--racks", "16", "--unavailability", "0.05", "--slice-sizes", "16"]
    result = runner.invoke(app, [*args, "--monte-carlo", "2000", "--seed", "3", "--json"])
    assert result.exit_code == 0, result.output
    (r,) = json.loads(result.stdout)["results"]
    assert r["monte_carlo"] == pytest.approx(r["usable_nodes"], rel=0.02)


def test_capacity_takes_mtbi_and_mttr_instead_of_a_probability(app: typer.Typer) -> None:
    args = ["capacity", "--racks", "4", "--mtbi-days", "490", "--mttr-days", "10", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["unavailability"] == pytest.approx(0.02)


def test_capacity_sweeps_unavailability_and_plots_a_png(app: typer.Typer, tmp_path: Path) -> None:
    out = tmp_path / "cap.png"
    args = ["capacity", "--racks", "128", "--sweep", "0:0.05:0.01", "--plot", str(out), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    sweep = json.loads(result.stdout)["sweep"]
    assert [p["unavailability"] for p in sweep] == pytest.approx([0, 0.01, 0.02, 0.03, 0.04, 0.05])
    assert out.read_bytes().startswith(PNG)


def test_capacity_prints_a_table_with_the_best_slice_size(app: typer.Typer) -> None:
    args = ["capacity", "--racks", "128", "--unavailability", "0.02"]
    result = runner.invoke(app, args, env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "best at P = 0.02: slices of 8" in result.stdout
    assert "2,037.3" in result.stdout  # slices of 16


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param(["--unavailability", "0.1", "--slice-sizes", "19"], "cannot fit", id="big"),
        pytest.param(["--unavailability", "2"], "probability", id="p-above-one"),
        pytest.param(["--slice-sizes", "16"], "--unavailability", id="no-p"),
        pytest.param(["--mtbi-days", "490"], "go together", id="mtbi-alone"),
        pytest.param(["--unavailability", "0.1", "--slice-sizes", "a"], "whole", id="bad-size"),
    ],
)
def test_capacity_errors_are_clear_and_exit_2(app: typer.Typer, args: list[str], want: str) -> None:
    result = runner.invoke(app, ["capacity", "--racks", "4", *args])
    assert result.exit_code == 2
    assert want in result.stderr
    assert "Traceback" not in result.output


def test_reliability_prints_the_documented_json_keys(app: typer.Typer) -> None:
    args = ["reliability", "--mtbi-days", "490", "--nodes-per-rack", "18", "--racks", "128"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["rack_mtbi_days"] == pytest.approx(27.2, abs=0.05)
    assert data["cluster_hours_between_rack_interruptions"] == pytest.approx(5.1, abs=0.05)
    assert data["rack_interruptions_per_day"] == pytest.approx(4.70, abs=0.01)


def test_reliability_prints_a_table(app: typer.Typer) -> None:
    result = runner.invoke(app, ["reliability", "--mtbi-days", "490", "--racks", "128"])
    assert result.exit_code == 0, result.output
    assert "27.2 days" in result.stdout and "5.1 hours" in result.stdout


def test_simulate_compares_policies_as_json(app: typer.Typer, tiny: Path) -> None:
    args = ["simulate", str(tiny), "--compare", "naive,tas,tas+spares+defrag+ntp", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["scenario"], data["seed"]) == ("tiny", 4)
    assert [p["policy"] for p in data["policies"]] == ["naive", "tas", "tas+spares+defrag+ntp"]
    want = {
        "slices_rack_local_fraction",
        "jobs_rack_local_fraction",
        "usable_nodes_mean",
        "gpu_utilisation",
        "queue_wait_hours",
        "hero_wait_hours_mean",
        "gpu_hours_lost_failures",
        "gpu_hours_lost_migrations",
        "gpu_hours_lost_preemptions",
        "goodput",
        "iteration_penalty_mean",
        "cost_usd_lost",
    }
    for p in data["policies"]:
        assert want <= set(p)
        assert {"p50_hours", "p99_hours"} <= set(p["queue_wait_hours"]["small"])
    assert data["policies"][1]["slices_rack_local_fraction"] == 1.0


def test_simulate_is_deterministic_for_a_seed(app: typer.Typer, tiny: Path) -> None:
    args = ["simulate", str(tiny), "--policy", "tas", "--seed", "9", "--json"]
    first, second = runner.invoke(app, args), runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    assert json.loads(first.stdout)["seed"] == 9


def test_simulate_prints_one_side_by_side_table_and_plots(
    app: typer.Typer, tiny: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sim.png"
    args = ["simulate", str(tiny), "--compare", "naive,tas", "--days", "0.5", "--plot", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    for text in ("Policies side by side", "slices rack-local", "naive", "tas", "p50 / p99"):
        assert text in result.stdout
    assert out.read_bytes().startswith(PNG)


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param(["--policy", "fast"], "unknown policy", id="unknown-policy"),
        pytest.param(["--policy", "tas", "--compare", "tas"], "not both", id="both"),
        pytest.param(["--days", "0"], "days must be more than 0", id="zero-days"),
    ],
)
def test_simulate_errors_are_clear_and_exit_2(
    app: typer.Typer, tiny: Path, args: list[str], want: str
) -> None:
    result = runner.invoke(app, ["simulate", str(tiny), *args])
    assert result.exit_code == 2
    assert want in result.stderr


def test_simulate_names_a_missing_scenario_file(app: typer.Typer, tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "nope.yaml" in result.stderr
