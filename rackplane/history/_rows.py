"""Rows of the history tables: typed columns, the JSON payload, and the hash chain.

Rules of this file:
- Every table is one hash chain in `row_id` order: a row's hash is
  sha256(previous row's hash, 0x1e, the row's content), the first row's previous hash is
  `GENESIS`. The content is the row's columns (except `row_id` and the hashes) joined by 0x1f,
  times as integer microseconds since the epoch, NULL as 0x00.
- The same `*_content` function serves the writer (from the model) and the verifier (from the
  stored columns), so both hash exactly the same text.
Pure: no I/O, no duckdb.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rackplane.models import COMMANDS, EVENTS, REJECTIONS, Command, Event, JobSpec, Rejection

GENESIS = "0" * 64
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

EVENT_COLUMNS = (
    "cluster", "seq", "type", "at_us", "job", "node", "rack", "actor", "causation_id",
    "correlation_id", "payload",
)  # fmt: skip
COMMAND_COLUMNS = (
    "id", "cluster", "type", "issued_at_us", "job", "node", "rack", "actor", "causation_id",
    "correlation_id", "payload",
)  # fmt: skip
REJECTION_COLUMNS = (
    "key", "source_topic", "partition", "offset", "agent", "at_us", "reason", "payload",
)  # fmt: skip


def micros(at: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (exact, no float)."""
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def content(values: Sequence[Any]) -> str:
    """The hashed text of one row's columns."""
    return "\x1f".join("\x00" if v is None else str(v) for v in values)


def chain(prev: str, text: str) -> str:
    """The hash of a row whose content is `text`, after the row hashed `prev`."""
    return hashlib.sha256(f"{prev}\x1e{text}".encode()).hexdigest()


def _subject(message: Any) -> tuple[str | None, str | None, str | None]:
    """The job, node and rack a message is about (None where it names none)."""
    job = getattr(message, "job", None)
    if isinstance(job, JobSpec):
        job = job.id
    node = getattr(message, "node", None) or getattr(message, "old_node", None)
    rack = getattr(message, "rack", None) or getattr(message, "to_rack", None)
    return job, node, rack


def event_values(event: Event) -> tuple[Any, ...]:
    """The columns of `event` in `EVENT_COLUMNS` order."""
    job, node, rack = _subject(event)
    return (
        event.cluster, event.seq, event.type, micros(event.at), job, node, rack, event.actor,
        event.causation_id, event.correlation_id, EVENTS.dump_json(event).decode(),
    )  # fmt: skip


def command_values(command: Command) -> tuple[Any, ...]:
    """The columns of `command` in `COMMAND_COLUMNS` order."""
    job, node, rack = _subject(command)
    issued = micros(command.issued_at) if command.issued_at is not None else None
    return (
        command.id, command.cluster, command.type, issued, job, node, rack, command.actor,
        command.causation_id, command.correlation_id, COMMANDS.dump_json(command).decode(),
    )  # fmt: skip


def rejection_values(rejection: Rejection) -> tuple[Any, ...]:
    """The columns of `rejection` in `REJECTION_COLUMNS` order; its key is the digest of its
    JSON, so the same rejection read twice (a redelivery) has the same key."""
    payload = REJECTIONS.dump_json(rejection).decode()
    key = hashlib.sha256(payload.encode()).hexdigest()[:32]
    return (
        key, rejection.source_topic, rejection.partition, rejection.offset, rejection.agent,
        micros(rejection.at), rejection.reason, payload,
    )  # fmt: skip
