"""Apache Kafka killed for 30 s, or paused twice for 30 s, under load (Kafka only: Tansu keeps
its log in memory, so a killed Tansu is an empty broker, not an outage).

Issue 15 measured on cc19f39: killed and restarted 30 s later, 2,663 of 4,748 acknowledged
commands missing from the rebuilt state and 1,769 seqs with two different events; paused
30 s, 38 acknowledged commands never decided, and the GPU Manager's telemetry loop died
(`CommitFailedError`) while the worker kept answering: 0 of 3 failure samples became
`NodeFailed` afterwards.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.faults._case import FaultCase
from tests.faults._load import healthy_sample
from tests.faults.conftest import FaultBroker

pytestmark = pytest.mark.faults

OUTAGE_S = 30.0
BEFORE_S = 8.0
AFTER_S = 10.0
FAILING = ("r3-n5", "r3-n4", "r2-n5")
"""Nodes of the first cluster the load leaves alone: the failure samples' story."""
FAILED_WITHIN_S = 30.0
PAUSES = 2
"""What a pause breaks depends on where each loop was when it began (the telemetry loop dies
when a commit of its is in flight): issue 15's failures showed after one 30 s pause in 2 of
3 runs on cc19f39, so the case pauses twice."""


async def test_kafka_killed_and_restarted_30_s_later_loses_and_forks_nothing(
    own_kafka: FaultBroker, tmp_path: Path, report_dir: Path
) -> None:
    async with FaultCase("kafka-killed", own_kafka, tmp_path, report_dir) as case:
        await case.start_load()
        await asyncio.sleep(BEFORE_S)
        own_kafka.server.kill()
        case.fault("kafka SIGKILL", down_s=OUTAGE_S)
        await asyncio.sleep(OUTAGE_S)
        started = time.monotonic()
        await asyncio.to_thread(own_kafka.server.restart)
        case.verdict.facts["kafka_restart_s"] = round(time.monotonic() - started, 1)
        await asyncio.sleep(AFTER_S)
        verdict = await case.finish()
    assert not verdict.problems, verdict.describe()


async def test_kafka_paused_30_s_loses_nothing_and_failures_still_become_node_failed(
    own_kafka: FaultBroker, tmp_path: Path, report_dir: Path
) -> None:
    reserved = tuple((0, n) for n in FAILING)
    async with FaultCase(
        "kafka-paused", own_kafka, tmp_path, report_dir, reserved=reserved
    ) as case:
        await case.start_load()
        await asyncio.sleep(BEFORE_S)
        for _ in range(PAUSES):
            own_kafka.server.pause()
            case.fault("kafka SIGSTOP", paused_s=OUTAGE_S)
            await asyncio.sleep(OUTAGE_S)
            own_kafka.server.resume()
            await asyncio.sleep(AFTER_S)
        await failures_become_node_failed(case)
        verdict = await case.finish()
    assert not verdict.problems, verdict.describe()


async def failures_become_node_failed(case: FaultCase) -> None:
    """XID 48 on one GPU of each of `FAILING` (twice): each must become `NodeFailed`."""
    cluster = case.clusters[0]
    now = datetime.now(UTC)
    for node in FAILING:
        for step in (0, 1):
            case.sender.sample(healthy_sample(cluster, node, now + timedelta(seconds=step), xid=48))
    deadline = time.monotonic() + FAILED_WITHIN_S
    failed: set[str] = set()
    while time.monotonic() < deadline and len(failed) < len(FAILING):
        failed = {
            n for c, kind, n in case.follower.node_events if c == cluster and kind == "NodeFailed"
        }
        await asyncio.sleep(0.2)
    case.verdict.counts["failure_samples_nodes"] = len(FAILING)
    case.verdict.counts["failure_samples_node_failed"] = len(failed & set(FAILING))
    if len(failed & set(FAILING)) < len(FAILING):
        case.verdict.problem(
            f"{len(failed & set(FAILING))} of {len(FAILING)} nodes with failure samples became "
            f"NodeFailed within {FAILED_WITHIN_S:.0f} s after the pause"
        )
