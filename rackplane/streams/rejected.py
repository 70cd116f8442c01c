"""Routing bad input to `rackplane.rejected`: the reason, the bytes, where they came from."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from rackplane.models import REJECTIONS, Rejection

log = logging.getLogger("rackplane.rejected")

RAW_KEPT = 64 * 1024


class Sender(Protocol):
    """Anything that sends a keyed value (a Faust topic)."""

    async def send(self, *, key: Any = None, value: Any = None) -> Any: ...


def reason_of(err: Exception) -> str:
    """A short, readable reason: the first pydantic error with its location, or the message."""
    if isinstance(err, ValidationError):
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "message"
        more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
        return f"{where}: {first.get('msg', 'invalid')}{more}"
    return f"{type(err).__name__}: {err}"


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
    """The record for one rejected message."""
    value = raw or b""
    return Rejection(
        source_topic=topic,
        partition=partition,
        offset=offset,
        key=key.decode("utf-8", "replace") if key is not None else None,
        reason=reason,
        agent=agent,
        at=datetime.now(UTC),
        size=len(value),
        raw_base64=base64.b64encode(value[:RAW_KEPT]).decode(),
        truncated=len(value) > RAW_KEPT,
    )


async def reject(sender: Sender, record: Rejection) -> None:
    """Send `record` to the rejected topic (keyed by source topic), and log it quietly."""
    log.info(
        "rejected %s[%s]@%s by %s: %s",
        record.source_topic,
        record.partition,
        record.offset,
        record.agent,
        record.reason,
    )
    fut = await sender.send(key=record.source_topic.encode(), value=REJECTIONS.dump_json(record))
    if hasattr(fut, "__await__"):
        await fut


async def reject_all(sender: Sender, records: Sequence[Rejection]) -> None:
    """Send every record (see `reject`), all in flight at once; return when all are
    acknowledged."""
    pending = []
    for record in records:
        log.info(
            "rejected %s[%s]@%s by %s: %s",
            record.source_topic,
            record.partition,
            record.offset,
            record.agent,
            record.reason,
        )
        fut = await sender.send(
            key=record.source_topic.encode(), value=REJECTIONS.dump_json(record)
        )
        if hasattr(fut, "__await__"):
            pending.append(fut)
    if pending:
        await asyncio.gather(*pending)
