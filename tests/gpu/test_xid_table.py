"""The XID policy table: one row per XID family, the disputed codes, operator overrides."""

from __future__ import annotations

import pytest

from rackplane.models import Health, XidAction
from rackplane.policies.xid import DISPUTED, default_table, disagreements

A = XidAction


@pytest.mark.parametrize(
    ("code", "want_action", "want_health"),
    [
        pytest.param(13, A.RESTART_APP, Health.HEALTHY, id="graphics-exception-is-the-apps"),
        pytest.param(31, A.RESTART_APP, Health.HEALTHY, id="mmu-page-fault-is-the-apps"),
        pytest.param(43, A.NONE, Health.HEALTHY, id="gpu-stopped-processing-is-ignored"),
        pytest.param(45, A.NONE, Health.HEALTHY, id="preemptive-cleanup-follows-the-other-xid"),
        pytest.param(48, A.RESET_GPU, Health.FAILED, id="double-bit-ecc-resets-the-gpu"),
        pytest.param(64, A.RESET_GPU, Health.FAILED, id="row-remap-failure-resets-the-gpu"),
        pytest.param(92, A.NONE, Health.HEALTHY, id="sbe-interrupt-storm-is-ignored"),
        pytest.param(95, A.RESET_GPU, Health.FAILED, id="uncontained-memory-error"),
        pytest.param(140, A.RESET_GPU, Health.FAILED, id="ecc-escape"),
        pytest.param(74, A.RESET_GPU, Health.FAILED, id="nvlink-error"),
        pytest.param(144, A.RESET_GPU, Health.FAILED, id="nvlink5-saw-error-without-subcode"),
        pytest.param(150, A.RESET_GPU, Health.FAILED, id="nvlink5-family-end"),
        pytest.param(79, A.REBOOT_NODE, Health.FAILED, id="fallen-off-the-bus-reboots"),
        pytest.param(119, A.RESET_GPU, Health.FAILED, id="gsp-rpc-timeout"),
        pytest.param(120, A.RESET_GPU, Health.FAILED, id="gsp-error"),
        pytest.param(154, A.NONE, Health.HEALTHY, id="recovery-action-changed-is-informational"),
        pytest.param(1, A.DRAIN_AND_REPLACE, Health.FAILED, id="contact-support-drains"),
        pytest.param(162, A.RESET_GPU, Health.FAILED, id="fatal-without-nvidia-action"),
        pytest.param(9_999, A.RESET_GPU, Health.FAILED, id="unknown-xid-is-looked-at"),
    ],
)
def test_each_xid_family_maps_to_an_action_and_a_health(
    code: int, want_action: XidAction, want_health: Health
) -> None:
    row = default_table().policy(code)
    assert (row.action, row.health) == (want_action, want_health)


def test_the_table_covers_the_whole_catalog() -> None:
    table = default_table()
    assert len(table) == 172
    assert table.codes()[0] == 1 and table.codes()[-1] == 172


@pytest.mark.parametrize(
    ("code", "want"),
    [
        pytest.param(94, A.RESTART_APP, id="94-contained-error-restarts-the-app"),
        pytest.param(63, A.NONE, id="63-remap-event-is-ignored-counters-decide"),
        pytest.param(160, A.REBOOT_NODE, id="160-channel-retirement-follows-nvsentinel"),
    ],
)
def test_disputed_xids_take_their_documented_default(code: int, want: XidAction) -> None:
    row = default_table().policy(code)
    assert row.action is want and row.source == "disputed"
    assert DISPUTED[code][1]  # the reason is written down


def test_the_two_packaged_sources_disagree_only_where_the_table_says() -> None:
    # NVIDIA's catalog vs NVSentinel: 160 is settled in DISPUTED; 108 follows NVIDIA (ignore).
    assert set(disagreements()) == {108, 160}
    assert default_table().policy(108).action is A.NONE


def test_an_operator_override_replaces_the_default_and_says_so() -> None:
    table = default_table().with_overrides({94: A.REBOOT_NODE, 9_999: A.NONE})
    assert table.policy(94).action is A.REBOOT_NODE and table.policy(94).source == "operator"
    assert table.policy(9_999).health is Health.HEALTHY
    assert default_table().policy(94).action is A.RESTART_APP  # the default is untouched
