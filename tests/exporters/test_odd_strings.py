"""Odd strings from a driver or a scrape never make a sample invalid (issue 15).

A GPU's model is free text: it arrives escaped and cut. A UUID or PCI bus id that is not an id
is left out (None). A DCGM host that is not a node id is a problem, and only its GPUs are
skipped.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rackplane.exporters import NvmlSampler, convert, from_csv, from_xml
from rackplane.models import TELEMETRY, NodeTelemetry
from tests.exporters.fake_nvml import FakeNvml

AT = datetime(2026, 11, 30, 12, tzinfo=UTC)


def round_trips(sample: NodeTelemetry) -> NodeTelemetry:
    assert TELEMETRY.validate_json(TELEMETRY.dump_json(sample)) == sample
    return sample


@pytest.mark.parametrize(
    ("name", "want"),
    [
        pytest.param("NVIDIA H200", "NVIDIA H200", id="a plain name is kept"),
        pytest.param("NVIDIA GB200 – Grâce", "NVIDIA GB200 – Grâce", id="Unicode is kept"),
        pytest.param("NVIDIA\u202e002H", "NVIDIA\\u202e002H", id="an RLO is escaped"),
        pytest.param(b"NVIDIA \xff H200", "NVIDIA \ufffd H200", id="bad UTF-8 is replaced"),
        pytest.param("H200\x00\x1b[2J", "H200\\u0000\\u001b[2J", id="NUL and ESC are escaped"),
    ],
)
def test_an_odd_gpu_name_from_nvml_arrives_escaped(name: str | bytes, want: str) -> None:
    fake = FakeNvml()
    fake.series[0]["name"] = name
    sampler = NvmlSampler("c1", "h200-node", nvml=fake)
    sample = round_trips(sampler.sample(AT))
    sampler.close()
    assert sample.gpus[0].model == want


def test_a_kilobyte_gpu_name_from_nvml_is_cut_with_a_marker() -> None:
    fake = FakeNvml()
    fake.series[0]["name"] = "H" * 1_000
    sampler = NvmlSampler("c1", "h200-node", nvml=fake)
    model = round_trips(sampler.sample(AT)).gpus[0].model
    sampler.close()
    assert model is not None and len(model) <= 200
    assert model.endswith("...[truncated: 1,000 characters]")


def test_a_uuid_or_bus_id_that_is_not_an_id_is_left_out() -> None:
    fake = FakeNvml()
    fake.series[0]["uuid"] = "GPU-\u202eabc"
    fake.series[0]["pci_bus_id"] = "0000 0A:00.0"
    sampler = NvmlSampler("c1", "h200-node", nvml=fake)
    gpu = round_trips(sampler.sample(AT)).gpus[0]
    sampler.close()
    assert (gpu.uuid, gpu.pci_bus_id) == (None, None)
    assert gpu.temperature_c is not None  # the readings still arrive


def _scrape(host: str, model: str, gpu: int = 0) -> str:
    return (
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="{gpu}",UUID="GPU-{gpu}",pci_bus_id="00000000:0{gpu}:00.0",'
        f'modelName="{model}",Hostname="{host}"}} 40\n'
    )


def test_an_odd_model_label_in_a_dcgm_scrape_arrives_escaped() -> None:
    out = convert(_scrape("node7", "NVIDIA\u2066H100\u200d"), cluster="c1", at=AT)
    assert out.problems == []
    assert round_trips(out.samples[0]).gpus[0].model == "NVIDIA\\u2066H100\\u200d"


def test_a_dcgm_host_that_is_not_a_node_id_is_a_problem_and_the_other_hosts_go_on() -> None:
    text = _scrape("node 7", "NVIDIA H100") + _scrape("node8", "NVIDIA H100", gpu=1)
    out = convert(text, cluster="c1", at=AT)
    assert [s.node for s in out.samples] == ["node8"]
    assert out.problems == [
        "host 'node 7' of GPU 0 is not a node id (contains a space (U+0020) at position 4)"
    ]


def test_odd_strings_in_nvidia_smi_xml_and_csv_arrive_escaped() -> None:
    xml = (
        "<nvidia_smi_log><gpu><uuid>GPU-1</uuid><product_name>NVIDIA\u202eH200</product_name>"
        "<pci><pci_bus_id>bad id</pci_bus_id></pci></gpu></nvidia_smi_log>"
    )
    gpu = round_trips(from_xml(xml, cluster="c1", node="n1", at=AT)).gpus[0]
    assert (gpu.uuid, gpu.model, gpu.pci_bus_id) == ("GPU-1", "NVIDIA\\u202eH200", None)
    csv = "timestamp, name, uuid\n2026/11/30 12:00:00.000, H200\x07, GPU-\u200b1\n"
    (sample,) = from_csv(csv, cluster="c1", node="n1")
    assert (round_trips(sample).gpus[0].model, sample.gpus[0].uuid) == ("H200\\u0007", None)
