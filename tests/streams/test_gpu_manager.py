"""The GPU Manager in the running worker: health stories from telemetry, and kcat interop.

Runs against the suite's broker (Tansu in `make test`, Apache Kafka in `make test-kafka`).
`kcat` comes from PATH or the virtualenv (`make test` and `make test-kafka` install it there
when missing: scripts/kcat/install.sh). The kcat test runs against Apache Kafka only: kcat's
librdkafka (2.0.2, Debian bookworm) cannot read Tansu 0.6's ApiVersions v3 response ("Protocol
read buffer underflow for ApiVersion v3 at 274/279"), and librdkafka 2.x always sends that
request (`api.version.request=false` is ignored), so no client setting gets around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rackplane.models import (
    TELEMETRY,
    Event,
    GpuSample,
    NodeDegraded,
    NodeFailed,
    NodeRepaired,
    NodeTelemetry,
    RepairNode,
)
from rackplane.streams.client import Client
from tests.streams.conftest import Pipeline, new_cluster

pytestmark = pytest.mark.broker
T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)


def sample(cluster: str, node: str, seconds: int, **gpu1: Any) -> NodeTelemetry:
    base = {"temperature_c": 60.0, "ecc_uncorrected": 0, "nvlink_down": 0}
    gpus = tuple(GpuSample(index=i, **(base | gpu1 if i == 1 else base)) for i in range(4))
    return NodeTelemetry(cluster=cluster, node=node, at=T0 + timedelta(seconds=seconds), gpus=gpus)


async def publish(p: Pipeline, *samples: NodeTelemetry) -> None:
    async with Client(p.config) as client:
        for s in samples:
            await (await client.send_telemetry(s))


async def registered(p: Pipeline, cluster: str) -> None:
    """Register and wait for it: samples of nodes the controller does not know are rejected."""
    await p.register(cluster)
    await p.events(cluster, lambda es: any(e.type == "TopologyRegistered" for e in es))


def of(events: list[Event], kind: type[Event], node: str) -> list[Any]:
    return [e for e in events if isinstance(e, kind) and getattr(e, "node", None) == node]


async def test_a_node_goes_degraded_then_failed_and_back_after_repair(pipeline: Pipeline) -> None:
    c = new_cluster()
    await registered(pipeline, c)
    n = "r0-n0"
    await publish(
        pipeline,
        sample(c, n, 0), sample(c, n, 10),
        sample(c, n, 20, nvlink_down=2), sample(c, n, 30, nvlink_down=2),
        sample(c, n, 40, xid=79), sample(c, n, 50, xid=79),
    )  # fmt: skip
    events = await pipeline.events(c, lambda es: bool(of(es, NodeFailed, n)))
    (degraded,) = of(events, NodeDegraded, n)
    (failed,) = of(events, NodeFailed, n)
    assert degraded.actor == "gpu_manager" and "GPU 1: 2 NVLink links down" in degraded.cause
    assert (
        failed.actor == "gpu_manager" and "XID 79" in failed.cause and "reboot_node" in failed.cause
    )
    await pipeline.send(RepairNode(id=pipeline.command_id("repair"), cluster=c, actor="op", node=n))
    await pipeline.events(c, lambda es: bool(of(es, NodeRepaired, n)))

    # DCGM's XID 79 is sticky: after the repair it is not a new incident; a hot GPU is. The
    # exporter keeps publishing (every 10 s of sample time, every 0.3 s here) until the
    # manager has seen the repair and the second degrade shows. (It used to publish one
    # sample per 2-s read of the whole log: on a loaded machine the read alone took longer,
    # and the story failed in CI with the degrade in the log.)
    async def exporter() -> None:
        for seconds in range(60, 6_060, 10):
            await publish(pipeline, sample(c, n, seconds, xid=79, temperature_c=95.0))
            await asyncio.sleep(0.3)

    publishing = asyncio.create_task(exporter())
    try:
        events = await pipeline.events(c, lambda es: len(of(es, NodeDegraded, n)) == 2, 120)
    finally:
        publishing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await publishing
    after = events[events.index(of(events, NodeRepaired, n)[0]) :]
    assert [e.type for e in after] == ["NodeRepaired", "NodeDegraded"]
    assert "at 95 C" in of(after, NodeDegraded, n)[0].cause


def kcat() -> str:
    found = shutil.which("kcat") or str(Path(sys.prefix) / "bin" / "kcat")
    if not Path(found).exists():
        raise AssertionError("kcat is missing: `make test` installs it (scripts/kcat/install.sh)")
    return found


@pytest.mark.kafka_only
def test_kcat_produces_telemetry_that_rackplane_classifies_and_reads_its_events(
    pipeline: Pipeline,
) -> None:
    c = new_cluster()
    asyncio.run(registered(pipeline, c))
    n = "r1-n2"
    lines = "".join(
        f"{c}|{TELEMETRY.dump_json(sample(c, n, s, xid=48)).decode()}\n" for s in (0, 10)
    )
    bootstrap = pipeline.config.bootstrap
    produced = subprocess.run(
        [kcat(), "-P", "-b", bootstrap, "-t", pipeline.config.topic("telemetry"), "-K", "|"],
        input=lines, text=True, capture_output=True, timeout=60,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    asyncio.run(pipeline.events(c, lambda es: bool(of(es, NodeFailed, n))))
    consumed = subprocess.run(
        [kcat(), "-C", "-b", bootstrap, "-t", pipeline.config.topic("events"), "-o", "beginning",
         "-e", "-q", "-f", "%k\t%s\n"],
        text=True, capture_output=True, timeout=60,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    mine = [
        json.loads(value)
        for key, _, value in (line.partition("\t") for line in consumed.stdout.splitlines())
        if key == c and value
    ]
    failed = [e for e in mine if e["type"] == "NodeFailed" and e["node"] == n]
    assert len(failed) == 1
    assert failed[0]["actor"] == "gpu_manager" and "XID 48" in failed[0]["cause"]
