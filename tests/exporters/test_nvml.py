"""The NVML exporter against a fake NVML that replays the real H200 capture."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rackplane.exporters import NvmlSampler
from rackplane.models import Health
from rackplane.policies import GpuHealthRules
from tests.exporters.fake_nvml import FakeNvml

H200_UUID = "GPU-0a5c4d8e-7831-5743-6549-07f038fb34a1"


def replay(fake: FakeNvml) -> list:
    sampler = NvmlSampler("c1", "h200-node", nvml=fake)
    out = []
    while True:
        sampler.wait_events(0)
        out.append(sampler.sample(datetime.fromtimestamp(fake.row["t"], UTC)))
        if not fake.step():
            break
    sampler.close()
    return out


def test_every_reading_of_the_capture_becomes_a_sample_with_real_units() -> None:
    samples = replay(FakeNvml())
    assert len(samples) == 29
    g = samples[0].gpus[0]
    assert (g.uuid, g.model, g.pci_bus_id) == (H200_UUID, "NVIDIA H200", "00000000:00:06.0")
    assert g.power_w == pytest.approx(88.073) and g.power_limit_w == 700.0  # mW -> W
    assert g.temperature_c == 36.0 and g.sm_clock_mhz == 345.0 and g.mem_clock_mhz == 3201.0
    assert (g.ecc_uncorrected, g.ecc_corrected, g.ecc_uncorrected_aggregate) == (0, 0, 0)
    assert (g.remapped_rows_correctable, g.remapped_rows_uncorrectable) == (0, 0)
    assert (g.remap_pending, g.remap_failure) == (False, False)
    assert g.xids == ()  # event sets work on this GPU; no XID happened


def test_what_the_h200_does_not_support_is_recorded_as_unsupported_never_zero() -> None:
    g = replay(FakeNvml())[-1].gpus[0]
    # No NVLink peers on this single-GPU machine; it remaps rows instead of retiring pages.
    assert (g.nvlink_up, g.nvlink_down, g.nvlink_errors) == (None, None, None)
    assert (g.retired_pages_sbe, g.retired_pages_dbe, g.retired_pages_pending) == (None,) * 3
    assert g.pcie_replay == 6


def test_the_h200_at_full_load_under_the_sw_power_cap_is_healthy() -> None:
    samples = replay(FakeNvml())
    loaded = [s for s in samples if (s.gpus[0].gpu_util_pct or 0) >= 100]
    assert len(loaded) >= 10
    assert all(s.gpus[0].clock_event_reasons == 0x4 for s in loaded)  # SW power cap active
    assert max(s.gpus[0].power_w or 0 for s in loaded) > 690
    rules = GpuHealthRules()
    assert {rules.classify(s).health for s in samples} == {Health.HEALTHY}


def test_xid_events_go_with_the_next_sample_only() -> None:
    fake = FakeNvml()
    sampler = NvmlSampler("c1", "n", nvml=fake)
    fake.inject_xid(0, 79)
    fake.inject_xid(0, 45)
    sampler.wait_events(0.01)
    at = datetime(2026, 11, 30, tzinfo=UTC)
    assert sampler.sample(at).gpus[0].xids == (79, 45)
    assert sampler.sample(at).gpus[0].xids == ()


def test_a_gpu_that_is_lost_is_reported_fallen_off_the_bus() -> None:
    fake = FakeNvml()
    sampler = NvmlSampler("c1", "n", nvml=fake)
    fake.lose_gpu()
    g = sampler.sample(datetime(2026, 11, 30, tzinfo=UTC)).gpus[0]
    assert g.fallen_off_bus and g.temperature_c is None and g.uuid is None


def test_without_event_sets_xids_are_unsupported() -> None:
    fake = FakeNvml()
    fake.static["supported_event_types"] = 0
    g = NvmlSampler("c1", "n", nvml=fake).sample(datetime(2026, 11, 30, tzinfo=UTC)).gpus[0]
    assert g.xids is None
