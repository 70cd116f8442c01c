"""nvidia-smi captures of a real H200: XML snapshot and a CSV series, idle then under load."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rackplane.exporters import from_csv, from_xml
from rackplane.models import Health
from rackplane.policies import GpuHealthRules

H200 = Path(__file__).parent.parent / "fixtures" / "h200"
AT = datetime(2026, 11, 30, 1, 37, tzinfo=UTC)


def test_the_xml_snapshot_converts_with_units_and_unsupported_fields() -> None:
    s = from_xml((H200 / "nvsmi_q.xml").read_text(), cluster="c1", node="h200", at=AT)
    (g,) = s.gpus
    assert (g.model, g.uuid) == ("NVIDIA H200", "GPU-0a5c4d8e-7831-5743-6549-07f038fb34a1")
    assert (g.temperature_c, g.memory_temperature_c, g.power_limit_w) == (37.0, 34.0, 700.0)
    assert g.clock_event_reasons == 0x1  # idle
    assert (g.remap_pending, g.remap_failure, g.ecc_uncorrected) == (False, False, 0)
    assert g.retired_pages_pending is None  # N/A on the H200: unsupported, not "no"
    assert g.xid is None and g.xids is None


def test_the_csv_series_goes_from_idle_to_full_load_under_the_sw_power_cap() -> None:
    series = from_csv((H200 / "nvsmi_query.csv").read_text(), cluster="c1", node="h200")
    assert len(series) == 66
    loaded = [s.gpus[0] for s in series if (s.gpus[0].gpu_util_pct or 0) >= 98]
    assert len(loaded) >= 20
    assert all(g.clock_event_reasons == 0x4 for g in loaded)
    assert max(g.power_w or 0 for g in loaded) >= 690


def test_a_real_h200_at_full_load_under_the_sw_power_cap_is_healthy() -> None:
    rules = GpuHealthRules()
    series = from_csv((H200 / "nvsmi_query.csv").read_text(), cluster="c1", node="h200")
    assert {rules.classify(s).health for s in series} == {Health.HEALTHY}


def test_a_bad_row_is_refused_with_its_line() -> None:
    text = (H200 / "nvsmi_query.csv").read_text().splitlines()
    bad = "\n".join([text[0], "yesterday, NVIDIA H200"])
    with pytest.raises(ValueError, match="line 2"):
        from_csv(bad, cluster="c1", node="h200")


def test_text_that_is_not_nvidia_smi_xml_is_refused() -> None:
    with pytest.raises(ValueError, match="not nvidia-smi XML"):
        from_xml("<html/>", cluster="c1", node="h200", at=AT)
