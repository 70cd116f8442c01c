"""Key files: an actor's Ed25519 private key on the machine of whoever signs, and signing.

A key file is a small JSON document (`KeyFile`) written with mode 0600: the actor it signs
as, the key's id, its public key and its private key (base64 of the raw 32 bytes). The
private key is never printed, logged or put in a command; `rackplane keys show` prints the
rest, which is what a cluster's settings trust (`TrustedKey`). Generating a key draws from
the operating system's randomness (PyNaCl, libsodium), which is why this lives outside the core;
signing is deterministic (Ed25519), so two workers signing the same proposal produce the same
bytes.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Annotated, Self, TypeVar

from nacl.signing import SigningKey
from pydantic import BaseModel, ConfigDict, SecretStr, StringConstraints, ValidationError

from rackplane.logtrust import event_payload
from rackplane.models import (
    Actor,
    Event,
    KeyId,
    Role,
    Signature,
    TrustedKey,
    key_id_of,
    signing_payload,
)

C = TypeVar("C", bound=BaseModel)


_parsed: dict[str, tuple[str, SigningKey]] = {}
"""Key id -> (its private key as stored, parsed and checked once): signing is per command."""


class KeyFileError(ValueError):
    """A key file that cannot be read, written or used; the message names the file."""


class KeyFile(BaseModel):
    """An actor's key pair as stored on disk."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Annotated[str, StringConstraints(pattern=r"^rackplane-ed25519-key$")] = (
        "rackplane-ed25519-key"
    )
    actor: Actor
    id: KeyId
    public_key: str
    private_key: SecretStr

    @classmethod
    def new(cls, actor: str) -> Self:
        """A fresh key pair for `actor`."""
        private = SigningKey.generate()
        raw_public, raw_private = bytes(private.verify_key), bytes(private)
        return cls(
            actor=actor,
            id=key_id_of(raw_public),
            public_key=base64.b64encode(raw_public).decode(),
            private_key=SecretStr(base64.b64encode(raw_private).decode()),
        )

    def trusted(self, *roles: Role) -> TrustedKey:
        """What a cluster trusts of this key, with `roles`."""
        return TrustedKey(id=self.id, public_key=self.public_key, actor=self.actor, roles=roles)

    def sign(self, command: C) -> C:
        """`command` with this key's signature (its actor must be this key's, or a worker
        actor for a worker's key: the controller checks)."""
        private = self._private()
        value = private.sign(signing_payload(command)).signature
        signature = Signature(key=self.id, value=base64.b64encode(value).decode())
        return command.model_copy(update={"signature": signature})

    def signature(self, payload: bytes) -> Signature:
        """This key's signature over `payload` (a context line first: `rackplane.logtrust`)."""
        value = self._private().sign(payload).signature
        return Signature(key=self.id, value=base64.b64encode(value).decode())

    def sign_event(self, event: Event) -> Event:
        """`event` with this key's signature: the controller signs what it appends."""
        return event.model_copy(update={"signature": self.signature(event_payload(event))})

    def _private(self) -> SigningKey:
        parsed = _parsed.get(self.id)
        if parsed is not None and parsed[0] == self.private_key.get_secret_value():
            return parsed[1]
        raw = base64.b64decode(self.private_key.get_secret_value())
        try:
            private = SigningKey(raw)
        except (ValueError, TypeError):
            raise KeyFileError(f"key {self.id}: its private key is not 32 bytes") from None
        if key_id_of(bytes(private.verify_key)) != self.id:
            raise KeyFileError(f"key {self.id}: its private key does not match its id")
        _parsed[self.id] = (self.private_key.get_secret_value(), private)
        return private

    def save(self, path: Path) -> None:
        """Write the key file with mode 0600; refuse to overwrite one."""
        data = self.model_dump(mode="json") | {"private_key": self.private_key.get_secret_value()}
        text = json.dumps(data, indent=2)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise KeyFileError(f"{path}: exists; a key file is never overwritten") from None
        except OSError as err:
            raise KeyFileError(f"{path}: cannot write: {err.strerror}") from None
        with os.fdopen(fd, "w") as out:
            out.write(text + "\n")


def load_key(path: Path) -> KeyFile:
    """Read a key file; refuse one that others can read or anyone but its owner can write
    (its group may read it: a Kubernetes Secret volume with an `fsGroup` is 0440)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as err:
        raise KeyFileError(f"{path}: cannot read the key file: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise KeyFileError(
            f"{path}: not a rackplane key file (expected UTF-8 text; byte {err.start} cannot be"
            " decoded)"
        ) from None
    if mode & 0o027:
        raise KeyFileError(
            f"{path}: others can read or change this key file (mode {mode & 0o777:o}): chmod 600 it"
        )
    try:
        key = KeyFile.model_validate_json(text)
    except ValidationError as err:
        raise KeyFileError(f"{path}: not a rackplane key file ({err.errors()[0]['msg']})") from None
    key._private()  # the pair matches
    return key
