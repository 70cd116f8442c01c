"""`rackplane capacity` with spares and no `--slice-sizes`: the default sizes that fit a rack;
questions too large to answer (a rack beyond the model, a Monte Carlo run or a sweep of
minutes) refused up front.

An NVL72 rack of 18 nodes with 2 spares has room for 16: the default sizes 8, 9, 16 and 18
used to include 18, so `capacity --spares 2` refused its own defaults.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.sim import capacity
from rackplane.sim.capacity import DEFAULT_SLICE_SIZES, default_slice_sizes

runner = CliRunner()


@pytest.mark.parametrize(
    ("nodes", "spares", "want"),
    [
        pytest.param(18, 0, (8, 9, 16, 18), id="an NVL72 rack without spares: the defaults"),
        pytest.param(18, 2, (8, 9, 16), id="two spares: 18 no longer fits, 16 is the room"),
        pytest.param(18, 1, (8, 9, 16, 17), id="one spare: the room of 17 joins the defaults"),
        pytest.param(18, 9, (8, 9), id="half the rack kept back"),
        pytest.param(18, 12, (6,), id="less room than any default: the room alone"),
        pytest.param(4, 0, (4,), id="a small rack"),
        pytest.param(18, 18, DEFAULT_SLICE_SIZES, id="no room: left to the spares check"),
    ],
)
def test_the_default_slice_sizes_are_those_that_fit_beside_the_spares(
    nodes: int, spares: int, want: tuple[int, ...]
) -> None:
    assert default_slice_sizes(nodes, spares) == want


def test_capacity_with_two_spares_compares_the_default_sizes_that_fit() -> None:
    args = ["capacity", "--racks", "128", "--unavailability", "0.02", "--spares", "2", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["spares"] == 2
    assert [r["slice_size"] for r in data["results"]] == [8, 9, 16]
    sixteen = next(r for r in data["results"] if r["slice_size"] == 16)
    assert 0 < sixteen["usable_nodes"] <= 128 * 16


def test_capacity_with_two_spares_still_refuses_an_explicit_slice_that_does_not_fit() -> None:
    args = ["capacity", "--racks", "4", "--unavailability", "0.02", "--spares", "2"]
    result = runner.invoke(app, [*args, "--slice-sizes", "16,18"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        "error: a slice of 18 nodes cannot fit in one rack of 18 nodes after keeping 2 spares "
        "(at most 16); choose a slice size of at most 16"
    ]


def test_capacity_with_spares_of_a_whole_rack_names_the_spares() -> None:
    args = ["capacity", "--racks", "4", "--unavailability", "0.02", "--spares", "18"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "spares per rack must be between 0 and 17, got 18" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("call", "want"),
    [
        pytest.param(
            lambda: capacity.usable_nodes(4, 100_000, 0.1, 16),
            "a rack of 100,000 nodes is beyond the model: at most 1,024",
            id="a rack no slice could use (the exact sum would overflow a float)",
        ),
        pytest.param(
            lambda: capacity.monte_carlo_usable(100_000_000, 18, 0.1, (16,), trials=2, seed=0),
            "Monte Carlo would draw 3,600,000,000 node states (racks x nodes x trials); at most "
            "1,000,000,000",
            id="a Monte Carlo estimate that would run for minutes",
        ),
        pytest.param(
            lambda: capacity.parse_sweep("0:0.1:0.0000001"),
            "the sweep has 1,000,001 points; at most 10,001",
            id="a sweep of a million points",
        ),
    ],
)
def test_questions_too_large_to_answer_are_refused_with_the_limit(
    call: Callable[[], object], want: str
) -> None:
    with pytest.raises(capacity.CapacityError, match=re.escape(want)):
        call()


def test_a_cluster_too_large_for_one_draw_is_sampled_in_blocks_of_racks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exact = capacity.usable_nodes(8, 18, 0.1, 16)
    monkeypatch.setattr(capacity, "_CHUNK", 2 * 18)  # two racks at a time: four blocks a trial
    sampled = capacity.monte_carlo_usable(8, 18, 0.1, (16,), trials=4_000, seed=5)[16]
    # usable nodes per trial are in [0, 128]: 4,000 trials put the mean within ~1 node
    assert abs(sampled - exact) < 2.0
    again = capacity.monte_carlo_usable(8, 18, 0.1, (16,), trials=4_000, seed=5)[16]
    assert again == sampled
