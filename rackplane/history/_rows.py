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

GENESIS = "0" * 64


def chain(prev: str, payload: str) -> str:
    """The hash of a row whose payload is `payload`, after the row hashed `prev`."""
    return hashlib.sha256(f"{prev}\x1e{payload}".encode()).hexdigest()


def rejection_key(payload: str) -> str:
    """The dedupe key of a rejection: the digest of its JSON (a redelivery has the same)."""
    return hashlib.sha256(payload.encode()).hexdigest()[:32]
