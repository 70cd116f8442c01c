"""The capacity sample's sums patched for the racks changed since the last sample equal the
sums over every rack: after failed counts alone change, and at every sample of a run with
failures, repairs and rack faults."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from rackplane.models import RackHealth, ReportRackHealth
from rackplane.sim import GeneratedCluster, ScenarioDoc, build_scenario
from rackplane.sim._metrics import Collector
from rackplane.sim._rack_sums import RackSums, rebuilt_sums
from rackplane.sim.simulator import Simulation
from tests.builders import Harness, cmd, rack, register


def test_failed_counts_alone_change_the_sums() -> None:
    """Rack r01's failed nodes rise past its spares with no event (the nodes were busy):
    only the failed counts say so."""
    h = Harness().given(register(rack("r01", 6), rack("r02", 6), spares_per_rack=1, slice_size=2))
    sums = RackSums()
    down: Counter[str] = Counter()
    assert sums.sums(h.state, down) == rebuilt_sums(h.state, down)
    for failed in (1, 2, 4, 0):
        down["r01"] = failed
        assert sums.sums(h.state, down) == rebuilt_sums(h.state, down)
    assert sums.sums(h.state, {"r02": 3}) == rebuilt_sums(h.state, {"r02": 3})
    assert rebuilt_sums(h.state, {"r01": 4}) != rebuilt_sums(h.state, {})  # they count


def test_a_rack_fault_changes_the_sums() -> None:
    h = Harness().given(register(rack("r01", 6), rack("r02", 6), spares_per_rack=1, slice_size=2))
    sums = RackSums()
    before = sums.sums(h.state, {})
    h.when(cmd(ReportRackHealth, rack="r02", health=RackHealth.FAILED))
    after = sums.sums(h.state, {})
    assert after == rebuilt_sums(h.state, {}) != before


def test_every_sample_of_a_run_equals_the_sum_over_every_rack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked: list[tuple[int, int]] = []
    sample = Collector.sample

    def checking(self: Collector, state: Any, down: Any) -> None:
        sample(self, state, down)
        if self.active:
            got = (self.rack_sums.usable, self.rack_sums.fragmented)
            assert got == rebuilt_sums(state, down)
            checked.append(got)

    monkeypatch.setattr(Collector, "sample", checking)
    doc = ScenarioDoc(cluster=GeneratedCluster(name="sums", racks=16), days=20, seed=3)
    scenario = build_scenario(doc.model_copy(update={"policies": ("tas+spares+defrag+ntp",)}))
    Simulation(scenario, "tas+spares+defrag+ntp").run()
    assert len(checked) > 400
    assert len(set(checked)) > 10  # the sums moved: racks filled, failed and were repaired
