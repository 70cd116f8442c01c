"""A redelivery older than the command-id window is not decided again.

The controller's only dedupe today is the window of command ids each state remembers
(`SEEN_COMMANDS_WINDOW`, 200,000: at least that many of the most recent ids, at most twice).
Issue 15: "a redelivery after 400,001 newer commands: decided again". The window is made
small here (`--seen-window 40`: ids older than 80 newer ones are forgotten), the load sends
well over 80 commands to the cluster after the old one, then, with the worker stopped, the
controller's consumer group (Faust names it after the app id) is moved back to the old
command's offset on the commands topic. The restarted worker reads everything from there
again: the old command and the ones after it must not be decided a second time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.structs import OffsetAndMetadata

from tests.faults._case import FaultCase
from tests.faults.conftest import FaultBroker

pytestmark = pytest.mark.faults

WINDOW = 40


class _AsFaust(RoundRobinPartitionAssignor):  # type: ignore[misc]
    """Round robin under the name of Faust's assignor: the group's protocol stays one."""

    name = "faust"


async def rewind(case: FaultCase, partition: int, offset: int) -> None:
    """Commit `offset` for the controller's group on one commands partition, as the group's
    only member while the worker is stopped. (Tansu refuses a commit from outside a
    generation, and a member that does not speak the group's protocol: Faust's assignor.)"""
    topic = case.config.topic("commands")
    tp = TopicPartition(topic, partition)
    consumer = AIOKafkaConsumer(
        topic,
        **case.config.kafka_options(),
        group_id=case.config.app_id,
        enable_auto_commit=False,
        session_timeout_ms=6_000,
        heartbeat_interval_ms=1_000,
        partition_assignment_strategy=(_AsFaust,),
    )
    await consumer.start()
    try:
        for _ in range(300):
            if tp in consumer.assignment():
                break
            await consumer.getmany(timeout_ms=100)
        else:
            raise AssertionError(f"never assigned {tp} in group {case.config.app_id}")
        await consumer.commit({tp: OffsetAndMetadata(offset, "")})
        committed = await consumer.committed(tp)
    finally:
        await consumer.stop()
    assert committed == offset, f"the group's offset is {committed}, not {offset}"


async def test_a_redelivery_older_than_the_id_window_is_not_decided_again(
    any_broker: FaultBroker, tmp_path: Path, report_dir: Path
) -> None:
    async with FaultCase(
        "old-redelivery", any_broker, tmp_path, report_dir, seen_window=WINDOW
    ) as case:
        cluster = case.clusters[0]
        await case.start_load()
        await asyncio.sleep(3)
        old = next(
            s
            for s in case.sender.sent
            if s.cluster == cluster and s.kind == "SubmitJob" and s.acked
        )
        await asyncio.sleep(15)
        await case.stop_load()
        await case.settle()
        newer = [
            s for s in case.sender.sent
            if s.cluster == cluster and s.acked and s.partition == old.partition
            and s.offset is not None and old.offset is not None and s.offset > old.offset
        ]  # fmt: skip
        assert len(newer) > 2 * WINDOW, f"only {len(newer)} commands after the old one"
        assert old.partition is not None and old.offset is not None
        async with case.worker.held():
            await rewind(case, old.partition, old.offset)
        case.fault(
            "consumer group moved back",
            old_command=old.command_id,
            offset=old.offset,
            newer_commands=len(newer),
            window=WINDOW,
        )
        await case.worker.wait_ready()
        verdict = await case.finish()
    assert not verdict.problems, verdict.describe()
