"""The GPU Manager's rules, one table row per rule, and the incident and hysteresis behaviour.

Every case feeds the same reading twice (one second apart): a verdict worse than healthy needs
two readings (`HealthRules.confirm`), which the last tests check on their own.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from rackplane.models import Health, NodeTelemetry, XidAction
from rackplane.policies import GpuHealthRules, HealthRules, NodeHealthState, step
from rackplane.policies.gpu_health import repaired
from rackplane.policies.health import Verdict
from rackplane.policies.xid import default_table
from tests.gpu._samples import gpu, node, sick

H = Health


def fold(samples: list[NodeTelemetry], **overrides: XidAction) -> list[Verdict]:
    rules = GpuHealthRules()
    xid_actions = {int(k.removeprefix("xid")): v for k, v in overrides.items()}
    return [rules.classify(s, overrides=xid_actions) for s in samples]


@pytest.mark.parametrize(
    ("readings", "want", "want_evidence"),
    [
        pytest.param({}, H.HEALTHY, "", id="healthy-gpu-at-work"),
        pytest.param({"fallen_off_bus": True}, H.FAILED, "fell off the bus", id="fallen-off-bus"),
        pytest.param({"ecc_uncorrected": 2}, H.FAILED, "2 uncorrectable ECC", id="volatile-dbe"),
        pytest.param({"ecc_uncorrected_aggregate": 5}, H.HEALTHY, "", id="aggregate-dbe-is-old"),
        pytest.param({"ecc_corrected": 10_000}, H.HEALTHY, "", id="corrected-ecc-is-fine"),
        pytest.param({"remap_failure": True}, H.FAILED, "row remapping failed", id="remap-failure"),
        pytest.param({"remap_pending": True}, H.DEGRADED, "remap pending", id="remap-pending"),
        pytest.param({"remap_failure": False, "remap_pending": False}, H.HEALTHY, "",
                     id="remapper-clean"),
        pytest.param({"retired_pages_pending": True}, H.DEGRADED, "retirement pending",
                     id="page-retirement-pending"),
        pytest.param({"clock_event_reasons": 0x40}, H.DEGRADED, "HW thermal slowdown",
                     id="hw-thermal-slowdown"),
        pytest.param({"clock_event_reasons": 0x80}, H.DEGRADED, "power brake", id="hw-power-brake"),
        pytest.param({"clock_event_reasons": 0x8}, H.DEGRADED, "HW slowdown", id="hw-slowdown"),
        pytest.param({"clock_event_reasons": 0x4, "power_w": 698.0, "gpu_util_pct": 100.0},
                     H.HEALTHY, "", id="sw-power-cap-under-load-is-normal"),
        pytest.param({"clock_event_reasons": 0x20}, H.HEALTHY, "", id="sw-thermal-is-normal"),
        pytest.param({"clock_event_reasons": 0x1}, H.HEALTHY, "", id="idle"),
        pytest.param({"nvlink_down": 1, "nvlink_up": 17}, H.DEGRADED, "1 NVLink links down",
                     id="one-nvlink-down"),
        pytest.param({"nvlink_down": 0, "nvlink_up": 18}, H.HEALTHY, "", id="nvlink-all-up"),
        pytest.param({"temperature_c": 91.0}, H.DEGRADED, "at 91 C", id="hot"),
        pytest.param({"temperature_c": None, "power_w": None}, H.HEALTHY, "",
                     id="unsupported-readings-fire-nothing"),
        pytest.param({"xid": 48}, H.FAILED, "XID 48", id="xid-dbe"),
        pytest.param({"xid": 13}, H.HEALTHY, "", id="xid-app-error"),
        pytest.param({"xids": (79,)}, H.FAILED, "XID 79", id="xid-event-fallen-off-bus"),
        pytest.param({"xid": 0}, H.HEALTHY, "", id="dcgm-xid-zero-is-none"),
    ],
)  # fmt: skip
def test_each_rule_gives_its_verdict_with_the_evidence(
    readings: dict[str, Any], want: Health, want_evidence: str
) -> None:
    verdicts = fold([sick(0, **readings), sick(1, **readings)])
    assert verdicts[-1].health is want
    assert want_evidence in verdicts[-1].cause
    if want_evidence:
        assert "GPU 2" in verdicts[-1].cause


def test_a_single_transient_failed_reading_declares_nothing() -> None:
    verdicts = fold([node(0), sick(1, ecc_uncorrected=1), *(node(s) for s in range(2, 400))])
    assert {v.health for v in verdicts} == {H.HEALTHY}


def test_two_failed_readings_within_the_window_fail_the_node() -> None:
    verdicts = fold([sick(0, fallen_off_bus=True), node(60), sick(120, fallen_off_bus=True)])
    assert [v.health for v in verdicts] == [H.HEALTHY, H.HEALTHY, H.FAILED]


def test_failed_readings_further_apart_than_the_window_are_each_transient() -> None:
    verdicts = fold([sick(0, fallen_off_bus=True), node(1), sick(301, fallen_off_bus=True)])
    assert verdicts[-1].health is H.HEALTHY


def test_a_failed_node_stays_failed_until_repaired() -> None:
    rules = GpuHealthRules()
    for s in (sick(0, xid=79), sick(1, xid=79)):
        rules.classify(s)
    assert rules.classify(sick(3_600, xid=79)).health is H.FAILED  # DCGM: still the last XID
    rules.forget("c1", "r01-n01")
    # The sticky DCGM XID 79 of before the repair is not a new incident.
    assert rules.classify(sick(3_601, xid=79)).health is H.HEALTHY
    assert rules.classify(sick(3_602, xid=79)).health is H.HEALTHY


def test_degraded_comes_back_to_healthy_after_ten_clean_minutes() -> None:
    hot = [sick(s, temperature_c=95.0) for s in (0, 1)]
    clean = [node(s) for s in range(2, 800, 10)]
    verdicts = fold([*hot, *clean])
    changes = [
        (v.health, i) for i, v in enumerate(verdicts) if i and v.health != verdicts[i - 1].health
    ]
    assert [h for h, _ in changes] == [H.DEGRADED, H.HEALTHY]
    back = changes[1][1]
    assert clean[back - 2].at - clean[0].at >= timedelta(minutes=10)
    assert "clean since" in verdicts[back].cause


def test_degraded_then_failed_is_the_escalation_path() -> None:
    samples = [
        sick(0, nvlink_down=2), sick(10, nvlink_down=2),
        sick(20, nvlink_down=2, xid=74), sick(30, nvlink_down=2, xid=74),
    ]  # fmt: skip
    assert [v.health for v in fold(samples)] == [H.HEALTHY, H.DEGRADED, H.DEGRADED, H.FAILED]


def test_xids_of_one_incident_are_grouped_until_three_minutes_of_silence() -> None:
    table = default_table()
    state = NodeHealthState()
    # 94 (restart app) then 48 (reset GPU) 2 minutes later on another GPU: one incident.
    for s in (sick(0, xids=(94,)), node(120, gpu(0, xids=(48,)), gpu(1))):
        state, _ = step(state, s, table)
    assert state.incident is not None
    assert state.incident.xids == ((2, 94), (0, 48)) and state.incident.worst == 48
    assert state.incident.action is XidAction.RESET_GPU
    # Still open 2:59 after the last XID; closed after 3 minutes of silence.
    state, _ = step(state, node(120 + 179), table)
    assert state.incident is not None
    state, _ = step(state, node(120 + 181), table)
    assert state.incident is None


def test_a_later_xid_after_silence_opens_a_new_incident() -> None:
    table = default_table()
    state = NodeHealthState()
    for s in (sick(0, xids=(13,)), sick(200, xids=(31,))):
        state, _ = step(state, s, table)
    assert state.incident is not None and state.incident.first_at == sick(200).at


def test_recurring_app_fault_incidents_degrade_the_node() -> None:
    # An app-fault XID every 10 minutes, samples every 30 s: the third incident degrades.
    samples = [sick(s, xids=(13,)) if s % 600 == 0 else node(s) for s in range(0, 1260, 30)]
    verdicts = fold(samples)
    assert [v.health for v in verdicts[:-1]].count(H.DEGRADED) == 0
    assert verdicts[-1].health is H.DEGRADED and "3 XID incidents" in verdicts[-1].cause


def test_the_operator_override_from_the_cluster_file_changes_the_verdict() -> None:
    samples = [sick(0, xid=94), sick(1, xid=94)]
    assert fold(samples)[-1].health is H.HEALTHY
    assert fold(samples, xid94=XidAction.REBOOT_NODE)[-1].health is H.FAILED


def test_the_controllers_failed_view_is_kept() -> None:
    rules = GpuHealthRules()
    assert rules.classify(node(0), known=H.FAILED).health is H.FAILED


def test_repaired_keeps_only_the_sticky_xids() -> None:
    state = NodeHealthState(health=H.FAILED, last_xid=((1, 79),), evidence=("x",))
    assert repaired(state) == NodeHealthState(last_xid=((1, 79),))


def test_thresholds_are_settable() -> None:
    rules = GpuHealthRules(rules=HealthRules(hot_c=70.0, confirm=1))
    assert rules.classify(sick(0, temperature_c=75.0)).health is H.DEGRADED


def test_the_controllers_view_going_from_failed_to_healthy_is_a_repair() -> None:
    rules = GpuHealthRules()
    for s, known in ((sick(0, xid=79), H.HEALTHY), (sick(1, xid=79), H.HEALTHY)):
        rules.classify(s, known=known)
    # Our report is in flight: the controller still says healthy; the verdict stays failed.
    assert rules.classify(sick(2, xid=79), known=H.HEALTHY).health is H.FAILED
    assert rules.classify(sick(3, xid=79), known=H.FAILED).health is H.FAILED
    # Repaired: the controller says healthy again; the sticky XID 79 is not new.
    assert rules.classify(sick(4, xid=79), known=H.HEALTHY).health is H.HEALTHY


def test_a_repair_in_the_controllers_view_starts_the_node_over_whatever_was_seen() -> None:
    """The manager failed the node itself and never classified a sample while the controller
    said failed (its replica was rebuilt after the repair): the repair's seq in the view is
    what it goes by, and a newer one starts the node over."""
    rules = GpuHealthRules()
    for s in (sick(0, xid=79), sick(1, xid=79)):
        rules.classify(s, known=H.HEALTHY)
    assert rules.classify(sick(2, xid=79), known=H.HEALTHY).health is H.FAILED  # in flight
    hot = {"xid": 79, "temperature_c": 95.0}
    assert rules.classify(sick(3, **hot), known=H.HEALTHY, repaired_at=7).health is H.HEALTHY
    assert rules.classify(sick(4, **hot), known=H.HEALTHY, repaired_at=7).health is H.DEGRADED
    assert rules.states[("c1", "r01-n01")].repair == 7
    # The same repair seen again changes nothing; the next one starts over again.
    assert rules.classify(sick(5, **hot), known=H.HEALTHY, repaired_at=7).health is H.DEGRADED
    assert rules.classify(sick(6, **hot), known=H.HEALTHY, repaired_at=9).health is H.HEALTHY


def test_the_evidence_of_a_very_sick_node_fits_a_command() -> None:
    gpus = tuple(gpu(i, temperature_c=99.0, nvlink_down=4, remap_pending=True) for i in range(64))
    verdicts = fold([node(0, *gpus), node(1, *gpus)])
    assert verdicts[-1].health is H.DEGRADED
    assert len(verdicts[-1].cause) <= 1_000 and "findings in all" in verdicts[-1].cause
    assert len(verdicts[-1].evidence) == 64 * 3


def test_a_last_xid_that_cleared_and_comes_back_is_a_new_incident() -> None:
    table = default_table()
    state = NodeHealthState()
    for s in (sick(0, xid=79), sick(1, xid=79), sick(300, xid=None), sick(600, xid=79)):
        state, _ = step(state, s, table)
    assert state.incident is not None and state.incident.first_at == sick(600).at
