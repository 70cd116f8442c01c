"""The hash chain of the history tables, and the dedupe key of rejections.

Rules of this file:
- Every table is one hash chain in `row_id` order: a row's hash is
  sha256(previous row's hash, 0x1e, the row's JSON payload), the first row's previous hash is
  `GENESIS`. The payload holds every field of the message, so it is what is hashed; the typed
  columns are copies of payload fields for queries, and `verify` checks them against the
  payload in SQL (`_schema.TYPED_CHECK`), so an edit of either is found.
Pure: no I/O, no duckdb.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

GENESIS = "0" * 64


def chain(prev: str, payload: str) -> str:
    """The hash of a row whose payload is `payload`, after the row hashed `prev`."""
    return hashlib.sha256(f"{prev}\x1e{payload}".encode()).hexdigest()


def chain_all(prev: str, payloads: Iterable[bytes]) -> list[str]:
    """The hashes of rows whose UTF-8 payloads follow one another after the row hashed `prev`:
    `chain` over each in turn (the writer's form: bytes in, no str built per payload)."""
    hashes: list[str] = []
    keep = hashes.append
    sha256 = hashlib.sha256
    last = prev.encode()
    for payload in payloads:
        h = sha256(last + b"\x1e" + payload).hexdigest()
        keep(h)
        last = h.encode()
    return hashes


def rejection_key(payload: bytes) -> str:
    """The dedupe key of a rejection: the digest of its UTF-8 JSON (a redelivery has the same)."""
    return hashlib.sha256(payload).hexdigest()[:32]
