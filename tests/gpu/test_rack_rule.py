"""The GPU Manager's rack rule: NVLink-fabric XIDs on several nodes of one rack are the rack's.

    rack r01: n01 n02 n03 ...     rack r02: n01 ...
              |   |   |                     |
          [NVSwitch trays r01]          [NVSwitch trays r02]
           1 2 3 4 5 6 7 8 9             (each GPU: 2 links into each of the 9 trays)

Two compute trays of one rack share only the rack's NVSwitch trays over NVLink: the same kind
of NVLink error on both within one incident (3 minutes) is the rack's, not theirs. Links down
(XID 149) on two nodes: one tray lost, the rack is degraded (8/9 of its bandwidth). The GPUs'
NVLink units failing (XIDs 144-146) on two nodes, or more than a tray's links down: the whole
domain, the rack is failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from rackplane.models import Health, NodeTelemetry, RackHealth, XidAction
from rackplane.policies import GpuHealthRules
from rackplane.policies._rack_rules import RackRules
from rackplane.policies.health import Verdict
from rackplane.policies.xid import default_table, fabric_xids, link_xids
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

    def feed_pair(self, xid: int, at: float = 0, **readings: Any) -> None:
        """`xid` (and `readings`) on GPU 1 of r01-n01, then of r01-n02 30 s later."""
        self.feed(
            on("r01-n01", at, xid=xid, **readings), on("r01-n02", at + 30, xid=xid, **readings)
        )

    @property
    def rack_cause(self) -> str:
        (rack,) = [v.rack for _, v in self.verdicts if v.rack is not None]
        return rack.cause

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


def test_the_link_xids_are_the_fabric_xids_of_a_link_going_down() -> None:
    # 149 NETIR's reset sub-codes are "Link Fatal" (NETIR_LINK_DOWN, investigate the peer
    # device: the switch port); 144-146 are fatal errors of the GPUs' NVLink units
    assert link_xids() == {149}


def test_two_nodes_of_one_rack_with_domain_xids_within_the_window_fail_the_rack() -> None:
    m = Manager()
    m.feed(on("r01-n01", 0, xid=146), on("r01-n02", 40, xids=(145,)))
    assert m.rack_verdicts == [("r01", R.FAILED)]
    cause = m.rack_cause
    assert cause.startswith("NVLink fabric XIDs on 2 nodes of rack r01 within 0:03:00")
    assert "the whole NVLink domain" in cause
    assert "r01-n01 GPU 1: XID 146 NVLINK_TLW_ERROR" in cause
    assert "r01-n02 GPU 1: XID 145 NVLINK_RLW_ERROR" in cause
    m.take()
    # the incident stays open for minutes and DCGM's XID is sticky: neither node is failed
    # for the rack's fault, and the rack is reported once
    m.feed(*(on(n, s, xid=146) for s in range(50, 600, 10) for n in ("r01-n01", "r01-n02")))
    m.feed(on("r01-n03", 70, xid=144))  # a third node of the faulted rack, as well
    assert m.rack_verdicts == [("r01", R.FAILED)]
    assert {v.health for _, v in m.verdicts} == {H.HEALTHY}


# One NVSwitch tray lost: every GPU keeps 16 of its 18 links, and says so with XID 149 (link
# down) and 2 links down. The rack is degraded; its nodes keep their work and stay usable.


def test_two_nodes_of_one_rack_with_links_down_degrade_the_rack_not_the_nodes() -> None:
    m = Manager()
    m.feed_pair(149, nvlink_down=2, nvlink_up=16)
    assert m.rack_verdicts == [("r01", R.DEGRADED)]
    assert "one NVSwitch tray (link-down XIDs only): degraded" in m.rack_cause
    m.take()
    # the other 16 nodes report the same loss: no new verdict, and no node is judged for it
    m.feed(
        *(
            on(f"r01-n{i:02}", s, xid=149, nvlink_down=2, nvlink_up=16)
            for s in range(40, 700, 20)
            for i in range(1, 19)
        )
    )
    assert m.rack_verdicts == [("r01", R.DEGRADED)]
    assert {v.health for _, v in m.verdicts} == {H.HEALTHY}


def test_links_down_beyond_one_tray_on_two_nodes_fail_the_rack() -> None:
    m = Manager()
    m.feed_pair(149, nvlink_down=4, nvlink_up=14)  # 4 of 18: two trays' links
    assert m.rack_verdicts == [("r01", R.FAILED)]
    assert "links down beyond one tray" in m.rack_cause


def test_a_degraded_rack_whose_domain_fails_next_is_failed_once() -> None:
    m = Manager()
    m.feed(on("r01-n01", 0, xid=149), on("r01-n02", 10, xid=149))
    m.take()
    m.feed(on("r01-n03", 60, xids=(146,)))  # one node's NVLink unit: that node's, for now
    assert m.rack_verdicts == [("r01", R.DEGRADED)]
    m.feed(on("r01-n04", 90, xids=(144,)))  # a second one: the domain
    assert m.rack_verdicts == [("r01", R.DEGRADED), ("r01", R.FAILED)]
    m.take()
    m.feed(*(on(n, s, xid=146) for s in (120, 130) for n in ("r01-n03", "r01-n04")))
    assert m.rack_verdicts == [("r01", R.DEGRADED), ("r01", R.FAILED)]
    assert m.health_of("r01-n03") is H.HEALTHY and m.health_of("r01-n04") is H.HEALTHY


def test_a_domain_xid_on_one_node_of_a_degraded_rack_still_fails_that_node() -> None:
    m = Manager(racks={"r01": R.DEGRADED})
    m.feed(*(on("r01-n01", s, xid=146) for s in (0, 10)))
    assert m.rack_verdicts == []
    assert m.health_of("r01-n01") is H.FAILED


def test_a_rack_the_operator_degraded_keeps_its_nodes_from_failing_on_link_xids() -> None:
    m = Manager(racks={"r01": R.DEGRADED})
    m.feed(*(on("r01-n01", s, xid=149, nvlink_down=2, nvlink_up=16) for s in (0, 10, 20)))
    assert m.rack_verdicts == []
    assert m.health_of("r01-n01") is H.HEALTHY


def test_a_failed_rack_the_operator_brings_back_degraded_is_judged_from_there() -> None:
    m = Manager()
    m.feed(on("r01-n01", 0, xid=146), on("r01-n02", 1, xid=146))
    m.take()
    m.feed(on("r01-n01", 10, xid=146))
    m.racks["r01"] = R.DEGRADED  # the operator: two trays replaced, one still out
    m.verdicts.clear()
    m.feed(on("r01-n05", 3_600, xids=(149,)), on("r01-n06", 3_601, xids=(149,)))
    assert m.rack_verdicts == []  # degraded already
    m.feed(on("r01-n07", 3_700, xids=(145,)), on("r01-n08", 3_701, xids=(146,)))
    assert m.rack_verdicts == [("r01", R.FAILED)]


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
    m.feed(on("r01-n01", 0, xid=145), on("r01-n02", 1, xid=145))
    m.take()
    m.feed(on("r01-n01", 60, xid=145), on("r01-n02", 61, xid=145))
    m.racks["r01"] = R.HEALTHY  # the operator: `rackplane rack-health --state healthy`
    m.verdicts.clear()
    # DCGM's last XID still reads 145 on both: seen before the repair, it is no new evidence
    m.feed(*(on(n, s, xid=145) for s in range(3_600, 3_700, 10) for n in ("r01-n01", "r01-n02")))
    assert m.rack_verdicts == []
    assert {v.health for _, v in m.verdicts} == {H.HEALTHY}
    # the fabric fails again, on two other nodes this time (NVML's XID events)
    m.feed(on("r01-n05", 3_800, xids=(144,)), on("r01-n06", 3_801, xids=(146,)))
    assert m.rack_verdicts == [("r01", R.FAILED)]


@pytest.mark.parametrize(
    ("xid", "want"), [(146, R.FAILED), (149, R.DEGRADED)], ids=["failed", "degraded"]
)
def test_a_verdict_the_controller_never_took_is_raised_again_on_new_evidence(
    xid: int, want: RackHealth
) -> None:
    m = Manager()
    m.feed(on("r01-n01", 0, xids=(xid,)), on("r01-n02", 1, xids=(xid,)))
    m.feed(on("r01-n01", 100, xids=(xid,)), on("r01-n02", 101, xids=(xid,)))
    assert m.rack_verdicts == [("r01", want)]  # proposed once while it may be in flight
    m.feed(on("r01-n01", 400, xids=(xid,)), on("r01-n02", 401, xids=(xid,)))
    assert m.rack_verdicts == [("r01", want)] * 2


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
