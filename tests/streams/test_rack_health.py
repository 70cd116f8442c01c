"""Rack faults in the running system: `rackplane rack-health`, and the GPU Manager's rack rule
from telemetry (NVLink-fabric XIDs on two nodes of one rack -> `ReportRackHealth`: link-down
XIDs degrade the rack, the GPUs' NVLink units failing fail it)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.exporters import convert
from rackplane.importers import dump_cluster_file
from rackplane.models import TELEMETRY, Event, NodeTelemetry, RackFailed
from rackplane.streams.client import Client
from rackplane.streams.eventlog import partition_for
from rackplane.streams.process import WorkerProcess
from tests.conftest import BrokerUnderTest
from tests.streams.conftest import (
    Pipeline,
    new_cluster,
    quiet_log,
    small_topology,
    start_pipeline,
)
from tests.streams.test_cli import run

pytestmark = pytest.mark.broker
runner = CliRunner()
T0 = datetime(2026, 12, 2, 7, tzinfo=UTC)


def registered(p: Pipeline, tmp_path: Path) -> str:
    c = new_cluster()
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(dump_cluster_file(small_topology(c)))
    code, out = run(p, "register", str(cluster_file))
    assert code == 0, out
    return c


def types(out: Any) -> list[str]:
    return [e["type"] for e in out["events"]]


def test_an_operator_fails_and_returns_a_rack_from_the_command_line(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    c = registered(pipeline, tmp_path)
    failed = ("rack-health", "--cluster", c, "--rack", "r2", "--state", "failed")
    code, out = run(pipeline, *failed, "--cause", "NVSwitch tray 3", "--actor", "operator:ann")
    assert code == 0, out
    (event,) = out["events"]
    assert (event["type"], event["rack"], event["cause"]) == ("RackFailed", "r2", "NVSwitch tray 3")
    assert event["actor"] == "operator:ann"

    code, out = run(pipeline, *failed)
    assert (code, types(out)) == (0, ["CommandIgnored"])  # already failed: nothing changes

    code, out = run(pipeline, "rack-health", "--cluster", c, "--rack", "r2", "--state", "degraded")
    assert (code, types(out)) == (0, ["RackDegraded"])  # one tray back of two lost, say

    code, out = run(pipeline, "rack-health", "--cluster", c, "--rack", "r2", "--state", "healthy")
    assert (code, types(out)) == (0, ["RackRecovered"])

    code, out = run(pipeline, "rack-health", "--cluster", c, "--rack", "r9", "--state", "failed")
    assert code == 1, out  # rejected: printed, and the exit status says so
    assert out["events"][0]["code"] == "unknown_rack"


def test_a_rack_state_the_model_lacks_is_refused_before_anything_is_sent() -> None:
    result = runner.invoke(
        app, ["rack-health", "--cluster", "c", "--rack", "r1", "--state", "down"]
    )
    assert result.exit_code == 2
    said = " ".join(result.output.replace("│", " ").split())  # the error box wraps lines
    assert "'healthy', 'degraded', 'failed'" in said or "healthy, degraded, failed" in said


def scrape(*hosts: str, xid: int) -> str:
    """A dcgm-exporter scrape: four GPUs per host, GPU 1 with `xid` as its last XID."""
    lines = []
    for host in hosts:
        for g in range(4):
            labels = f'gpu="{g}",UUID="GPU-{host}-{g}",modelName="NVIDIA GB200",Hostname="{host}"'
            lines.append(f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 60\n")
            lines.append(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {xid if g == 1 else 0}\n")
    return "".join(lines)


def xid_sample(cluster: str, node: str, seconds: int, xid: int) -> NodeTelemetry:
    """One node's sample through the DCGM adapter, as `rackplane exporter dcgm` publishes it."""
    (sample,) = convert(
        scrape(node, xid=xid), cluster=cluster, at=T0 + timedelta(seconds=seconds)
    ).samples
    return sample


async def publish(p: Pipeline, *samples: NodeTelemetry) -> None:
    async with Client(p.config) as client:
        for s in samples:
            await (await client.send_telemetry(s))


def of(events: list[Event], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


def rack_event(p: Pipeline, cluster: str, xid: int, kind: str) -> Any:
    """`xid` on one GPU of nodes r1-n0 and r1-n3, 5 s apart: the rack event it makes."""
    samples = (xid_sample(cluster, "r1-n0", 0, xid), xid_sample(cluster, "r1-n3", 5, xid))
    asyncio.run(publish(p, *samples))
    (event,) = of(asyncio.run(p.events(cluster, lambda es: bool(of(es, kind)))), kind)
    return event


def test_nvlink_xids_on_two_nodes_of_a_rack_fail_the_rack_not_the_nodes(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    c = registered(pipeline, tmp_path)
    # dcgm-exporter's last XID, 146 (NVLink TLW error), on one GPU of two nodes of rack r1
    failed = rack_event(pipeline, c, 146, "RackFailed")
    assert isinstance(failed, RackFailed) and failed.actor == "gpu_manager"
    assert failed.rack == "r1" and "r1-n0" in failed.cause and "r1-n3" in failed.cause
    assert "XID 146" in failed.cause

    # the incident goes on on both nodes for a minute: neither is failed for the rack's fault
    later = [xid_sample(c, n, s, 146) for s in range(10, 70, 10) for n in ("r1-n0", "r1-n3")]
    asyncio.run(publish(pipeline, *later))
    code, out = run(pipeline, "rack-health", "--cluster", c, "--rack", "r1", "--state", "healthy")
    assert (code, types(out)) == (0, ["RackRecovered"])
    log = asyncio.run(quiet_log(pipeline, c))
    assert of(log, "NodeFailed") == [] and len(of(log, "RackFailed")) == 1


def test_link_down_xids_on_two_nodes_of_a_rack_degrade_the_rack_and_its_work_stays(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    c = registered(pipeline, tmp_path)
    # 149 (NVLink NETIR link down) on two nodes of rack r1: one NVSwitch tray lost
    degraded = rack_event(pipeline, c, 149, "RackDegraded")
    assert degraded.actor == "gpu_manager" and degraded.rack == "r1"
    assert "one NVSwitch tray" in degraded.cause and "XID 149" in degraded.cause
    later = [xid_sample(c, n, s, 149) for s in range(10, 40, 10) for n in ("r1-n0", "r1-n3")]
    asyncio.run(publish(pipeline, *later))
    log = asyncio.run(quiet_log(pipeline, c))
    assert of(log, "NodeFailed") == [] and of(log, "RackFailed") == []
    assert len(of(log, "RackDegraded")) == 1


# Two workers in one group, 2 partitions: each reads one telemetry partition. Keyed by node,
# r1-n0 and r1-n3 would land on different partitions, and neither worker would see both.


async def telemetry_partitions(p: Pipeline, cluster: str) -> set[int]:
    """The partitions holding the cluster's telemetry records."""
    found: set[int] = set()
    async with Client(p.config) as client:
        consumer = client.reader("telemetry")
        await consumer.start()
        try:
            for _ in range(4):  # a few fetches: both partitions answered by then
                for tp, records in (await consumer.getmany(timeout_ms=1_000)).items():
                    for r in records:
                        if TELEMETRY.validate_json(r.value).cluster == cluster:
                            found.add(tp.partition)
        finally:
            await consumer.stop()
    return found


def test_with_two_workers_the_nodes_of_a_rack_still_meet_on_one_of_them(
    broker: BrokerUnderTest, tmp_path: Path
) -> None:
    assert partition_for("r1-n0", 2) != partition_for("r1-n3", 2)  # apart, keyed by node
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    p = start_pipeline(broker, tmp_path / "first")
    second = WorkerProcess(p.config, data_dir=tmp_path / "second")
    try:
        second.start()
        c = registered(p, tmp_path)
        failed = rack_event(p, c, 146, "RackFailed")
        assert failed.rack == "r1" and "r1-n0" in failed.cause and "r1-n3" in failed.cause
        assert asyncio.run(telemetry_partitions(p, c)) == {partition_for(c, 2)}
    finally:
        second.stop()
        p.worker.stop()
