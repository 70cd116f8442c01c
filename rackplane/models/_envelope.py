"""The envelope every command and event carries (DESIGN.md, "Events and commands")."""

from __future__ import annotations

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from rackplane.models._ids import Actor, ClusterId, CommandId, CompoundId, EventId

SCHEMA_VERSION = 1


class CommandEnvelope(BaseModel):
    """A request to change one cluster. Its `id` is unique: a redelivered id is a no-op."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = Field(default=SCHEMA_VERSION, ge=1)
    id: CommandId
    cluster: ClusterId
    actor: Actor
    issued_at: AwareDatetime | None = None
    causation_id: CompoundId | None = None
    correlation_id: CompoundId | None = None


class EventEnvelope(BaseModel):
    """Something that happened in one cluster. Immutable; only ever appended.

    `(cluster, seq)` is the dedupe key and `seq` is gapless per cluster. `causation_id` is the
    id of the command that caused the event; `correlation_id` ties a whole cascade together.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = Field(default=SCHEMA_VERSION, ge=1)
    id: EventId
    cluster: ClusterId
    seq: int = Field(ge=1)
    at: AwareDatetime
    actor: Actor
    causation_id: CompoundId | None = None
    correlation_id: CompoundId | None = None
