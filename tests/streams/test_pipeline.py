"""The streaming pipeline end to end: commands in, events out, bad input to `rejected`.

Runs against the suite's broker (Tansu in `make test`, Apache Kafka in `make test-kafka`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rackplane.models import (
    COMMANDS,
    CommandRejected,
    GpuSample,
    JobPlaced,
    JobSpec,
    NodeFailed,
    NodeSwapped,
    NodeTelemetry,
    Rejection,
    SubmitJob,
)
from rackplane.streams.client import Client
from tests.streams.conftest import Pipeline, new_cluster

pytestmark = pytest.mark.broker


def submit(p: Pipeline, cluster: str, job: str, nodes: int, **fields: object) -> SubmitJob:
    return SubmitJob(
        id=p.command_id("submit"),
        cluster=cluster,
        actor="user:test",
        job=JobSpec(id=job, nodes=nodes, slice_size=fields.pop("slice_size", 4), **fields),  # type: ignore[arg-type]
    )


async def test_a_submitted_job_is_decided_and_placed_inside_one_rack(pipeline: Pipeline) -> None:
    c = new_cluster()
    await pipeline.register(c)
    await pipeline.send(submit(pipeline, c, "j1", 4))
    events = await pipeline.events(c, lambda es: any(isinstance(e, JobPlaced) for e in es))
    assert [e.type for e in events[:3]] == ["TopologyRegistered", "JobSubmitted", "JobPlaced"]
    placed = events[2]
    assert isinstance(placed, JobPlaced)
    assert placed.actor == "policy:tas" and placed.slices[0].rack_local
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_command_delivered_three_times_is_applied_once(pipeline: Pipeline) -> None:
    c = new_cluster()
    await pipeline.register(c)
    command = submit(pipeline, c, "j1", 2)
    await pipeline.send(command, command, command)
    marker = submit(pipeline, c, "after", 1, slice_size=1)
    await pipeline.send(marker)
    events = await pipeline.events(c, lambda es: any(e.causation_id == marker.id for e in es))
    assert [e.type for e in events if e.causation_id == command.id] == ["JobSubmitted"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def _malformed(i: int, cluster: str, limit: int) -> bytes:
    good = json.loads(
        COMMANDS.dump_json(
            SubmitJob(
                id=f"bad-{i}", cluster=cluster, actor="fuzz", job=JobSpec(id=f"b{i}", nodes=1)
            )
        )
    )
    match i % 5:
        case 0:
            return b"\xff\xfe not json at all " + str(i).encode()
        case 1:
            return json.dumps({**good, "type": "RebootTheWorld"}).encode()
        case 2:
            return json.dumps({k: v for k, v in good.items() if k != "actor"}).encode()
        case 3:
            return json.dumps({**good, "job": {**good["job"], "nodes": "sixteen"}}).encode()
        case _:
            return b'{"pad": "' + b"x" * (limit + 10) + b'"}'


async def test_a_thousand_malformed_messages_are_rejected_while_good_commands_flow(
    pipeline: Pipeline,
) -> None:
    c = new_cluster()
    await pipeline.register(c)
    limit = pipeline.config.max_message_bytes
    good = []
    async with Client(pipeline.config, linger_ms=5) as client:
        pending = []
        for i in range(1000):
            pending.append(await client.send_raw("commands", _malformed(i, c, limit), c.encode()))
            if i % 100 == 0:
                command = submit(pipeline, c, f"good{i}", 1, slice_size=1)
                good.append(command)
                pending.append(await client.send(command, wait=False))
        await asyncio.gather(*pending)
        rejections: list[Rejection] = []

        async def read() -> None:
            async for r in client.rejections():
                if r.key == c:
                    rejections.append(r)
                    if len(rejections) == 1000:
                        return

        await asyncio.wait_for(read(), 60)
    events = await pipeline.events(
        c, lambda es: {e.causation_id for e in es} >= {g.id for g in good}
    )
    assert len([e for e in events if e.type == "JobSubmitted"]) == len(good) == 10
    assert not [e for e in events if isinstance(e, CommandRejected) and e.actor == "fuzz"]
    reasons = [r.reason for r in rejections]
    assert sum("Invalid JSON" in r or "invalid" in r.lower() for r in reasons) >= 200
    assert sum("does not match any of the expected tags" in r for r in reasons) == 200
    assert sum("Field required" in r for r in reasons) == 200
    assert sum("exceeds the 65,536-byte limit" in r for r in reasons) == 200
    first = rejections[0]
    assert first.source_topic == pipeline.config.topic("commands")
    assert first.agent == "controller" and first.offset is not None
    assert base64.b64decode(first.raw_base64) == _malformed(0, c, limit)


async def test_a_fatal_xid_in_telemetry_fails_the_node_and_its_slice_gets_a_spare(
    pipeline: Pipeline,
) -> None:
    c = new_cluster()
    await pipeline.register(c)
    await pipeline.send(submit(pipeline, c, "train", 4))
    events = await pipeline.events(c, lambda es: any(isinstance(e, JobPlaced) for e in es))
    node = next(e for e in events if isinstance(e, JobPlaced)).slices[0].nodes[1]
    now = datetime.now(UTC)
    healthy = NodeTelemetry(cluster=c, node=node, at=now, gpus=(GpuSample(index=0, xid=None),))
    broken = NodeTelemetry(
        cluster=c, node=node, at=now, gpus=(GpuSample(index=0), GpuSample(index=1, xid=79))
    )
    async with Client(pipeline.config) as client:
        for sample in (healthy, healthy, broken, broken, broken):
            await (await client.send_telemetry(sample))
    events = await pipeline.events(c, lambda es: any(isinstance(e, NodeSwapped) for e in es))
    failed = [e for e in events if isinstance(e, NodeFailed)]
    assert len(failed) == 1  # reported on the transition only
    assert failed[0].actor == "gpu_manager" and "XID 79" in failed[0].cause
    swap = next(e for e in events if isinstance(e, NodeSwapped))
    assert swap.old_node == node and swap.actor == "policy:spare_swap"


async def test_telemetry_for_an_unknown_node_is_rejected(pipeline: Pipeline) -> None:
    c = new_cluster()
    await pipeline.register(c)
    sample = NodeTelemetry(cluster=c, node="ghost", at=datetime.now(UTC), gpus=())
    async with Client(pipeline.config) as client:
        await (await client.send_telemetry(sample))
        found: list[Rejection] = []

        async def read() -> None:
            async for r in client.rejections():
                if "ghost" in r.reason and c in r.reason:
                    found.append(r)
                    return

        await asyncio.wait_for(read(), 30)
    assert found[0].agent == "gpu_manager"


async def test_the_worker_serves_occupancy_jobs_and_prometheus_metrics(pipeline: Pipeline) -> None:
    c = new_cluster()
    await pipeline.register(c)
    await pipeline.send(submit(pipeline, c, "j1", 4))
    await pipeline.events(c, lambda es: any(isinstance(e, JobPlaced) for e in es))
    base = f"http://127.0.0.1:{pipeline.worker.web_port}"

    def get(path: str) -> bytes:
        with urllib.request.urlopen(base + path, timeout=10) as r:
            return bytes(r.read())

    async def settled() -> list[dict[str, object]]:
        for _ in range(100):
            try:
                jobs = json.loads(await asyncio.to_thread(get, f"/clusters/{c}/jobs/"))
            except urllib.error.HTTPError as err:  # 404 until the projection has the cluster
                if err.code != 404:
                    raise
                jobs = []
            if jobs and jobs[0]["status"] == "placed":
                return list(jobs)
            await asyncio.sleep(0.1)
        raise AssertionError("the projection never showed the placed job")

    jobs = await settled()
    assert jobs[0]["job"] == "j1" and jobs[0]["slices"][0]["nodes"] == 4
    racks = json.loads(await asyncio.to_thread(get, f"/clusters/{c}/racks/"))
    assert sum(r["allocated"] for r in racks) == 4 and len(racks) == 4
    metrics = (await asyncio.to_thread(get, "/metrics")).decode()
    assert f'rackplane_nodes{{cluster="{c}",role="allocated"}} 4.0' in metrics
    decisions = next(
        line for line in metrics.splitlines() if line.startswith("rackplane_controller_decisions")
    )
    assert float(decisions.split()[-1]) >= 2  # the registration and the submission at least
    controller = json.loads(await asyncio.to_thread(get, f"/clusters/{c}/controller/"))
    assert controller["seq"] >= 3
    assert controller["broken"] is None
    assert json.loads(await asyncio.to_thread(get, "/health")) == {"ok": True, "problems": []}
    assert json.loads(await asyncio.to_thread(get, "/ready")) == {"ready": True, "problems": []}


async def test_the_audit_sink_records_commands_events_and_rejections_in_order(
    pipeline: Pipeline,
) -> None:
    c = new_cluster()
    await pipeline.register(c)
    command = submit(pipeline, c, "audited", 2)
    await pipeline.send(command)
    async with Client(pipeline.config) as client:
        await (await client.send_raw("commands", b"not a command", c.encode()))
    await pipeline.events(c, lambda es: any(e.causation_id == command.id for e in es))
    audit = Path(str(pipeline.config.audit_dir))

    def lines(name: str) -> list[dict[str, object]]:
        path = audit / f"{name}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    for _ in range(100):
        events = [e for e in lines("events") if e["cluster"] == c]
        commands = [x for x in lines("commands") if x["cluster"] == c]
        rejections = [r for r in lines("rejections") if r["key"] == c]
        if len(events) >= 3 and rejections:
            break
        await asyncio.sleep(0.1)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert command.id in [x["id"] for x in commands]
    assert "Invalid JSON" in str(rejections[0]["reason"])


async def test_a_job_past_its_time_limit_is_ended_by_the_workers_tick(pipeline: Pipeline) -> None:
    from datetime import timedelta

    from rackplane.models import JobFailed, StartJob

    c = new_cluster()
    await pipeline.register(c)
    await pipeline.send(submit(pipeline, c, "short", 4, time_limit=timedelta(seconds=2)))
    await pipeline.events(c, lambda es: any(isinstance(e, JobPlaced) for e in es))
    await pipeline.send(StartJob(id=pipeline.command_id("start"), cluster=c, actor="user:test",
                                 job="short"))  # fmt: skip
    events = await pipeline.events(c, lambda es: any(isinstance(e, JobFailed) for e in es))
    (failed,) = [e for e in events if isinstance(e, JobFailed)]
    started = next(e for e in events if e.type == "JobStarted")
    assert failed.reason.startswith("time_limit: ran ") and failed.actor == "policy:time_limits"
    assert failed.at - started.at >= timedelta(seconds=2)
