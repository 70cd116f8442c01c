"""Who wrote the log: events and checkpoints signed by the controller, and the readers' trust.

Rules of this file:
- The controller signs every event it appends, and every checkpoint record it saves, with the
  worker's key (`worker_key_file`): Ed25519 over `event_payload(event)` (the event without its
  signature, fields at their defaults left out, so a field added to the schema later does not
  change what an older event signed) or `checkpoint_payload(record)`. Each payload starts with
  its own context line, so no command's or other tool's signature can pass for an event's.
- A reader trusts the keys it is given (`LogTrust`): the worker's own public key and
  `log_keys`, from its configuration, never from the log (an event cannot vouch for the key
  that signed it). It refuses an event that is not signed by one of them, or whose signature
  does not verify: every reader skips it as if it were not there, and says so.
- `unsigned_prefix` (a log written before its workers had keys): an unsigned event is taken
  while the read has met no signed event or checkpoint of its partition yet; after one, only
  signed events are.
- Pure: no clock, no I/O. A signature once verified is remembered by its digest (with the
  payload's), so the agents of one worker that read the same event check it once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from nacl.exceptions import BadSignatureError  # light: no crypto bindings behind it
from pydantic import BaseModel

from rackplane.models import Event, Signature, key_id_of

if TYPE_CHECKING:  # PyNaCl's signing (~50 ms to import) is loaded with a key, not by every reader
    from nacl.signing import VerifyKey

EVENT_CONTEXT = b"rackplane event v1\n"
CHECKPOINT_CONTEXT = b"rackplane checkpoint v1\n"
VERIFIED_KEPT = 65_536
"""Digests of verified signatures kept per process (a few MB)."""

_verified: dict[bytes, None] = {}


class Signed(Protocol):
    """A record that carries a signature: an event or a checkpoint record."""

    @property
    def signature(self) -> Signature | None: ...


def event_payload(event: Event) -> bytes:
    """What an event's signature covers: `EVENT_CONTEXT`, its type, then its JSON without the
    signature and without fields at their defaults (the type is one of those, hence the
    line)."""
    body = type(event).__pydantic_serializer__.to_json(
        event, exclude={"signature"}, exclude_defaults=True
    )
    return b"%s%s\n%s" % (EVENT_CONTEXT, event.type.encode(), body)


def checkpoint_payload(record: BaseModel) -> bytes:
    """What a checkpoint record's signature covers: `CHECKPOINT_CONTEXT`, then its JSON
    without the signature and without fields at their defaults."""
    body = type(record).__pydantic_serializer__.to_json(
        record, exclude={"signature"}, exclude_defaults=True
    )
    return CHECKPOINT_CONTEXT + body


class LogTrustError(ValueError):
    """A log key that is not an Ed25519 public key."""


@dataclass(frozen=True)
class LogTrust:
    """The keys a reader takes events and checkpoints from."""

    keys: dict[str, VerifyKey]
    """Key id -> public key."""
    unsigned_prefix: bool = False
    """Take unsigned events until the first signed one of a partition (see the rules)."""

    @classmethod
    def of(cls, public_keys: Iterable[str], *, unsigned_prefix: bool = False) -> LogTrust:
        """Trust `public_keys` (base64 of the raw 32 bytes, as `rackplane keys show` prints).

        Raises:
            LogTrustError: a key is not base64 of 32 bytes, or there is none.
        """
        from nacl.signing import VerifyKey

        keys: dict[str, VerifyKey] = {}
        for text in public_keys:
            try:
                raw = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise LogTrustError(f"log key {text!r}: not base64") from None
            if len(raw) != 32:
                raise LogTrustError(f"log key {text!r}: {len(raw)} bytes, not 32 (Ed25519)")
            keys[key_id_of(raw)] = VerifyKey(raw)
        if not keys:
            raise LogTrustError("no log key: a signed log needs at least the worker's")
        return cls(keys, unsigned_prefix)

    def problem(self, record: Signed, payload: bytes) -> str | None:
        """Why `record` (whose signature covers `payload`) is not one of ours; None when it
        is signed by a trusted key and verifies."""
        sig = record.signature
        if sig is None:
            return "not signed"
        public = self.keys.get(sig.key)
        if public is None:
            return f"signed by key {sig.key}, which this reader does not trust"
        raw = sig.raw()
        seen = hashlib.blake2b(raw + payload, digest_size=20).digest()
        if seen in _verified:
            return None
        try:
            public.verify(payload, raw)
        except BadSignatureError:
            return f"its signature by key {sig.key} does not verify: changed after it was signed"
        if len(_verified) >= VERIFIED_KEPT:
            del _verified[next(iter(_verified))]
        _verified[seen] = None
        return None

    def event_problem(self, event: Event, *, signed_before: bool = True) -> str | None:
        """Why a reader refuses `event`; None when it takes it. `signed_before`: the read
        met a signed event or checkpoint of this partition already (see `unsigned_prefix`)."""
        if event.signature is None and self.unsigned_prefix and not signed_before:
            return None
        return self.problem(event, event_payload(event))


def judge(trust: LogTrust | None, event: Event, signed_before: bool) -> tuple[str | None, bool]:
    """(why a reader refuses `event` or None, whether its partition is signed from here on).
    No trust (a worker without a key): every event is taken, nothing is signed."""
    if trust is None:
        return None, signed_before
    why = trust.event_problem(event, signed_before=signed_before)
    return why, signed_before or (why is None and event.signature is not None)


K = TypeVar("K", bound=Hashable)


class Judge(Generic[K]):
    """`judge` over one reader's stream: remembers, per partition (or whatever `where` a
    reader keeps apart: a cluster in a history), whether a signed event was met there, and
    counts what it refused. No trust: takes everything."""

    def __init__(
        self, trust: LogTrust | None, signed_at_start: Callable[[K], bool] = lambda w: False
    ) -> None:
        """`signed_at_start`: whether a place was signed before this reader met it (a
        follower's replica read of the partition)."""
        self.trust = trust
        self.signed_at_start = signed_at_start
        self.signed: dict[K, bool] = {}
        self.forged = 0
        """Events refused: not signed by a trusted key."""

    def refuses(self, where: K, event: Event) -> str | None:
        """Why `event`, met at `where`, is not the controller's; None when it is taken."""
        if self.trust is None:
            return None
        before = self.signed.get(where)
        if before is None:
            before = self.signed_at_start(where)
        why, self.signed[where] = judge(self.trust, event, before)
        if why is not None:
            self.forged += 1
        return why

    def forget(self) -> None:
        """A rebalance: what was met is read again."""
        self.signed.clear()
