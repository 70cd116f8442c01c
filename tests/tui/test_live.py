"""The live source on the suite's broker: a console action reaches the real commands topic."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from rackplane.models import CordonNode
from rackplane.streams.client import Client
from rackplane.streams.codec import decode_command, encode_event
from rackplane.streams.config import StreamConfig
from rackplane.streams.topics import ensure_topics
from rackplane.tui import LiveSource
from rackplane.tui._cluster_grid import ClusterGrid
from tests.conftest import BrokerUnderTest
from tests.tui.conftest import ACTOR, SIZE, console, story

pytestmark = pytest.mark.broker


async def test_a_cordon_from_the_console_reaches_the_commands_topic(
    broker: BrokerUnderTest,
) -> None:
    prefix = f"tui{uuid.uuid4().hex[:8]}"
    config = StreamConfig(broker=f"kafka://{broker.bootstrap}", prefix=prefix, partitions=1)
    await ensure_topics(config)
    events = story()
    async with Client(config) as client:
        for e in events:
            await client.send_raw("events", encode_event(e), key=e.cluster.encode())
        await client.producer.flush()
    app = console(LiveSource(config.broker, cluster="demo-16", prefix=prefix))  # type: ignore[arg-type]
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(200):
            await pilot.pause(0.1)
            if app.timeline is not None and len(app.timeline) == len(events):
                break
        assert app.timeline is not None and len(app.timeline) == len(events)
        app.query_one(ClusterGrid).select("r004", "r004n02")
        await pilot.press("c")
        await pilot.pause()
        await pilot.press(*"from the console", "enter")
        for _ in range(100):
            await pilot.pause(0.1)
            if app.sent:
                break
    async with Client(config) as client:
        consumer = client.reader("commands")
        await consumer.start()
        try:
            records = await asyncio.wait_for(consumer.getone(), 30)
        finally:
            await consumer.stop()
    command = decode_command(records.value or b"")
    assert records.key == b"demo-16"
    assert isinstance(command, CordonNode)
    assert (command.node, command.actor, command.reason, command.id) == (
        "r004n02", ACTOR, "from the console", "t-1")  # fmt: skip
