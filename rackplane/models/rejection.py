"""What lands on `rackplane.rejected`: input that failed to decode or validate, and why.

A `Rejection` is built from bytes an attacker chose, so its builder (`streams.rejected`) makes
every field valid (`printable`: escaped, cut with a marker) rather than fail; the original
bytes, value and key, are kept in base64.
"""

from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter

from rackplane.models._text import Label, Note

RAW_KEPT = 64 * 1024
"""Bytes of a rejected value (and of its key) kept in the record."""

_Base64 = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9+/]*={0,2}$", max_length=(RAW_KEPT + 2) // 3 * 4)
]


class Rejection(BaseModel):
    """One rejected message, with where it came from, so nothing is dropped silently."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    source_topic: Label
    partition: int | None = None
    offset: int | None = None
    key: Label | None = None
    """The message key, as UTF-8 (undecodable bytes replaced, refused characters escaped,
    cut at 200 characters); `key_base64` holds the bytes when this is not exactly them."""
    reason: Note
    agent: Label
    at: AwareDatetime
    size: int = Field(ge=0)
    """Bytes in the original value."""
    raw_base64: _Base64
    """The original value (its first 64 KiB), base64."""
    truncated: bool = False
    key_base64: _Base64 | None = None
    """The original key (its first 64 KiB), base64, when `key` is not exactly it."""


REJECTIONS: TypeAdapter[Rejection] = TypeAdapter(Rejection)
