"""The rack rule on what the exporters produce: NVML XID events and dcgm-exporter scrapes.

Two nodes of rack r01 see NVLink5 XIDs; what each exporter makes of them reaches the rule as
it reaches the `gpu_manager` agent (the broker path: tests/streams/test_rack_health.py).
"""

from __future__ import annotations

from datetime import timedelta

from rackplane.exporters import NvmlSampler, convert
from rackplane.models import Health, NodeTelemetry, RackHealth
from rackplane.policies import GpuHealthRules
from tests.exporters.fake_nvml import FakeNvml
from tests.gpu._samples import T0


def rack_reports(samples: list[NodeTelemetry]) -> list[tuple[str, RackHealth]]:
    rules = GpuHealthRules()
    verdicts = [rules.classify(s, rack=("r01", RackHealth.HEALTHY)) for s in samples]
    assert {v.health for v in verdicts} == {Health.HEALTHY}  # no node failed for the rack
    return [(v.rack.rack, v.rack.health) for v in verdicts if v.rack is not None]


def test_nvml_xid_events_on_two_nodes_of_a_rack_fail_the_rack() -> None:
    nvml = {n: FakeNvml() for n in ("r01-n01", "r01-n02")}
    samplers = {n: NvmlSampler("c1", n, nvml=fake) for n, fake in nvml.items()}
    nvml["r01-n01"].inject_xid(0, 145)  # NVLink RLW error
    nvml["r01-n02"].inject_xid(0, 146)  # NVLink TLW error
    samples = []
    for second in range(0, 30, 10):
        for sampler in samplers.values():
            sampler.wait_events(0.01)
            samples.append(sampler.sample(T0 + timedelta(seconds=second)))
    assert [g.xids for g in samples[0].gpus] == [(145,)]
    assert rack_reports(samples) == [("r01", RackHealth.FAILED)]


def scrape(xids: dict[str, int]) -> str:
    lines = []
    for host, xid in xids.items():
        labels = f'gpu="0",UUID="GPU-{host}",modelName="NVIDIA GB200",Hostname="{host}"'
        lines.append(f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 61\n")
        lines.append(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {xid}\n")
    return "".join(lines)


def test_dcgm_last_xids_on_two_nodes_of_a_rack_fail_the_rack_once() -> None:
    before = scrape({"r01-n01": 0, "r01-n02": 0})
    after = scrape({"r01-n01": 144, "r01-n02": 146})  # sticky from here on
    samples = [
        s
        for seconds, text in ((0, before), (15, after), (30, after), (45, after))
        for s in convert(text, cluster="c1", at=T0 + timedelta(seconds=seconds)).samples
    ]
    assert rack_reports(samples) == [("r01", RackHealth.FAILED)]


def test_dcgm_link_down_xids_on_two_nodes_of_a_rack_degrade_the_rack_once() -> None:
    after = scrape({"r01-n01": 149, "r01-n02": 149})
    samples = [
        s
        for seconds in (0, 15, 30)
        for s in convert(after, cluster="c1", at=T0 + timedelta(seconds=seconds)).samples
    ]
    assert rack_reports(samples) == [("r01", RackHealth.DEGRADED)]


def test_a_dcgm_scrape_of_one_sick_node_leaves_the_rack_alone() -> None:
    text = scrape({"r01-n01": 149, "r01-n02": 0})
    rules = GpuHealthRules()
    verdicts = [
        rules.classify(s, rack=("r01", RackHealth.HEALTHY))
        for seconds in (0, 15)
        for s in convert(text, cluster="c1", at=T0 + timedelta(seconds=seconds)).samples
    ]
    assert [v.rack for v in verdicts] == [None] * 4
    assert verdicts[-2].health is Health.FAILED  # r01-n01, at node level as before
