"""The DCGM adapter on a real dcgm-exporter scrape and on crafted ones."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rackplane.exporters import convert
from rackplane.models import Health
from rackplane.policies import GpuHealthRules

SAMPLE = Path(__file__).parent.parent / "fixtures" / "dcgm" / "dcgm_exporter_sample.prom"
AT = datetime(2026, 11, 30, 12, tzinfo=UTC)


def scrape(*lines: str, host_label: str = "Hostname") -> str:
    labels = (
        f'gpu="1",UUID="GPU-x",pci_bus_id="00000000:0A:00.0",modelName="NVIDIA H100",'
        f'{host_label}="node7"'
    )
    return "".join(f"{name}{{{labels}}} {value}\n" for name, value in map(str.split, lines))


def test_the_real_scrape_converts_per_host_and_gpu_with_units() -> None:
    out = convert(SAMPLE.read_text(), cluster="c1", at=AT)
    nodes = {s.node: s for s in out.samples}
    assert set(nodes) == {"424773df46e0", "551bdf382151"}
    g = nodes["424773df46e0"].gpus[0]
    assert (g.index, g.uuid, g.model) == (0, "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e", "Tesla T4")
    assert (g.temperature_c, g.power_w, g.sm_clock_mhz, g.mem_clock_mhz) == (
        25.0,
        8.969,
        300.0,
        405.0,
    )
    assert g.xid == 0 and g.xids is None  # DCGM's last XID: 0 = none; no events from DCGM
    assert g.ecc_uncorrected is None  # ECC counters are off in dcgm-exporter's defaults
    assert nodes["551bdf382151"].gpus[0].clock_event_reasons == 1
    assert out.problems == []


def test_placeholder_families_without_a_gpu_label_are_skipped_and_counted() -> None:
    out = convert(SAMPLE.read_text(), cluster="c1", at=AT)
    assert out.skipped["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 1  # the "dummy values" section
    assert all(g.remap_failure is None for s in out.samples for g in s.gpus)


def test_the_real_scrape_is_healthy() -> None:
    rules = GpuHealthRules()
    for _ in range(2):
        verdicts = [
            rules.classify(s) for s in convert(SAMPLE.read_text(), cluster="c1", at=AT).samples
        ]
    assert {v.health for v in verdicts} == {Health.HEALTHY}


@pytest.mark.parametrize("host_label", ["Hostname", "hostname"])
def test_both_hostname_labels_name_the_node(host_label: str) -> None:
    out = convert(scrape("DCGM_FI_DEV_GPU_TEMP 40", host_label=host_label), cluster="c1", at=AT)
    assert out.samples[0].node == "node7"


def test_every_mapped_family_lands_in_its_field() -> None:
    text = scrape(
        "DCGM_FI_DEV_XID_ERRORS 79", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL 2",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL 7", "DCGM_FI_DEV_ROW_REMAP_PENDING 1",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE 0", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS 3",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL 4",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL 5", "DCGM_FI_DEV_POWER_MGMT_LIMIT 700",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS 64",
    )  # fmt: skip
    g = convert(text, cluster="c1", at=AT).samples[0].gpus[0]
    assert (g.index, g.model, g.pci_bus_id) == (1, "NVIDIA H100", "00000000:0A:00.0")
    assert (g.xid, g.ecc_uncorrected, g.ecc_corrected_aggregate) == (79, 2, 7)
    assert (g.remap_pending, g.remap_failure, g.remapped_rows_uncorrectable) == (True, False, 3)
    assert (g.nvlink_errors, g.power_limit_w, g.clock_event_reasons) == (9, 700.0, 64)


def test_a_sticky_dcgm_xid_79_fails_the_node_on_the_second_scrape() -> None:
    rules = GpuHealthRules()
    text = scrape("DCGM_FI_DEV_XID_ERRORS 79")
    first, second = (
        convert(text, cluster="c1", at=AT.replace(second=s)).samples[0] for s in (0, 10)
    )
    assert rules.classify(first).health is Health.HEALTHY  # one reading is not enough
    verdict = rules.classify(second)
    assert verdict.health is Health.FAILED and "XID 79" in verdict.cause


def test_a_negative_or_nan_reading_is_a_problem_not_a_value() -> None:
    out = convert(
        scrape("DCGM_FI_DEV_GPU_TEMP -5", "DCGM_FI_DEV_POWER_USAGE NaN"), cluster="c1", at=AT
    )
    assert len(out.problems) == 2 and "not a reading" in out.problems[0]
    assert out.samples == []


def test_text_that_is_not_an_exposition_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Prometheus text exposition"):
        convert("DCGM_FI_DEV_GPU_TEMP{gpu=0 oops\n", cluster="c1", at=AT)
