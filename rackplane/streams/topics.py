"""rackplane's topics: created by rackplane with what the log's promises need, checked at start.

- `.events` (as many partitions as `.commands`: a cluster's commands and events share an
  index): unlimited retention (`retention.ms=-1`, `retention.bytes=-1`,
  `cleanup.policy=delete`), because the log is the truth and must not forget; and
  `max.message.bytes` of at least `max_event_bytes`.
- `.commands`, `.telemetry`: `max.message.bytes` twice the input limit, so that input between
  the two is refused by the edge with a reason (to `.rejected`), not by the producer.
- `.rejected`: the broker's defaults.
- `.snapshots` (as many partitions as `.events`): compacted checkpoints of the events
  partitions (`snapshots.ensure_snapshots_topic`), chunks of at most `max_event_bytes`.

`ensure_topics` creates what is missing and then checks what exists: a worker refuses to start
(`TopicsError`, one line) against an events topic with a finite retention (unless
`allow_finite_retention`), a partition count other than the configured one, or a message limit
below `max_event_bytes`. Topics made by someone else are never altered: the operator decides.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError, for_code

from rackplane.streams.config import StreamConfig
from rackplane.streams.describe import DescribeError, describe_settled
from rackplane.streams.snapshots import SnapshotTopicError, ensure_snapshots_topic

log = logging.getLogger("rackplane.topics")

TOPICS = ("telemetry", "commands", "events", "rejected")
SAME_PARTITIONS = ("commands", "events")
"""Topics whose partition counts must be equal (a cluster lives at one index in each)."""


class TopicsError(RuntimeError):
    """rackplane's topics are missing or configured so that the log could lie or forget."""


def topic_configs(config: StreamConfig, name: str) -> dict[str, str]:
    """The configuration rackplane creates topic `name` with."""
    if name == "events":
        return {
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "max.message.bytes": str(config.max_event_bytes),
        }
    if name in ("commands", "telemetry"):
        return {"max.message.bytes": str(max(2 * config.max_message_bytes, 1_048_588))}
    return {}


async def ensure_topics(config: StreamConfig) -> None:
    """Create rackplane's topics where missing, then check them (see the module docstring).

    Raises:
        TopicsError: a topic exists with settings the log cannot live with.
    """
    admin = AIOKafkaAdminClient(**config.kafka_options())
    await admin.start()
    try:
        for name in TOPICS:
            response = await admin.create_topics(
                [
                    NewTopic(
                        name=config.topic(name),
                        num_partitions=config.partitions,
                        replication_factor=config.replication,
                        topic_configs=topic_configs(config, name),
                    )
                ]
            )
            for topic, code, *message in response.topic_errors:  # the broker answers per topic
                if code not in (0, TopicAlreadyExistsError.errno):
                    said = " ".join(str(m) for m in message if m)
                    raise TopicsError(
                        f"creating topic {topic}: {for_code(code).__name__} {said}".strip()
                    )
        await _check(admin, config)
    finally:
        await admin.close()
    try:
        await ensure_snapshots_topic(
            config.kafka_options(),
            config.topic("snapshots"),
            partitions=config.partitions,
            replication=config.replication,
            max_message_bytes=config.max_event_bytes,
        )
    except SnapshotTopicError as err:
        raise TopicsError(str(err)) from err


async def _check(admin: AIOKafkaAdminClient, config: StreamConfig) -> None:
    names = [config.topic(n) for n in SAME_PARTITIONS]
    try:
        described = await describe_settled(admin, names)
    except DescribeError as err:
        raise TopicsError(str(err)) from err
    for topic in described:
        count = len(topic.get("partitions") or ())
        if count != config.partitions:
            raise TopicsError(
                f"topic {topic['topic']} has {count} partitions, the configuration says "
                f"{config.partitions}: a cluster's commands and events must share a partition "
                "index (set --partitions to match, or use a new --prefix)"
            )
    events = await _configs(admin, config.topic("events"))
    retention = {k: events.get(k) for k in ("retention.ms", "retention.bytes")}
    finite = {k: v for k, v in retention.items() if v is not None and int(v) >= 0}
    if finite and events.get("cleanup.policy", "delete") != "compact":
        said = ", ".join(f"{k}={v}" for k, v in finite.items())
        if not config.allow_finite_retention:
            raise TopicsError(
                f"events topic {config.topic('events')} has a finite retention ({said}): the log "
                "would forget and a later rebuild would lose the cluster; set retention.ms=-1 "
                "and retention.bytes=-1 on it, or start with --allow-finite-retention"
            )
        log.warning("events topic has a finite retention (%s): allowed by configuration", said)
    if None in retention.values():
        log.warning("the broker did not report the events topic's retention: not checked")
    limit = events.get("max.message.bytes")
    if limit is not None and int(limit) < config.max_event_bytes:
        raise TopicsError(
            f"events topic {config.topic('events')} takes messages of at most {int(limit):,} "
            f"bytes, below max_event_bytes={config.max_event_bytes:,}: raise its "
            "max.message.bytes or lower max_event_bytes"
        )


async def _configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    responses: list[Any] = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)]
    )
    out: dict[str, str] = {}
    for response in responses:
        for resource in response.resources:
            error_code, _, _, _, entries = resource[:5]
            if error_code:
                raise TopicsError(f"topic {topic}: error {error_code} reading its configuration")
            for entry in entries:
                name, value = entry[0], entry[1]
                if value is not None:
                    out[name] = value
    return out
