"""Decoding what agents receive: size limit first, then the pydantic TypeAdapter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from rackplane.models import Rejection
from rackplane.streams.eventlog import is_marker
from rackplane.streams.rejected import reason_of, rejection

T = TypeVar("T")


@dataclass
class Decoded(Generic[T]):
    """A decoded message, or the rejection to send instead (exactly one is set)."""

    value: T | None
    rejected: Rejection | None
    partition: int | None
    offset: int | None


def decode(
    event: Any, parse: Callable[[bytes], T], *, agent: str, topic: str, limit: int
) -> Decoded[T] | None:
    """Decode a Faust stream event's (or an aiokafka record's) raw value; None for markers."""
    message = getattr(event, "message", event)
    headers = message.headers  # per message on the telemetry path: no copies, no dicts
    if headers and is_marker(headers):
        return None
    raw = message.value
    if type(raw) is not bytes:
        raw = bytes(raw or b"")
    if len(raw) > limit:
        reason = f"message of {len(raw):,} bytes exceeds the {limit:,}-byte limit"
    else:
        try:
            return Decoded(parse(raw), None, message.partition, message.offset)
        except (ValidationError, ValueError, UnicodeDecodeError) as err:
            reason = reason_of(err)
    where = {"partition": message.partition, "offset": message.offset}
    key = message.key if isinstance(message.key, bytes | None) else str(message.key).encode()
    return Decoded(
        None,
        rejection(raw=raw, reason=reason, agent=agent, topic=topic, key=key, **where),
        **where,
    )
