"""The command line, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rackplane import __version__
from rackplane.cli import app
from rackplane.importers import load_cluster_file, load_k8s_nodes, load_slurm_topology

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "gb200-128.yaml"
FIXTURES = ROOT / "tests" / "fixtures"
runner = CliRunner()


def test_version_prints_the_package_version() -> None:
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"rackplane {__version__}"


def test_topology_show_reports_the_example_cluster_as_json() -> None:
    result = runner.invoke(app, ["topology", "show", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert (facts["racks"], facts["nodes"], facts["gpus"], facts["pods"]) == (128, 2304, 9216, 16)
    assert facts["gpus_per_nvlink_domain"] == {"72": 128}
    assert facts["hops_from_first_rack"] == {"2": 7, "4": 120}


def test_topology_show_prints_a_table_with_the_totals() -> None:
    result = runner.invoke(app, ["topology", "show", str(EXAMPLE)], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    for text in ("128", "2,304", "9,216", "72 GPUs x 128 racks", "pod16"):
        assert text in result.stdout


def test_a_broken_cluster_file_gets_an_error_naming_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: c1\nracks:\n  - id: r1\n    nodes: 'n[1-4]'\n    gpus_per_node: x\n")
    result = runner.invoke(app, ["topology", "show", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:5" in result.stderr
    assert "gpus_per_node" in result.stderr


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["topology", "show", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "nope.yaml" in result.stderr
    assert "Traceback" not in result.output


def test_importing_a_slurm_topology_writes_a_cluster_file_that_loads_back(tmp_path: Path) -> None:
    out = tmp_path / "cluster.yaml"
    source = FIXTURES / "slurm" / "topology.conf"
    result = runner.invoke(
        app, ["topology", "import", "--slurm", str(source), "--cluster", "gb", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "imported" in result.stderr
    assert load_cluster_file(out).topology == load_slurm_topology(source, cluster="gb")


def test_importing_kubernetes_nodes_reports_what_it_skipped(tmp_path: Path) -> None:
    out = tmp_path / "cluster.yaml"
    source = FIXTURES / "k8s" / "nodes.json"
    result = runner.invoke(app, ["topology", "import", "--k8s", str(source), "-o", str(out)])
    assert result.exit_code == 0, result.output
    expected = load_k8s_nodes(source)
    assert load_cluster_file(out).topology == expected.topology
    assert expected.skipped
    for node, _ in expected.skipped:
        assert node in result.stderr


def test_import_needs_exactly_one_source() -> None:
    result = runner.invoke(app, ["topology", "import"])
    assert result.exit_code == 2
    assert "exactly one" in result.stderr


def test_the_demo_story_swaps_migrates_and_defragments() -> None:
    result = runner.invoke(app, ["demo", "--cluster", str(EXAMPLE)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.count("NodeSwapped hero-512") == 2
    assert "SliceMigrated hero-512" in out
    assert "DefragPlanned" in out
    assert "Rack occupancy" in out or "Racks of the story" in out
    assert "CommandRejected │     0" in out
