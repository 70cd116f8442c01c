"""`rackplane demo --cluster X` on clusters other than the example: the story scales, or one line.

The story was written for examples/gb200-128.yaml (a 512-node hero run); on a smaller cluster
it raised `KeyError: 'hero-512'`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from tests.cli._output import one_error_line

REPO = Path(__file__).parents[2]
runner = CliRunner()


def cluster_file(tmp_path: Path, racks: int, nodes: int, policy: str = "") -> Path:
    path = tmp_path / "cluster.yaml"
    lines = [f'  - {{id: r{i}, pod: p1, nodes: "r{i}n[01-{nodes:02d}]"}}' for i in range(racks)]
    path.write_text("cluster: small\nracks:\n" + "\n".join(lines) + "\n" + policy)
    return path


#   r0 [hero-16: 16 nodes | 2 spares]   r1 [16 free | 2 spares]   r2, r3 the same
def test_on_four_racks_the_story_runs_with_a_hero_of_one_slice(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["demo", "--cluster", str(cluster_file(tmp_path, 4, 18))], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "hero-16: 1 slice of 16 on 1 rack" in out
    assert out.count("NodeSwapped hero-16") == 2  # two spares, two swaps
    assert "4. A third failure under the same slice: the rack has no spare left" in out
    assert "CommandRejected │     0" in out


def test_with_other_spares_and_slices_the_hero_is_cut_in_the_clusters_slices(
    tmp_path: Path,
) -> None:
    path = cluster_file(tmp_path, 8, 18, "policy: {slice_size: 8, spares_per_rack: 1}\n")
    result = runner.invoke(app, ["demo", "--cluster", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # 8 racks hold 2 slices of 8 each beside one spare: 16 slices, a hero of 4
    assert "hero-32: 4 slices of 8" in result.stdout
    assert "6. 8-node jobs keep arriving" in result.stdout


def test_a_cluster_whose_racks_hold_no_slice_is_refused_in_one_line(tmp_path: Path) -> None:
    path = cluster_file(tmp_path, 2, 8)
    line = one_error_line(runner.invoke(app, ["demo", "--cluster", str(path)]))
    assert line == (
        f"error: demo: {path}: no rack has room for a slice of 16 nodes (slice_size) beside "
        "its 2 spares (the largest room is 6); the story's jobs need one"
    )


@pytest.mark.parametrize(
    ("cluster", "want"),
    [
        pytest.param(
            "nope",
            "error: --cluster: no cluster file nope: neither a file nor an example "
            "(examples/nope.yaml)",
            id="an unknown cluster name",
        ),
        pytest.param(
            "missing/cluster.yaml",
            "error: --cluster: no cluster file missing/cluster.yaml",
            id="a missing file",
        ),
        pytest.param(
            "examples",
            "error: --cluster: examples is a directory; expected a cluster file",
            id="a directory",
        ),
    ],
)
def test_an_unknown_cluster_is_one_line(
    cluster: str, want: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    assert one_error_line(runner.invoke(app, ["demo", "--cluster", cluster])) == want


def test_the_default_cluster_outside_the_repository_says_where_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error_line(runner.invoke(app, ["demo"]))
    assert line == (
        "error: --cluster: no cluster file examples/gb200-128.yaml (run from the repository "
        "root, or pass --cluster FILE)"
    )


def test_a_cluster_file_that_is_not_one_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("name: s\ncluster: {racks: 2, nodes_per_rack: 18}\n")
    line = one_error_line(runner.invoke(app, ["demo", "--cluster", str(path)]))
    assert line.startswith(f"error: {path}:2: cluster: expected an id")


def test_a_bare_name_is_the_example_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    examples = tmp_path / "examples"
    examples.mkdir()
    cluster_file(tmp_path, 2, 18).rename(examples / "two-racks.yaml")
    monkeypatch.setattr("rackplane.cli._demo.DEFAULT_CLUSTER", examples / "gb200-128.yaml")
    result = runner.invoke(app, ["demo", "--cluster", "two-racks"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Cluster small: 2 racks, 36 nodes" in result.stdout
