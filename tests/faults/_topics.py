"""Creating and inspecting rackplane's topics with the admin client (what the cases set up).

The cases create the topics before the worker starts, as an operator would, with the
settings issue 15 asks rackplane itself to use: the events topic keeps everything
(`retention.ms=-1`, `retention.bytes=-1`, `cleanup.policy=delete`), so a worker that refuses a
finite retention starts against them.
"""

from __future__ import annotations

import contextlib
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

from rackplane.streams.config import StreamConfig
from rackplane.streams.topics import TOPICS

UNLIMITED = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
A_WEEK = {"retention.ms": str(7 * 24 * 3600 * 1000), "cleanup.policy": "delete"}


async def create_topics(
    config: StreamConfig,
    *,
    events: dict[str, str] | None = None,
    commands: dict[str, str] | None = None,
) -> None:
    """Create the four topics with `config.partitions`; the events topic with `events`
    (default: unlimited retention), the commands topic with `commands` (default: none)."""
    unlimited = {**UNLIMITED, "max.message.bytes": str(config.max_event_bytes)}
    settings = {"events": unlimited if events is None else events, "commands": commands or {}}
    admin = AIOKafkaAdminClient(**config.kafka_options())
    await admin.start()
    try:
        for name in TOPICS:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(
                    [
                        NewTopic(
                            name=config.topic(name),
                            num_partitions=config.partitions,
                            replication_factor=config.replication,
                            topic_configs=settings.get(name) or {},
                        )
                    ]
                )
    finally:
        await admin.close()


async def topic_settings(config: StreamConfig, name: str) -> dict[str, str]:
    """The broker's configuration of one of rackplane's topics (`events`, ...)."""
    admin = AIOKafkaAdminClient(**config.kafka_options())
    await admin.start()
    try:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, config.topic(name))]
        )
    finally:
        await admin.close()
    out: dict[str, str] = {}
    for response in responses:
        for resource in response.to_object()["resources"]:
            for entry in resource["config_entries"]:
                out[entry["config_names"]] = entry["config_value"]
    return out


async def partition_counts(config: StreamConfig) -> dict[str, int]:
    """Partitions of each of rackplane's topics that exists (`events` -> 4)."""
    admin = AIOKafkaAdminClient(**config.kafka_options())
    await admin.start()
    try:
        topics: list[dict[str, Any]] = await admin.describe_topics(
            [config.topic(n) for n in TOPICS]
        )
    finally:
        await admin.close()
    prefix = f"{config.prefix}."
    return {
        t["topic"].removeprefix(prefix): len(t["partitions"])
        for t in topics
        if t["error_code"] == 0 and t["partitions"]
    }
