"""The capacity model: usable nodes when every slice must fit inside one rack."""

from __future__ import annotations

import math

import pytest

from rackplane.sim import (
    CapacityError,
    capacity_report,
    monte_carlo_usable,
    parse_sweep,
    rack_usable,
    unavailability_from,
    usable_nodes,
)

# One NVL72 rack, 18 nodes; a slice of 16 fits once, a slice of 9 twice, of 8 twice:
#
#     healthy k = 18   [. . . . . . . . . . . . . . . . . .]   s=16: 16   s=9: 18   s=8: 16
#     healthy k = 17   [. . . . . . . . . . . . . . . . . x]   s=16: 16   s=9:  9   s=8: 16
#     healthy k = 15   [. . . . . . . . . . . . . . . x x x]   s=16:  0   s=9:  9   s=8:  8


@pytest.mark.parametrize(
    ("healthy", "size", "spares", "want"),
    [
        pytest.param(18, 16, 0, 16, id="a-full-rack-hosts-one-slice-of-16"),
        pytest.param(17, 16, 0, 16, id="one-failure-still-leaves-room-for-16"),
        pytest.param(15, 16, 0, 0, id="three-failures-leave-no-slice-of-16"),
        pytest.param(18, 9, 0, 18, id="a-full-rack-hosts-two-slices-of-9"),
        pytest.param(17, 9, 0, 9, id="one-failure-costs-a-whole-slice-of-9"),
        pytest.param(18, 16, 2, 16, id="two-spares-do-not-cost-the-slice-of-16"),
        pytest.param(18, 9, 2, 9, id="two-spares-cost-one-slice-of-9"),
        pytest.param(16, 16, 2, 16, id="failures-eat-the-spares-first"),
    ],
)
def test_a_rack_gives_whole_slices_only(healthy: int, size: int, spares: int, want: int) -> None:
    assert rack_usable(healthy, 18, size, spares) == want


@pytest.mark.parametrize(
    ("p", "size", "want_fraction"),
    [
        pytest.param(0.0, 16, 16 / 18, id="no-failures-slices-of-16-leave-two-nodes-per-rack"),
        pytest.param(0.0, 18, 1.0, id="no-failures-slices-of-18-use-every-node"),
        pytest.param(1.0, 16, 0.0, id="every-node-down-nothing-is-usable"),
        pytest.param(1.0, 1, 0.0, id="every-node-down-even-single-nodes-are-unusable"),
        pytest.param(0.02, 1, 0.98, id="slices-of-one-node-lose-exactly-the-failed-nodes"),
        pytest.param(0.02, 18, 0.98**18, id="rack-sized-slices-need-every-node-of-the-rack"),
    ],
)
def test_edge_cases_of_the_exact_model(p: float, size: int, want_fraction: float) -> None:
    got = usable_nodes(128, 18, p, size)
    assert got == pytest.approx(128 * 18 * want_fraction, abs=1e-9)


@pytest.mark.parametrize(
    ("size", "spares", "want"),
    [
        pytest.param(19, 0, "cannot fit in one rack of 18 nodes", id="slice-larger-than-the-rack"),
        pytest.param(17, 2, "after keeping 2 spares", id="slice-larger-than-the-rack-less-spares"),
        pytest.param(0, 0, "at least 1", id="slice-of-zero-nodes"),
    ],
)
def test_a_slice_that_cannot_fit_a_rack_is_a_clear_error(size: int, spares: int, want: str) -> None:
    with pytest.raises(CapacityError, match=want):
        usable_nodes(4, 18, 0.01, size, spares)


@pytest.mark.parametrize("p", [-0.1, 1.5, math.nan], ids=["negative", "above-one", "nan"])
def test_an_unavailability_outside_zero_and_one_is_refused(p: float) -> None:
    with pytest.raises(CapacityError, match="probability"):
        usable_nodes(4, 18, p, 16)


@pytest.mark.parametrize(
    ("racks", "n", "p", "sizes"),
    [
        pytest.param(128, 18, 0.02, (8, 9, 16, 18), id="gb200-128-at-2-percent"),
        pytest.param(16, 18, 0.10, (8, 9, 16, 18), id="a-bad-day-at-10-percent"),
        pytest.param(32, 8, 0.05, (1, 3, 8), id="small-racks-of-8"),
    ],
)
def test_the_exact_model_agrees_with_monte_carlo_within_sampling_error(
    racks: int, n: int, p: float, sizes: tuple[int, ...]
) -> None:
    trials = 4000
    sampled = monte_carlo_usable(racks, n, p, sizes, trials=trials, seed=11)
    for s in sizes:
        exact = usable_nodes(racks, n, p, s)
        # Per rack the usable count is bounded by n, so its variance is at most n^2 / 4; the
        # mean over trials of R racks has a standard error below n * sqrt(R / trials) / 2.
        stderr = n * math.sqrt(racks / trials) / 2
        assert abs(sampled[s] - exact) < 4 * stderr, (s, sampled[s], exact)


def test_monte_carlo_is_deterministic_for_a_seed() -> None:
    a = monte_carlo_usable(16, 18, 0.05, (16,), trials=200, seed=3)
    b = monte_carlo_usable(16, 18, 0.05, (16,), trials=200, seed=3)
    assert a == b


def test_the_report_names_the_best_slice_size_and_its_advantage_over_each_other() -> None:
    report = capacity_report(128, 18, 0.02, (8, 9, 16, 18), trials=100, seed=1)
    assert report.best_slice_size == 8
    gains = {a.slice_size: a for a in report.advantage}
    assert set(gains) == {9, 16, 18}
    by_size = {r.slice_size: r for r in report.results}
    for s, a in gains.items():
        assert a.extra_nodes == pytest.approx(by_size[8].usable_nodes - by_size[s].usable_nodes)
        assert a.extra_fraction == pytest.approx(a.extra_nodes / by_size[s].usable_nodes)
    assert all(r.monte_carlo is not None for r in report.results)


def test_an_advantage_over_a_size_that_gives_nothing_has_no_fraction() -> None:
    report = capacity_report(4, 18, 1.0, (1, 18))
    assert report.advantage[0].extra_fraction is None


def test_unavailability_comes_from_mtbi_and_mttr() -> None:
    assert unavailability_from(490, 10) == pytest.approx(0.02)
    with pytest.raises(CapacityError):
        unavailability_from(0, 0)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("0:0.1:0.05", [0.0, 0.05, 0.1], id="stop-is-included"),
        pytest.param("0.01:0.01:0.01", [0.01], id="one-point"),
        pytest.param("0:0.3:0.1", [0.0, 0.1, 0.2, 0.3], id="no-float-drift-at-the-end"),
    ],
)
def test_a_sweep_lists_the_probabilities_from_start_to_stop(text: str, want: list[float]) -> None:
    assert parse_sweep(text) == pytest.approx(want)


@pytest.mark.parametrize("text", ["0:1", "a:b:c", "0:0.1:0", "0.2:0.1:0.01", "0:2:0.5"])
def test_a_bad_sweep_is_refused(text: str) -> None:
    with pytest.raises(CapacityError):
        parse_sweep(text)
