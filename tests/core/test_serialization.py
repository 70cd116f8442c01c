"""Every command and event survives a JSON round trip through the one TypeAdapter of its union."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from rackplane.models import COMMANDS, EVENTS
from rackplane.streams.codec import decode_command, decode_event, encode_command, encode_event
from tests.strategies import COMMAND_TYPES, EVENT_TYPES, from_model


def test_the_unions_cover_every_command_and_event_type() -> None:
    assert len(COMMAND_TYPES) == 28
    assert len(EVENT_TYPES) == 30


@pytest.mark.parametrize("cls", COMMAND_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_every_command_round_trips_through_json(cls: type[BaseModel], data: st.DataObject) -> None:
    command = data.draw(from_model(cls))
    assert COMMANDS.validate_json(COMMANDS.dump_json(command)) == command
    assert encode_command(command) == COMMANDS.dump_json(command)  # the codec's typed path
    assert decode_command(encode_command(command)) == command


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_every_event_round_trips_through_json(cls: type[BaseModel], data: st.DataObject) -> None:
    event = data.draw(from_model(cls))
    assert EVENTS.validate_json(EVENTS.dump_json(event)) == event
    assert encode_event(event) == EVENTS.dump_json(event)  # the codec's typed path
    assert decode_event(encode_event(event)) == event


def test_an_unknown_type_is_refused_with_the_allowed_tags() -> None:
    with pytest.raises(ValueError, match="does not match any of the expected tags"):
        COMMANDS.validate_json(b'{"type": "RebootRack", "id": "x", "cluster": "c", "actor": "a"}')


def test_unknown_fields_are_refused() -> None:
    raw = b'{"type": "CordonNode", "id": "x", "cluster": "c", "actor": "a", "node": "n", "x": 1}'
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        COMMANDS.validate_json(raw)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b'{"type": "RebootRack", "id": "x", "cluster": "c", "actor": "a"}', "expected tags"),
        (
            b'{"type": "CordonNode", "id": "x", "cluster": "c", "actor": "a"}',
            "node\n  Field required",
        ),
        (b'{"id": "x", "cluster": "c", "actor": "a", "node": "n"}', "Unable to extract tag"),
        (b"\xff\xfe", "Invalid JSON"),
    ],
    ids=["unknown type", "missing field", "no type", "not UTF-8"],
)
def test_the_codec_refuses_what_the_union_refuses_with_the_unions_reason(
    raw: bytes, error: str
) -> None:
    with pytest.raises(ValidationError) as codec:
        decode_command(raw)
    with pytest.raises(ValidationError) as union:
        COMMANDS.validate_json(raw)
    assert str(codec.value) == str(union.value)
    assert error in str(codec.value)


def test_a_misleading_first_type_key_gets_the_unions_answer() -> None:
    raw = (
        b'{"type":"UncordonNode","id":"x","cluster":"c","actor":"a","node":"n","type":"CordonNode"}'
    )
    assert decode_command(raw) == COMMANDS.validate_json(raw)
