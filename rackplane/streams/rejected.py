"""Routing bad input to `rackplane.rejected`: the reason, the bytes, where they came from."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from aiokafka.errors import KafkaError
from pydantic import ValidationError

from rackplane._errtext import named
from rackplane.models import REJECTIONS, Rejection
from rackplane.models._text import LABEL_MAX, NOTE_MAX, describe_error, printable
from rackplane.models.rejection import RAW_KEPT
from rackplane.streams._fatal import Unavailable

log = logging.getLogger("rackplane.rejected")


class Sender(Protocol):
    """Anything that sends a keyed value (a Faust topic)."""

    async def send(self, *, key: Any = None, value: Any = None) -> Any: ...


def reason_of(err: Exception) -> str:
    """A short, readable reason: the first pydantic error with its location, or the message."""
    if isinstance(err, ValidationError):
        return describe_error(err)
    return named(err)


def rejection(
    *,
    raw: bytes | None,
    reason: str,
    agent: str,
    topic: str,
    partition: int | None,
    offset: int | None,
    key: bytes | None,
) -> Rejection:
    """The record for one rejected message. Never raises, whatever the key and reason hold.

    Every text field is made valid (`printable`: refused characters escaped as \\uXXXX, cut
    to the field's limit with a marker); when that changed the key, its bytes go along in
    `key_base64`, as the value's always do in `raw_base64`.
    """
    value = raw or b""
    shown: str | None = None
    key_base64: str | None = None
    if key is not None:
        decoded = key.decode("utf-8", "replace")
        shown = printable(decoded, LABEL_MAX)
        if shown.encode() != key:
            key_base64 = base64.b64encode(key[:RAW_KEPT]).decode()
    return Rejection(
        source_topic=printable(topic, LABEL_MAX),
        partition=partition,
        offset=offset,
        key=shown,
        reason=printable(reason, NOTE_MAX),
        agent=printable(agent, LABEL_MAX),
        at=datetime.now(UTC),
        size=len(value),
        raw_base64=base64.b64encode(value[:RAW_KEPT]).decode(),
        truncated=len(value) > RAW_KEPT,
        key_base64=key_base64,
    )


async def reject(sender: Sender, record: Rejection) -> None:
    """Send `record` to the rejected topic (keyed by source topic), and log it quietly."""
    await reject_all(sender, [record])


def rejection_of(message: Any, reason: str, *, agent: str, topic: str) -> Rejection:
    """The record for a consumed `message` (a Faust message or an aiokafka record) refused
    for `reason` after it decoded."""
    key = message.key if isinstance(message.key, bytes) else None
    return rejection(
        raw=message.value,
        reason=reason,
        agent=agent,
        topic=topic,
        partition=message.partition,
        offset=message.offset,
        key=key,
    )


async def reject_all(sender: Sender, records: Sequence[Rejection]) -> None:
    """Send every record (see `reject`), all in flight at once; return when all are
    acknowledged (retried through an outage, as `send_all`)."""
    for record in records:
        log.info(
            "rejected %s[%s]@%s by %s: %s",
            record.source_topic,
            record.partition,
            record.offset,
            record.agent,
            record.reason,
        )
    await send_all(
        sender,
        [(r.source_topic.encode(), REJECTIONS.dump_json(r)) for r in records],
        what="rejections",
    )


SEND_OUTAGE_LIMIT = 300.0
"""Seconds `send_all` retries before the worker stops (as the controller's `outage_limit`)."""


async def send_all(
    sender: Sender,
    records: Sequence[tuple[bytes, bytes]],
    *,
    what: str,
    outage_limit: float = SEND_OUTAGE_LIMIT,
) -> None:
    """Send every (key, value) and return once the broker acknowledged them all. A failed
    send sends them all again, with backoff (0.1 s doubling to 5 s): what they carry is
    idempotent (command ids derived from what caused them), so a copy that landed twice is
    one decision. Past `outage_limit` seconds: `Unavailable` (the worker stops)."""
    delay, started = 0.1, time.monotonic()
    while True:
        try:
            pending = [await sender.send(key=k, value=v) for k, v in records]
            if pending:
                await asyncio.gather(*pending)
            return
        except (KafkaError, OSError, TimeoutError) as err:
            waited = time.monotonic() - started
            if waited > outage_limit:
                raise Unavailable(
                    f"the broker refused {what} for {waited:.0f} s: {named(err)}"
                ) from err
            if delay == 0.1:
                log.warning("sending %s failed (%s: %s); retrying", what, type(err).__name__, err)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
