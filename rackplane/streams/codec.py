"""Bytes on the wire <-> events and commands.

Values are the JSON of `rackplane.models.EVENTS` / `COMMANDS` (a discriminated union on
`type`); keys are the cluster id in UTF-8, so one partition orders one cluster. Decoding is the
only way bytes become models: anything that is not a valid event or command raises pydantic's
`ValidationError` (also for bytes that are not JSON or not UTF-8), and the caller routes it to
`rackplane.rejected`. Pure: no I/O.
"""

from __future__ import annotations

from rackplane.models import COMMANDS, EVENTS, Command, Event

__all__ = [
    "command_key",
    "decode_command",
    "decode_event",
    "encode_command",
    "encode_event",
    "event_key",
]


def encode_event(event: Event) -> bytes:
    """Return the wire form (JSON) of `event`."""
    return EVENTS.dump_json(event)


def decode_event(raw: bytes) -> Event:
    """Return the event encoded in `raw`.

    Raises:
        pydantic.ValidationError: `raw` is not JSON, has an unknown `type`, or misses or
            breaks a field.
    """
    return EVENTS.validate_json(raw)


def encode_command(command: Command) -> bytes:
    """Return the wire form (JSON) of `command`."""
    return COMMANDS.dump_json(command)


def decode_command(raw: bytes) -> Command:
    """Return the command encoded in `raw`.

    Raises:
        pydantic.ValidationError: `raw` is not JSON, has an unknown `type`, or misses or
            breaks a field.
    """
    return COMMANDS.validate_json(raw)


def event_key(event: Event) -> bytes:
    """Return the partition key of `event`: its cluster id in UTF-8."""
    return event.cluster.encode()


def command_key(command: Command) -> bytes:
    """Return the partition key of `command`: its cluster id in UTF-8."""
    return command.cluster.encode()
