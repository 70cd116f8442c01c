"""The envelope every command and event carries (DESIGN.md, "Events and commands")."""

from typing import NamedTuple

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from rackplane.models._ids import Actor, ClusterId, CommandId, CompoundId, EventId
from rackplane.models.keys import Signature

SCHEMA_VERSION = 1


class CommandEnvelope(BaseModel):
    """A request to change one cluster. Its `id` is unique: a redelivered id is a no-op."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    schema_version: int = Field(default=SCHEMA_VERSION, ge=1)
    id: CommandId
    cluster: ClusterId
    actor: Actor
    issued_at: AwareDatetime | None = None
    causation_id: CompoundId | None = None
    correlation_id: CompoundId | None = None
    signature: Signature | None = None
    """Its actor's Ed25519 signature (`models.keys`): required in a cluster whose settings
    hold keys, checked before anything else is."""


class CommandPosition(NamedTuple):
    """Where a command was read: its partition and offset in the commands topic.

    The controller stamps it on every event the command causes (`command_partition`,
    `command_offset`), so the log itself says which commands were decided: a redelivery of
    any age is recognised by its position, not only by its id (whose window is finite).
    """

    partition: int
    offset: int


class EventEnvelope(BaseModel):
    """Something that happened in one cluster. Immutable; only ever appended.

    `(cluster, seq)` is the dedupe key and `seq` is gapless per cluster. `causation_id` is the
    id of the command that caused the event; `correlation_id` ties a whole cascade together;
    `command_partition` and `command_offset` say where that command was read from the
    commands topic (None for commands that never went through a topic: the in-process engine,
    the simulator).
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    schema_version: int = Field(default=SCHEMA_VERSION, ge=1)
    id: EventId
    cluster: ClusterId
    seq: int = Field(ge=1)
    at: AwareDatetime
    actor: Actor
    causation_id: CompoundId | None = None
    correlation_id: CompoundId | None = None
    command_partition: int | None = Field(default=None, ge=0)
    command_offset: int | None = Field(default=None, ge=0)
    signature: Signature | None = None
    """The controller's Ed25519 signature with the worker's key (`rackplane.logtrust`): a
    reader that trusts log keys takes no event without it."""
