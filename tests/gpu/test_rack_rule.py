"""The GPU Manager's rack rule: NVLink-fabric XIDs on several nodes of one rack fail the rack.

    rack r01: n01 n02 n03 ...     rack r02: n01 ...
              |   |   |                     |
          [NVSwitch trays r01]          [NVSwitch trays r02]

Two compute trays of one rack share only the rack's NVSwitch trays over NVLink: the same kind
of NVLink error on both within one incident (3 minutes) is the rack's, not theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from rackplane.models import Health, NodeTelemetry, RackHealth, XidAction
from rackplane.policies import GpuHealthRules
from rackplane.policies._rack_rules import RackRules
from rackplane.policies.health import Verdict
from rackplane.policies.xid import default_table, fabric_xids
from tests.gpu._samples import gpu, node

H, R = Health, RackHealth


def on(name: str, seconds: float, **gpu1: Any) -> NodeTelemetry:
    """A sample of node `name` (`r01-n01`: rack r01) with GPU 1's `gpu1` readings."""
    return node(seconds, *(gpu(i, **(gpu1 if i == 1 else {})) for i in range(4)), name=name)


@dataclass
class Manager:
    """The classifier with a controller's view of nodes and racks it keeps up to date itself."""

    rules: GpuHealthRules = field(default_factory=GpuHealthRules)
    nodes: dict[str, Health] = field(default_factory=dict)
    racks: dict[str, RackHealth] = field(default_factory=dict)
    verdicts: list[tuple[str, Verdict]] = field(default_factory=list)

    def feed(self, *samples: NodeTelemetry, **overrides: XidAction) -> None:
        actions = {int(k.removeprefix("xid")): v for k, v in overrides.items()}
        for s in samples:
            rack = s.node.split("-")[0]
            v = self.rules.classify(
                s,
                known=self.nodes.get(s.node, H.HEALTHY),
                overrides=actions,
                rack=(rack, self.racks.get(rack, R.HEALTHY)),
            )
            self.verdicts.append((s.node, v))

    def take(self) -> None:
        """The controller applies every verdict so far (as the gpu_manager agent sends them)."""
        for name, v in self.verdicts:
            if v.health is not H.HEALTHY and self.nodes.get(name) is not H.FAILED:
                self.nodes[name] = v.health
            if v.rack is not None:
                self.racks[v.rack.rack] = v.rack.health

    @property
    def rack_verdicts(self) -> list[tuple[str, RackHealth]]:
        return [(v.rack.rack, v.rack.health) for _, v in self.verdicts if v.rack is not None]

    def health_of(self, name: str) -> Health:
        return [v.health for n, v in self.verdicts if n == name][-1]


def test_the_fabric_xids_come_from_nvidias_decode_sheet() -> None:
    # fatal sub-codes with packet loss at the remote end: 144 SAW, 145 RLW, 146 TLW, 149 NETIR;
    # 147 and 148 are only ever ignored, 150 (MSE watchdog) stays on the GPU
    assert fabric_xids() == {144, 145, 146, 149}
    assert all(default_table().policy(x).action is XidAction.RESET_GPU for x in fabric_xids())


def test_two_nodes_of_one_rack_with_nvlink5_xids_within_the_window_fail_the_rack() -> None:
    m = Manager()
    m.feed(on("r01-n01", 0, xid=149), on("r01-n02", 40, xids=(145,)))
    assert m.rack_verdicts == [("r01", R.FAILED)]
    (rack,) = [v.rack for _, v in m.verdicts if v.rack is not None]
    assert rack.cause.startswith("NVLink fabric XIDs on 2 nodes of rack r01 within 0:03:00")
    assert "r01-n01 GPU 1: XID 149 NVLINK_NETIR_ERROR" in rack.cause
    assert "r01-n02 GPU 1: XID 145 NVLINK_RLW_ERROR" in rack.cause
    m.take()
    # the incident stays open for minutes and DCGM's XID is sticky: neither node is failed
    # for the rack's fault, and the rack is reported once
    m.feed(*(on(n, s, xid=149) for s in range(50, 600, 10) for n in ("r01-n01", "r01-n02")))
    m.feed(on("r01-n03", 70, xid=146))  # a third node of the faulted rack, as well
    assert m.rack_verdicts == [("r01", R.FAILED)]
    assert {v.health for _, v in m.verdicts} == {H.HEALTHY}


def test_one_node_alone_is_handled_at_node_level_as_before() -> None:
    m = Manager()
    m.feed(on("r01-n01", 0, xid=149), on("r01-n02", 5), on("r01-n01", 10, xid=149))
    assert m.rack_verdicts == []
    assert m.health_of("r01-n01") is H.FAILED
    assert "XID 149" in m.verdicts[-1][1].cause
    assert m.health_of("r01-n02") is H.HEALTHY


def test_nodes_in_different_racks_make_no_rack_fault() -> None:
    m = Manager()
    m.feed(*(on(n, s, xid=149) for s in (0, 10) for n in ("r01-n01", "r02-n01")))
    assert m.rack_verdicts == []
    assert (m.health_of("r01-n01"), m.health_of("r02-n01")) == (H.FAILED, H.FAILED)


@pytest.mark.parametrize(
    ("first", "second", "seconds_apart"),
    [
        pytest.param({"xid": 149}, {"xid": 149}, 181, id="further-apart-than-the-window"),
        pytest.param({"xid": 79}, {"xid": 79}, 10, id="fallen-off-the-bus-is-the-gpus"),
        pytest.param({"xid": 150}, {"xid": 150}, 10, id="mse-watchdog-stays-on-the-gpu"),
        pytest.param({"xid": 147}, {"xid": 148}, 10, id="xids-nvidia-only-ignores"),
        pytest.param({"nvlink_down": 2}, {"nvlink_down": 2}, 10, id="links-down-are-counters"),
    ],
)  # fmt: skip
def test_evidence_the_rule_does_not_count_makes_no_rack_fault(
    first: dict[str, Any], second: dict[str, Any], seconds_apart: int
) -> None:
    m = Manager()
    m.feed(on("r01-n01", 0, **first), on("r01-n02", seconds_apart, **second))
    assert m.rack_verdicts == []


def test_the_operator_override_of_a_fabric_xid_takes_it_out_of_the_rule() -> None:
    m = Manager()
    samples = [on(n, s, xid=149) for s in (0, 10) for n in ("r01-n01", "r01-n02")]
    m.feed(*samples, xid149=XidAction.RESTART_APP)
    assert m.rack_verdicts == []
    assert {v.health for _, v in m.verdicts} == {H.HEALTHY}


def test_a_node_failing_for_its_own_reason_in_a_faulted_rack_still_fails() -> None:
    m = Manager()
    m.feed(on("r01-n01", 0, xid=149), on("r01-n02", 1, xid=149))
    m.take()
    m.feed(on("r01-n02", 10, xid=149, ecc_uncorrected=3), on("r01-n02", 20, ecc_uncorrected=3))
    assert m.health_of("r01-n02") is H.FAILED
    assert "uncorrectable ECC" in m.verdicts[-1][1].cause and "XID" not in m.verdicts[-1][1].cause


def test_a_rack_the_operator_failed_keeps_its_nodes_from_failing_on_fabric_xids() -> None:
    m = Manager(racks={"r01": R.FAILED})
    m.feed(*(on("r01-n01", s, xid=144) for s in (0, 10, 20)))
    assert m.rack_verdicts == []
    assert m.health_of("r01-n01") is H.HEALTHY


def test_after_the_rack_is_repaired_only_new_evidence_fails_it_again() -> None:
    m = Manager()
    m.feed(on("r01-n01", 0, xid=149), on("r01-n02", 1, xid=149))
    m.take()
    m.feed(on("r01-n01", 60, xid=149), on("r01-n02", 61, xid=149))
    m.racks["r01"] = R.HEALTHY  # the operator: `rackplane rack-health --state healthy`
    m.verdicts.clear()
    # DCGM's last XID still reads 149 on both: seen before the repair, it is no new evidence
    m.feed(*(on(n, s, xid=149) for s in range(3_600, 3_700, 10) for n in ("r01-n01", "r01-n02")))
    assert m.rack_verdicts == []
    assert {v.health for _, v in m.verdicts} == {H.HEALTHY}
    # the fabric fails again, on two other nodes this time (NVML's XID events)
    m.feed(on("r01-n05", 3_800, xids=(149,)), on("r01-n06", 3_801, xids=(146,)))
    assert m.rack_verdicts == [("r01", R.FAILED)]


def test_a_verdict_the_controller_never_took_is_raised_again_on_new_evidence() -> None:
    m = Manager()
    m.feed(on("r01-n01", 0, xids=(149,)), on("r01-n02", 1, xids=(149,)))
    m.feed(on("r01-n01", 100, xids=(149,)), on("r01-n02", 101, xids=(149,)))
    assert m.rack_verdicts == [("r01", R.FAILED)]  # proposed once while it may be in flight
    m.feed(on("r01-n01", 400, xids=(149,)), on("r01-n02", 401, xids=(149,)))
    assert m.rack_verdicts == [("r01", R.FAILED)] * 2


def test_the_rule_is_settable_and_its_cause_fits_a_command() -> None:
    m = Manager(GpuHealthRules(rack_rules=RackRules(nodes=18)))
    m.feed(*(on(f"r01-n{i:02}", i, xid=149) for i in range(1, 18)))
    assert m.rack_verdicts == []
    m.feed(on("r01-n18", 18, xid=149))
    (rack,) = [v.rack for _, v in m.verdicts if v.rack is not None]
    assert "on 18 nodes of rack r01" in rack.cause and len(rack.cause) <= 1_000


def test_without_a_rack_the_classifier_judges_the_node_only() -> None:
    rules = GpuHealthRules()
    verdicts = [rules.classify(on(n, s, xid=149)) for s in (0, 1) for n in ("r01-n01", "r01-n02")]
    assert [v.rack for v in verdicts] == [None] * 4
    assert verdicts[-1].health is H.FAILED
