"""Two workers in one group, and commands whose record key is not their `cluster`.

The key picks the partition, and the partition picks the worker: a command keyed by another
name reaches a controller that does not own its cluster, which rebuilt the cluster and wrote
its events next to the owner's (issue 15: "the cluster gets two writers: 67 conflicting seqs,
67 lost cordons out of 200"). Issue 15's rule: a record whose key is not its `cluster` goes
to `rackplane.rejected`, so each mis-keyed command here must be rejected (with a reason) and
never decided, and the correctly keyed load must be decided once each, with no fork.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka.partitioner import DefaultPartitioner

from rackplane.models import CordonNode, UncordonNode
from tests.faults._case import FaultCase
from tests.faults._load import nodes_of
from tests.faults.conftest import FaultBroker

pytestmark = pytest.mark.faults

MISKEYED = 200
PARTITIONS = 2


def partition_of(key: bytes, partitions: int = PARTITIONS) -> int:
    """Where the default partitioner (aiokafka's, as Java's) puts `key`."""
    return int(DefaultPartitioner()(key, list(range(partitions)), list(range(partitions))))


def wrong_key(cluster: str, n: int) -> bytes:
    """A key that is not `cluster` and lands in another partition than `cluster` does."""
    home = partition_of(cluster.encode())
    for i in range(n, n + 1000):
        key = f"{cluster}-elsewhere-{i}".encode()
        if partition_of(key) != home:
            return key
    raise AssertionError(f"no key of another partition than {cluster}'s")


async def test_two_workers_reject_mis_keyed_commands_and_never_fork(
    any_broker: FaultBroker, tmp_path: Path, report_dir: Path
) -> None:
    async with FaultCase(
        "miskeyed", any_broker, tmp_path, report_dir, workers=2, partitions=PARTITIONS
    ) as case:
        await asyncio.gather(*(w.wait_ready() for w in case.supervisors))
        await case.start_load()
        await asyncio.sleep(3)
        for i in range(MISKEYED):  # cordons and uncordons, over ~20 s
            cluster = case.clusters[i % len(case.clusters)]
            node = nodes_of(cluster)[(i // 2) % 24]
            kind = CordonNode if i % 2 == 0 else UncordonNode
            extra = {"reason": "miskeyed"} if kind is CordonNode else {}
            command = kind(
                id=case.load.command_id("miskeyed"),
                cluster=cluster,
                actor="operator:faults",
                node=node,
                **extra,
            )
            case.sender.command(command, key=wrong_key(cluster, i), expect="reject")
            await asyncio.sleep(0.1)
        case.fault(f"{MISKEYED} mis-keyed cordons and uncordons")
        await asyncio.sleep(3)
        verdict = await case.finish()
    assert not verdict.problems, verdict.describe()
