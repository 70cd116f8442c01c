"""Who sent it: actors' public keys, their roles, and the signature a command carries.

A cluster whose settings hold `keys` (`PolicySettings.keys`) authenticates every command:
the command is signed with Ed25519 by a key of that list, over `signing_payload(command)`,
and the signature travels in the command's `signature` field. Which commands a role may
send is `rackplane.policies._authorize`'s business; checking the signature is
`rackplane.policies._authenticate`'s. Private keys never appear here: they live in key files
(`rackplane.keyfiles`) on the machine of whoever signs.
"""

import base64
import hashlib
import json
from enum import StrEnum
from typing import Annotated, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from rackplane.models._ids import Actor

KeyId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$", max_length=16)]
"""A key's id: the first 16 hex digits of the SHA-256 of its raw 32-byte public key."""

SIGNING_CONTEXT = b"rackplane command v1\n"
"""Prefixed to what a command's signature covers, so no other message signed with the same key
(a key file of another tool) can pass for a command."""


class Role(StrEnum):
    """What a key may sign for (see `policies._authorize`)."""

    ADMIN = "admin"
    """Everything: registration, settings, keys, uncordon, by-hand preemption, others' jobs."""
    OPERATOR = "operator"
    """Submit and cancel its own jobs, cordon, repair and report health."""
    RUNTIME = "runtime"
    """A workload manager's adapter: start, complete and fail any job."""
    POLICY = "policy"
    """A worker: the policies' proposals (`policy:*` actors) and the GPU Manager's reports."""
    EXPORTER = "exporter"
    """Telemetry only: no command at all."""


def key_id_of(public_key: bytes) -> str:
    """The id of a raw 32-byte Ed25519 public key."""
    return hashlib.sha256(public_key).hexdigest()[:16]


class TrustedKey(BaseModel):
    """A public key a cluster trusts, the actor it signs as, and its roles."""

    # Field docstrings are for readers, not pydantic descriptions: `use_attribute_docstrings`
    # re-reads and parses the source at import (with the settings models, ~35 ms a command).
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: KeyId
    """`key_id_of(public key)`; checked."""
    public_key: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9+/]{43}=$", max_length=44)]
    """The raw 32-byte Ed25519 public key, base64."""
    actor: Actor
    """Who signs with it: the `actor` of its commands (a `policy` key also signs as
    `policy:<name>` and `gpu_manager`)."""
    roles: tuple[Role, ...] = Field(min_length=1, max_length=len(Role))

    @field_validator("roles")
    @classmethod
    def _distinct(cls, roles: tuple[Role, ...]) -> tuple[Role, ...]:
        if len(set(roles)) != len(roles):
            raise ValueError("a role is listed twice")
        return roles

    @model_validator(mode="after")
    def _id_matches(self) -> Self:
        if key_id_of(self.raw()) != self.id:
            raise ValueError(
                f"key id {self.id} is not the id of this public key ({key_id_of(self.raw())})"
            )
        return self

    def raw(self) -> bytes:
        """The public key's 32 bytes."""
        return base64.b64decode(self.public_key)


class Signature(BaseModel):
    """An Ed25519 signature of a command by one of its cluster's trusted keys."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    key: KeyId
    value: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9+/]{86}==$", max_length=88)]
    """The 64-byte signature, base64."""

    def raw(self) -> bytes:
        return base64.b64decode(self.value)


def signing_payload(command: BaseModel) -> bytes:
    """What a command's signature covers: `SIGNING_CONTEXT`, then the command without its
    signature as canonical JSON (sorted keys, no spaces; fields at their defaults left out,
    so a field added to the schema later does not change what older commands signed; the
    `type` always in)."""
    body = command.model_dump(mode="json", exclude={"signature"}, exclude_defaults=True)
    body["type"] = getattr(command, "type", type(command).__name__)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return SIGNING_CONTEXT + text.encode()
