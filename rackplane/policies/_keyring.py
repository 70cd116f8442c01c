"""Deciders of the trusted keys: `TrustKey`, `RevokeKey`, and the rule that nothing else
changes them.

The keys live in the cluster's settings (`PolicySettings.keys`, `revoked_keys`), so a change
is a `PolicyConfigured` event with the new settings and a reason that says what changed: every
worker, replay and history sees it as it sees any settings change. Who may send these is
`_authorize`'s (admin keys); that they are signed, `_authenticate`'s.
"""

from __future__ import annotations

from rackplane.models import PolicyConfigured, PolicySettings, RevokeKey, Role, TrustKey
from rackplane.policies import _checks as chk
from rackplane.policies._authenticate import WORKER_ACTORS
from rackplane.policies._checks import Emitter
from rackplane.projections.state import ClusterState


def keys_kept(s: ClusterState, settings: PolicySettings) -> None:
    """Reject settings (of a `ConfigurePolicy` or a re-registration) that would change the
    trusted or revoked keys."""
    if (settings.keys, settings.revoked_keys) != (s.settings.keys, s.settings.revoked_keys):
        chk.reject(
            "not_authorized",
            "the trusted keys change only by TrustKey and RevokeKey (`rackplane keys trust`, "
            "`rackplane keys revoke`); a registration signed by an admin key it brings turns "
            "signatures on",
        )


def _keys(s: ClusterState) -> tuple:  # type: ignore[type-arg]
    if s.settings.keys is None:
        chk.reject(
            "invalid_state",
            f"cluster {s.cluster!r} trusts no keys: register it with `keys` in its settings, "
            "signed by an admin key among them, to turn signatures on",
        )
    return s.settings.keys


def _roles(roles: tuple[Role, ...]) -> str:
    return ", ".join(str(r) for r in roles)


def trust_key(s: ClusterState, c: TrustKey, out: Emitter) -> None:
    keys = _keys(s)
    new = c.key
    if new.id in s.settings.revoked_keys:
        chk.reject("invalid_state", f"key {new.id} was revoked: it is never trusted again")
    if (new.actor.startswith("policy:") or new.actor in WORKER_ACTORS) and (
        Role.POLICY not in new.roles
    ):
        chk.reject(
            "invalid_state",
            f"actor {new.actor!r} is a worker's name: only a key with the policy role (a "
            "worker's) signs as a policy or the GPU Manager",
        )
    old = next((k for k in keys if k.id == new.id), None)
    if old == new:
        chk.ignore(f"key {new.id} is already trusted for {new.actor!r} as {_roles(new.roles)}")
    kept = tuple(k for k in keys if k.id != new.id)
    settings = _settings(s, (*kept, new), s.settings.revoked_keys)
    what = "now" if old is None else f"instead of {old.actor!r} as {_roles(old.roles)},"
    out.emit(
        PolicyConfigured,
        settings=settings,
        reason=_reason(
            f"trusted key {new.id} {what} for {new.actor!r} as {_roles(new.roles)}", c.reason
        ),
    )


def revoke_key(s: ClusterState, c: RevokeKey, out: Emitter) -> None:
    keys = _keys(s)
    if c.key in s.settings.revoked_keys:
        chk.ignore(f"key {c.key} is already revoked")
    gone = next((k for k in keys if k.id == c.key), None)
    if gone is None:
        chk.reject("invalid_state", f"key {c.key} is not one cluster {s.cluster!r} trusts")
    kept = tuple(k for k in keys if k.id != c.key)
    if not any(Role.ADMIN in k.roles for k in kept):
        chk.reject(
            "invalid_state",
            f"key {c.key} is the last admin key: trust another admin key before revoking it",
        )
    settings = _settings(s, kept, (*s.settings.revoked_keys, c.key))
    out.emit(
        PolicyConfigured,
        settings=settings,
        reason=_reason(f"revoked key {c.key} of {gone.actor!r}", c.reason),
    )


def _settings(s: ClusterState, keys: tuple, revoked: tuple) -> PolicySettings:  # type: ignore[type-arg]
    return s.settings.model_copy(update={"keys": keys, "revoked_keys": revoked})


def _reason(what: str, why: str) -> str:
    return f"{what}: {why}" if why.strip() else what
