"""A valid `CancelJob` whose `correlation_id` is ~1 MB, and a record just over the limit.

The command fits the worker's input limit (`max_message_bytes`, 1 MiB) and the commands
topic, but every event carries the command's `correlation_id`, so the event it causes is
larger than the events topic takes (Apache Kafka: `max.message.bytes` 1,048,588). Issue 15
saw a gap at that seq, later events missing from the rebuilt state and two conflicting seqs
after a restart. Issue 15's rule: such an event is refused as `CommandRejected` before it is
sent; bounded fields may instead reject the command at the edge. Either way it is answered
exactly once (`either`), nothing is lost and nothing forks. The record one byte over the
limit must be rejected at the edge (`reject`).

The commands topic here takes 2 MiB records (`max.message.bytes`), so the over-limit record
reaches the worker instead of being refused by the broker.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rackplane.models import CancelJob
from rackplane.streams.codec import encode_command
from tests.faults._case import FaultCase
from tests.faults.conftest import FaultBroker

pytestmark = pytest.mark.faults

LIMIT = 1_048_576  # the worker's max_message_bytes (its default)
HEADROOM = 60


def big_cancel(cluster: str, command_id: str, job: str, size: int) -> bytes:
    """The wire form of a CancelJob of exactly `size` bytes whose correlation_id pads it: valid
    in every other way. The models bound every id (256 characters), so it is built as JSON:
    the edge must refuse it (before, it was decided and its event broke the log)."""
    bare = json.loads(encode_command(_cancel(cluster, command_id, job)))
    bare["correlation_id"] = ""
    room = size - len(json.dumps(bare, separators=(",", ":")).encode())
    bare["correlation_id"] = "x" * room
    wire = json.dumps(bare, separators=(",", ":")).encode()
    assert len(wire) == size
    return wire


def _cancel(cluster: str, command_id: str, job: str) -> CancelJob:
    return CancelJob(
        id=command_id, cluster=cluster, actor="operator:faults", job=job, reason="oversized"
    )


async def test_a_1_mb_field_is_answered_once_and_neither_gaps_nor_forks_the_log(
    any_broker: FaultBroker, tmp_path: Path, report_dir: Path
) -> None:
    big_topic = {"max.message.bytes": str(2 * LIMIT)}
    async with FaultCase(
        "oversized", any_broker, tmp_path, report_dir, commands_topic=big_topic
    ) as case:
        await case.start_load()
        await asyncio.sleep(5)
        cluster = case.clusters[0]
        # padded so that the command fits the limit and its events do not fit Kafka's
        command_id = case.load.command_id("big")
        command_id += "-" + "c" * (
            127 - len(command_id)
        )  # the longest id: it is in the event twice
        job = "j-never-submitted"  # a CommandRejected, whose event is larger than the command
        value = big_cancel(cluster, command_id, job, LIMIT - HEADROOM)
        wire = len(value)
        assert wire <= LIMIT < wire + HEADROOM + 1
        big = case.sender.raw(
            "commands", value, key=cluster.encode(), expect="either", kind="a ~1 MB field",
            command_id=command_id, cluster=cluster,
        )  # fmt: skip
        case.fault("a ~1 MB correlation_id", command_bytes=wire)
        await asyncio.sleep(5)
        head, tail = b'{"type": "CancelJob", "pad": "', b'"}'
        over = case.sender.raw(
            "commands",
            head + b"y" * (LIMIT + 1 - len(head) - len(tail)) + tail,
            key=cluster.encode(),
            expect="reject",
            kind="over the limit",
        )
        assert over.size == LIMIT + 1
        case.fault("a record 1 byte over the limit", record_bytes=over.size)
        await asyncio.sleep(10)
        verdict = await case.finish()
        verdict.facts["big_command"] = {"acked": big.acked, "error": big.error, "bytes": wire}
        verdict.facts["over_limit"] = {"acked": over.acked, "error": over.error, "bytes": over.size}
        verdict.write(report_dir)
    assert big.acked and over.acked, (big.error, over.error)
    assert not verdict.problems, verdict.describe()
