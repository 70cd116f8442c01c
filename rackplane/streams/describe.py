"""Describing topics a moment after they were made: the broker may not know them yet."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import LeaderNotAvailableError, UnknownTopicOrPartitionError, for_code

NOT_YET = (UnknownTopicOrPartitionError.errno, LeaderNotAvailableError.errno)
"""What a broker answers about a topic just created whose metadata has not reached it yet."""
SETTLE_S = 15.0
"""How long a just-created topic may stay unknown to the broker before that is an error: a
KRaft broker answers CreateTopics once the controller committed it, and learns the new metadata
a moment later (CI saw a SASL broker under load answer UNKNOWN_TOPIC_OR_PARTITION to the describe
right after the create)."""


class DescribeError(RuntimeError):
    """A topic could not be described (its name and the broker's error, named)."""


async def describe_settled(
    admin: AIOKafkaAdminClient, names: list[str], settle_s: float = SETTLE_S
) -> list[dict[str, Any]]:
    """Describe topics, asking again while the broker does not know them yet (`NOT_YET`).

    Raises:
        DescribeError: a topic is still unknown after `settle_s`, or the broker answered
            another error about it (named).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settle_s
    pause = 0.05
    while True:
        described: list[dict[str, Any]] = await admin.describe_topics(names)
        errors = {t["topic"]: t.get("error_code") or 0 for t in described}
        final = {t: c for t, c in errors.items() if c and c not in NOT_YET}
        waiting = {t: c for t, c in errors.items() if c in NOT_YET}
        if final or (waiting and loop.time() >= deadline):
            topic, code = next(iter((final or waiting).items()))
            late = "" if final else f" after {settle_s:g} s"
            raise DescribeError(f"topic {topic}: {for_code(code).__name__} describing it{late}")
        if not waiting:
            return described
        await asyncio.sleep(pause)
        pause = min(2 * pause, 1.0)
