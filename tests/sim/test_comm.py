"""The communication model: what a slice across racks costs each step."""

from __future__ import annotations

import pytest

from rackplane.sim import CommModel

# A slice of 16 nodes laid over two racks of 18, and what its TP/EP collectives see:
#
#     rack A  [s s s s s s s s . . . . . . . . . .]    8 nodes of the slice
#     rack B  [s s s s s s s s . . . . . . . . . .]    8 nodes: half the pairs cross racks


def test_nvlink_gives_18_times_the_bandwidth_of_infiniband() -> None:
    assert CommModel().ratio == pytest.approx(18.0)


@pytest.mark.parametrize(
    ("counts", "want"),
    [
        pytest.param([16], 0.0, id="a-rack-local-slice-pays-nothing"),
        pytest.param([8, 8], 0.018 * 8, id="halves-run-collectives-9x-slower"),
        pytest.param([15, 1], 0.018 * (18 * (1 - (15 / 16) ** 2 - (1 / 16) ** 2) - 1), id="15-1"),
        pytest.param([1], 0.0, id="a-single-node-slice"),
        pytest.param([4, 4, 4, 4], 0.018 * (18 * 0.75 - 1), id="four-ways"),
    ],
)
def test_the_penalty_grows_with_the_share_of_traffic_that_crosses_racks(
    counts: list[int], want: float
) -> None:
    assert CommModel().slice_penalty(counts) == pytest.approx(want)


def test_the_default_reproduces_the_design_measurement_of_1_59_vs_1_39_seconds() -> None:
    # 128 nodes first fit over racks of 18: the worst of the 8 slices is cut 8/8.
    assert 1 + CommModel().slice_penalty([8, 8]) == pytest.approx(1.59 / 1.39, abs=0.002)


def test_a_job_is_as_slow_as_its_slowest_slice() -> None:
    rack_of = {f"a{i}": "A" for i in range(16)} | {f"b{i}": "B" for i in range(16)}
    local = [f"a{i}" for i in range(16)]
    split = [f"a{i}" for i in range(8)] + [f"b{i}" for i in range(8)]
    m = CommModel(collective_share=0.1)
    assert m.job_penalty([local], rack_of) == 0.0
    assert m.job_penalty([local, split], rack_of) == pytest.approx(0.8)
