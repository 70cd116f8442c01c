"""Who sent it: a command's signature checked against its cluster's trusted keys.

Rules of this file:
- A cluster whose settings hold `keys` authenticates every command; one without (None)
  authenticates none (a single operator's or a test's setup, as `admins=None`).
- The keys that judge a command are the cluster's, except for a `RegisterTopology` of a
  cluster that has none yet (its first registration, or the one that turns signatures on):
  the keys it brings, so the bootstrap admin signs its own registration.
- A command passes when it carries a signature by a trusted key (not revoked) that signs as
  its actor (a key of the `policy` role also signs as `policy:<name>` and `gpu_manager`:
  the worker's key) and the signature verifies over `signing_payload(command)`. Anything
  else is `CommandRejected(code="unauthenticated")` with the reason, before any other check,
  so the actor recorded on every other event is the verified one.
- Verification is pure (Ed25519 is deterministic; no clock, no randomness). Public keys are
  parsed once per process and kept.
"""

from __future__ import annotations

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from rackplane.models import Command, RegisterTopology, Role, TrustedKey, signing_payload
from rackplane.policies._checks import reject
from rackplane.projections.state import ClusterState

WORKER_ACTORS = ("gpu_manager",)
"""Actors a `policy` key signs as besides `policy:<name>`."""

_parsed: dict[str, VerifyKey] = {}
_indexes: dict[int, tuple[tuple[TrustedKey, ...], dict[str, TrustedKey]]] = {}
"""Key lists by id() -> (the list, its keys by id): held, so an id() is not reused while its
entry lives; a few entries (a list changes only with `TrustKey`/`RevokeKey`)."""
_INDEXES_KEPT = 64


def judging_keys(s: ClusterState, c: Command) -> tuple[TrustedKey, ...] | None:
    """The keys `c` must be signed by (None: the cluster authenticates nothing)."""
    if isinstance(c, RegisterTopology) and s.settings.keys is None:
        return c.settings.keys if c.settings is not None else None
    return s.settings.keys


def signs_as(key: TrustedKey, actor: str) -> bool:
    """Whether `key` may sign commands of `actor`."""
    if actor == key.actor:
        return True
    return Role.POLICY in key.roles and (actor.startswith("policy:") or actor in WORKER_ACTORS)


def authenticate(s: ClusterState, c: Command) -> TrustedKey | None:
    """The trusted key that signed `c` (None: the cluster authenticates nothing).

    Raises:
        Rejected: code `unauthenticated`, with the reason.
    """
    keys = judging_keys(s, c)
    if keys is None:
        return None
    sig = c.signature
    if sig is None:
        reject(
            "unauthenticated",
            f"{c.type} {c.id} is not signed: cluster {s.cluster!r} takes only commands signed "
            "by a key it trusts (`rackplane keys`)",
        )
    key = _by_id(keys).get(sig.key)
    if key is None:
        if sig.key in s.settings.revoked_keys:
            reject("unauthenticated", f"key {sig.key} was revoked: it signs nothing any more")
        reject("unauthenticated", f"key {sig.key} is not one cluster {s.cluster!r} trusts")
    if not signs_as(key, c.actor):
        reject(
            "unauthenticated",
            f"key {key.id} signs as {key.actor!r}, not as {c.actor!r}",
        )
    if not verifies(key, sig.raw(), signing_payload(c)):
        reject(
            "unauthenticated",
            f"the signature of {c.id} by key {key.id} does not verify: the command was changed "
            "after it was signed, or signed with another key",
        )
    return key


def _by_id(keys: tuple[TrustedKey, ...]) -> dict[str, TrustedKey]:
    """`keys` by id (a lookup per command, whatever the list's length)."""
    got = _indexes.get(id(keys))
    if got is not None and got[0] is keys:
        return got[1]
    if len(_indexes) >= _INDEXES_KEPT:
        _indexes.pop(next(iter(_indexes)))
    index = {k.id: k for k in keys}
    _indexes[id(keys)] = (keys, index)
    return index


def verifies(key: TrustedKey, signature: bytes, payload: bytes) -> bool:
    """Whether `signature` is `key`'s over `payload`."""
    public = _parsed.get(key.public_key)
    if public is None:
        public = _parsed[key.public_key] = VerifyKey(key.raw())
    try:
        public.verify(payload, signature)
    except BadSignatureError:
        return False
    return True
