"""The controller keeps taking commands at a 1 ms fetch wait behind a long commands partition.

Issue 4's stall: at a 5 ms fetch wait and 500 commands/s, the controller's Faust stream
stopped after ~10,000 commands, every time, without a word. Each command is its own record
batch, and past ~2,000 batches per millisecond of wait Tansu answers every fetch empty (see
`rackplane.streams._fetch_wait`). Here the commands partition starts with 20,000 such
batches (markers, which the controller skips), then a real command must be decided.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rackplane.streams.eventlog import MARKER_HEADER
from rackplane.streams.process import WorkerProcess
from rackplane.streams.topics import ensure_topics
from tests.broker._batches import fill_one_record_batches
from tests.conftest import BrokerUnderTest
from tests.streams.conftest import Pipeline, new_cluster, new_config

pytestmark = pytest.mark.broker

BATCHES = 20_000


def test_the_controller_decides_a_command_behind_20000_batches_at_a_1_ms_wait(
    broker: BrokerUnderTest, tmp_path: Path
) -> None:
    config = new_config(
        broker, partitions=1, fetch_wait_ms=1, policies=(), gpu_manager=False, projections=False
    )
    asyncio.run(ensure_topics(config))
    marker = [(MARKER_HEADER, b"filler")]
    asyncio.run(
        fill_one_record_batches(broker.bootstrap, config.topic("commands"), BATCHES, headers=marker)
    )
    p = Pipeline(config, WorkerProcess(config, data_dir=tmp_path).start())
    try:
        cluster = new_cluster()
        asyncio.run(p.register(cluster))
        got = asyncio.run(
            p.events(cluster, lambda es: any(e.type == "TopologyRegistered" for e in es), 30)
        )
    finally:
        p.worker.stop()
    assert [e.type for e in got] == ["TopologyRegistered"]
