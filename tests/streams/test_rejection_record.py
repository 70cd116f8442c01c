"""A rejection record is built from bytes an attacker chose, and its builder never fails.

Pure: no broker. The key is decoded with errors="replace" and the reason quotes the input, so
whatever they hold must come out as a valid `Rejection` that survives its JSON round trip.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rackplane.models import COMMANDS, REJECTIONS, Rejection
from rackplane.models._text import text_problem
from rackplane.streams.rejected import reason_of, rejection


def build(*, key: bytes | None, reason: str = "bad", raw: bytes = b"{}") -> Rejection:
    record = rejection(
        raw=raw, reason=reason, agent="controller", topic="rackplane.commands",
        partition=3, offset=42, key=key,
    )  # fmt: skip
    assert REJECTIONS.validate_json(REJECTIONS.dump_json(record)) == record
    return record


@pytest.mark.parametrize(
    ("key", "want_key", "kept"),
    [
        pytest.param(b"c1", "c1", False, id="an ordinary key is kept as it is"),
        pytest.param("café".encode(), "café", False, id="UTF-8 text is kept as it is"),
        pytest.param(b"\xff\xfec1", "\ufffd\ufffdc1", True, id="undecodable bytes are replaced"),
        pytest.param(
            "operator:\u202eecila".encode(), "operator:\\u202eecila", True, id="an RLO is escaped"
        ),
        pytest.param(b"a\x00b\x1b[2J", "a\\u0000b\\u001b[2J", True, id="NUL and ESC are escaped"),
        pytest.param(b"\xef\xbb\xbfc1", "\\ufeffc1", True, id="a BOM is escaped"),
    ],
)
def test_a_hostile_key_becomes_printable_and_its_bytes_are_kept(
    key: bytes, want_key: str, kept: bool
) -> None:
    record = build(key=key)
    assert record.key == want_key
    if kept:
        assert record.key_base64 is not None
        assert base64.b64decode(record.key_base64) == key
    else:
        assert record.key_base64 is None


def test_a_megabyte_key_is_cut_with_a_marker_and_kept_in_base64() -> None:
    key = b"k" * 1_000_000
    record = build(key=key)
    assert record.key is not None and len(record.key) <= 200
    assert record.key.endswith("...[truncated: 1,000,000 characters]")
    assert record.key_base64 is not None
    assert base64.b64decode(record.key_base64) == key[: 64 * 1024]


def test_a_missing_key_stays_missing() -> None:
    record = build(key=None)
    assert (record.key, record.key_base64) == (None, None)


def test_a_megabyte_reason_full_of_bidi_controls_is_cut_to_the_field_limit() -> None:
    record = build(key=b"c1", reason="\u202e" * 1_000_000)
    assert len(record.reason) <= 4_000
    assert record.reason.startswith("\\u202e\\u202e")
    assert record.reason.endswith("...[truncated: 1,000,000 characters]")


def test_the_reason_of_a_command_with_a_hostile_field_name_is_printable_and_one_line() -> None:
    raw = b'{"type":"CordonNode","id":"x","cluster":"c","actor":"a","node":"n","\\u202e\\u0000":1}'
    with pytest.raises(ValidationError) as caught:
        COMMANDS.validate_json(raw)
    reason = reason_of(caught.value)
    record = build(key=b"c", reason=reason, raw=raw)
    assert record.reason == reason
    assert "\\u202e\\u0000" in record.reason and "\n" not in record.reason


def test_the_reason_of_a_spoofed_actor_names_the_character() -> None:
    raw = '{"type":"CancelJob","id":"x","cluster":"c","actor":"operator:\u202eecila","job":"j"}'
    with pytest.raises(ValidationError) as caught:
        COMMANDS.validate_json(raw.encode())
    assert reason_of(caught.value).startswith(
        "CancelJob.actor: contains a bidi control character (U+202E) at position 9"
    )


@settings(max_examples=200)
@given(key=st.none() | st.binary(max_size=400), reason=st.text(max_size=5_000), raw=st.binary())
def test_any_key_and_reason_make_a_valid_record(key: bytes | None, reason: str, raw: bytes) -> None:
    record = build(key=key, reason=reason, raw=raw)
    assert text_problem(record.reason) is None
    assert base64.b64decode(record.raw_base64) == raw
