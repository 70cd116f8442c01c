"""Bytes on the wire <-> events and commands.

Values are the JSON of `rackplane.models.EVENTS` / `COMMANDS` (a discriminated union on
`type`); keys are the cluster id in UTF-8, so one partition orders one cluster. Decoding is the
only way bytes become models: anything that is not a valid event or command raises pydantic's
`ValidationError` (also for bytes that are not JSON or not UTF-8), and the caller routes it to
`rackplane.rejected`. Pure: no I/O.

The unions' schemas are built on first use (`defer_build`): a one-shot client (`rackplane
submit`) would otherwise build ~60 schemas to send one command and read a few events. So a
value is encoded by its own model's serializer and decoded first by the model its `type`
names, which builds only the types a process meets; the bytes and the models are the same as
the union's (tests/core/test_serialization.py), and anything the typed path does not take
(no `type` found, or the value breaks it) goes through the union, whose error is the one
raised.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar, cast, get_args

from pydantic import BaseModel, TypeAdapter, ValidationError

from rackplane.models import COMMANDS, EVENTS, Command, Event

__all__ = [
    "command_key",
    "decode_command",
    "decode_event",
    "encode_command",
    "encode_event",
    "event_key",
]


_T = TypeVar("_T")
_TYPE = re.compile(rb'"type"\s*:\s*"([A-Za-z]{1,64})"')


def _members(union: Any) -> dict[bytes, type[BaseModel]]:
    """Each model of a discriminated union (`Annotated[A | B | ..., Field(...)]`) by its tag."""
    return {cls.model_fields["type"].default.encode(): cls for cls in get_args(get_args(union)[0])}


_EVENT_MODELS = _members(Event)
_COMMAND_MODELS = _members(Command)


def _decode(raw: bytes, models: dict[bytes, type[BaseModel]], union: TypeAdapter[_T]) -> _T:
    """Validate `raw` with the model its first `type` names, else (or if that fails) the union."""
    found = _TYPE.search(raw) if isinstance(raw, bytes) else None
    model = models.get(found.group(1)) if found else None
    if model is not None:
        try:
            return cast(_T, model.model_validate_json(raw))
        except ValidationError:
            pass
    return union.validate_json(raw)


def encode_event(event: Event) -> bytes:
    """Return the wire form (JSON) of `event`."""
    return event.__pydantic_serializer__.to_json(event)


def decode_event(raw: bytes) -> Event:
    """Return the event encoded in `raw`.

    Raises:
        pydantic.ValidationError: `raw` is not JSON, has an unknown `type`, or misses or
            breaks a field.
    """
    return _decode(raw, _EVENT_MODELS, EVENTS)


def encode_command(command: Command) -> bytes:
    """Return the wire form (JSON) of `command`."""
    return command.__pydantic_serializer__.to_json(command)


def decode_command(raw: bytes) -> Command:
    """Return the command encoded in `raw`.

    Raises:
        pydantic.ValidationError: `raw` is not JSON, has an unknown `type`, or misses or
            breaks a field.
    """
    return _decode(raw, _COMMAND_MODELS, COMMANDS)


def event_key(event: Event) -> bytes:
    """Return the partition key of `event`: its cluster id in UTF-8."""
    return event.cluster.encode()


def command_key(command: Command) -> bytes:
    """Return the partition key of `command`: its cluster id in UTF-8."""
    return command.cluster.encode()
