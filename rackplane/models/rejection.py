"""What lands on `rackplane.rejected`: input that failed to decode or validate, and why."""

from __future__ import annotations

from pydantic import AwareDatetime, BaseModel, ConfigDict, TypeAdapter


class Rejection(BaseModel):
    """One rejected message, with where it came from, so nothing is dropped silently."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source_topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    """The message key, as UTF-8 (undecodable bytes replaced)."""
    reason: str
    agent: str
    at: AwareDatetime
    size: int
    """Bytes in the original value."""
    raw_base64: str
    """The original value (its first 64 KiB), base64."""
    truncated: bool = False


REJECTIONS: TypeAdapter[Rejection] = TypeAdapter(Rejection)
