"""Telemetry is keyed by cluster, so one worker sees every node of a rack (the rack rule).

    partition 0: c1 (every node of every rack)     partition 1: c2 ...
    worker A reads 0, worker B reads 1: each judges whole racks

Keyed by node, the nodes of one rack spread over the partitions, and with several workers no
worker saw the two nodes of a rack that make the rack's verdict.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rackplane.models import GpuSample, NodeTelemetry
from rackplane.streams.client import telemetry_key
from rackplane.streams.eventlog import partition_for

AT = datetime(2026, 12, 2, 7, tzinfo=UTC)


def sample(cluster: str, node: str) -> NodeTelemetry:
    return NodeTelemetry(cluster=cluster, node=node, at=AT, gpus=(GpuSample(index=0),))


# an NVL72 cluster of 8 racks x 18 compute trays
NODES = [f"r{r:02}-n{n:02}" for r in range(1, 9) for n in range(1, 19)]


@pytest.mark.parametrize("partitions", [2, 3, 8, 12])
def test_every_node_of_a_cluster_lands_on_the_clusters_partition(partitions: int) -> None:
    keys = {telemetry_key(sample("gb200-a", n)) for n in NODES}
    assert keys == {b"gb200-a"}
    # the same partition its commands and events use, when the topics have as many partitions
    assert {partition_for(k.decode(), partitions) for k in keys} == {
        partition_for("gb200-a", partitions)
    }


def test_by_node_the_nodes_of_one_rack_would_spread_over_the_partitions() -> None:
    rack = [n for n in NODES if n.startswith("r01-")]
    assert len({partition_for(n, 2) for n in rack}) == 2  # what the cluster key prevents


def test_clusters_still_spread_over_the_partitions_and_workers() -> None:
    clusters = [f"c{i}" for i in range(16)]
    assert (
        len({partition_for(telemetry_key(sample(c, "r01-n01")).decode(), 8) for c in clusters}) > 1
    )
