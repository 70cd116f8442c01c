"""Rack and cluster interruption rates from the node MTBI."""

from __future__ import annotations

import pytest

from rackplane.sim import reliability


def test_the_design_figures_490_days_18_nodes_128_racks() -> None:
    r = reliability(490, 18, 128)
    assert r.rack_mtbi_days == pytest.approx(27.2, abs=0.05)
    assert r.cluster_hours_between_rack_interruptions == pytest.approx(5.1, abs=0.05)
    assert r.rack_interruptions_per_day == pytest.approx(128 / (490 / 18))


@pytest.mark.parametrize(
    ("mtbi", "nodes", "racks", "want_rack_days", "want_hours"),
    [
        pytest.param(490, 1, 1, 490, 490 * 24, id="one-node-is-its-own-rack"),
        pytest.param(365, 18, 1, 365 / 18, 365 / 18 * 24, id="one-rack"),
        pytest.param(490, 18, 1024, 490 / 18, 490 / 18 * 24 / 1024, id="1024-racks"),
    ],
)
def test_rates_scale_with_nodes_and_racks(
    mtbi: float, nodes: int, racks: int, want_rack_days: float, want_hours: float
) -> None:
    r = reliability(mtbi, nodes, racks)
    assert r.rack_mtbi_days == pytest.approx(want_rack_days)
    assert r.cluster_hours_between_rack_interruptions == pytest.approx(want_hours)


@pytest.mark.parametrize(("mtbi", "nodes", "racks"), [(0, 18, 1), (490, 0, 1), (490, 18, 0)])
def test_nonsense_inputs_are_refused(mtbi: float, nodes: int, racks: int) -> None:
    with pytest.raises(ValueError, match=r"MTBI|rack"):
        reliability(mtbi, nodes, racks)
