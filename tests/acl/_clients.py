"""What the ACL tier does as each component: write a marker, and run the pipeline (a
client's registration, an exporter's fatal XID, the worker's `NodeFailed`)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import TopicAuthorizationFailedError

from rackplane.models import GpuSample, NodeFailed, NodeTelemetry, RegisterTopology
from rackplane.streams.client import Client
from rackplane.streams.config import StreamConfig
from tests.streams.conftest import small_topology

MARKER = [("rackplane-marker", b"acl-test")]
"""Headers of what the tests write: a marker, which every reader of rackplane skips."""


async def write_marker(config: StreamConfig, topic: str) -> str:
    """Write one marker record to `topic` as `config`'s user: 'ok' or 'refused'."""
    producer = AIOKafkaProducer(**config.kafka_options(), request_timeout_ms=15_000)
    await producer.start()
    try:
        await producer.send_and_wait(
            config.topic(topic), value=b"", key=b"marker/0", headers=MARKER, partition=0
        )
    except TopicAuthorizationFailedError:
        return "refused"
    finally:
        await producer.stop()
    return "ok"


async def pipeline(client: StreamConfig, exporter: StreamConfig, cluster: str) -> tuple[Any, Any]:
    """As `client`, register `cluster`; as `exporter`, send a fatal XID of its first node
    twice; as `client`, wait for the worker's `NodeFailed`. (The registration's events, the
    `NodeFailed`.)"""
    topology = small_topology(cluster)
    node = topology.racks[0].nodes[0]
    async with Client(client) as c:
        registration = RegisterTopology(
            id=f"reg-{cluster}", cluster=cluster, actor="operator:alice", topology=topology
        )
        registered = await c.outcome(registration, timeout=90)
    gpus = tuple(GpuSample(index=i, xid=79 if i == 0 else None) for i in range(4))
    async with Client(exporter) as e:
        for s in range(2):
            at = registered[0].at + timedelta(seconds=s)
            await e.send_telemetry(NodeTelemetry(cluster=cluster, node=node, at=at, gpus=gpus))
    async with Client(client) as c:

        async def first_failure() -> Any:
            async for event in c.events():
                if event.cluster == cluster and isinstance(event, NodeFailed):
                    return event
            return None

        return registered, await asyncio.wait_for(first_failure(), 90)
