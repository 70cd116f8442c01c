"""A log only the controller writes: signed events and checkpoints, and what readers take.

The worker's key signs; a reader trusts the public keys it is configured with. The cases:
every event type signs and verifies through its wire form; no change of a field, and no
flipped bit of a signature, verifies; unsigned events and other keys' are refused, except,
with `unsigned_prefix`, the unsigned events before a partition's first signed one; and the
rebuild's reading (`eventlog._Reading`) skips a forged event so the controller's own event
of that seq is the one folded.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from rackplane.keyfiles import KeyFile
from rackplane.logtrust import LogTrust, LogTrustError, checkpoint_payload, event_payload, judge
from rackplane.models import (
    EVENTS,
    NodeCordoned,
    PolicyConfigured,
    PolicySettings,
    Signature,
    TopologyRegistered,
)
from rackplane.projections import initial_state
from rackplane.streams._snapshot_records import CheckpointRecord, SnapshotRef
from rackplane.streams.codec import decode_event, encode_event
from rackplane.streams.eventlog import _Reading
from tests.builders import rack, topology
from tests.strategies import EVENT_TYPES, from_model

WORKER = KeyFile.new("worker:w1")
OTHER = KeyFile.new("worker:w2")
TRUST = LogTrust.of([WORKER.public_key])
AT = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_every_event_type_signs_and_verifies_through_its_wire_form(
    cls: type[BaseModel], data: st.DataObject
) -> None:
    event = WORKER.sign_event(data.draw(from_model(cls)))
    assert TRUST.event_problem(event) is None
    assert TRUST.event_problem(decode_event(encode_event(event))) is None


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_no_change_of_a_signed_event_verifies(cls: type[BaseModel], data: st.DataObject) -> None:
    original = WORKER.sign_event(data.draw(from_model(cls)))
    other = data.draw(from_model(cls))
    differing = [
        f for f in type(original).model_fields
        if f not in ("signature", "type") and getattr(original, f) != getattr(other, f)
    ]  # fmt: skip
    if not differing:
        return
    field = data.draw(st.sampled_from(differing))
    assert TRUST.event_problem(original) is None  # verified first: the cache must not carry over
    changed = original.model_copy(update={field: getattr(other, field)})
    why = TRUST.event_problem(changed)
    assert why is not None and "does not verify" in why


@settings(max_examples=200, deadline=None)
@given(index=st.integers(0, 63), bit=st.integers(0, 7))
def test_no_flipped_bit_of_an_events_signature_verifies(index: int, bit: int) -> None:
    original = WORKER.sign_event(cordoned(5))
    assert original.signature is not None
    raw = bytearray(original.signature.raw())
    raw[index] ^= 1 << bit
    value = base64.b64encode(raw).decode()
    forged = original.model_copy(update={"signature": Signature(key=WORKER.id, value=value)})
    assert TRUST.event_problem(forged) is not None


def cordoned(seq: int, *, cluster: str = "c1", node: str = "r1-n0") -> NodeCordoned:
    return NodeCordoned(id=f"{cluster}-{seq}", cluster=cluster, seq=seq, at=AT,
                        actor="operator:alice", node=node)  # fmt: skip


def test_unsigned_and_foreign_events_are_refused_with_the_reason() -> None:
    assert TRUST.event_problem(cordoned(1)) == "not signed"
    foreign = OTHER.sign_event(cordoned(1))
    assert TRUST.event_problem(foreign) == (
        f"signed by key {OTHER.id}, which this reader does not trust"
    )
    both = LogTrust.of([WORKER.public_key, OTHER.public_key])
    assert both.event_problem(foreign) is None


def test_an_event_signature_is_no_command_signature() -> None:
    """The contexts differ: a signature over an event's payload made as if for a command (or
    the other way round) does not verify."""
    event = cordoned(3)
    assert event_payload(event).startswith(b"rackplane event v1\nNodeCordoned\n")
    as_command = Signature(key=WORKER.id, value=base64.b64encode(
        WORKER._private().sign(event_payload(event)[len(b"rackplane event v1\n"):]).signature
    ).decode())  # fmt: skip
    assert TRUST.event_problem(event.model_copy(update={"signature": as_command})) is not None


def test_unsigned_events_pass_only_before_the_first_signed_one_with_unsigned_prefix() -> None:
    prefix = LogTrust.of([WORKER.public_key], unsigned_prefix=True)
    old, new, late = cordoned(1), WORKER.sign_event(cordoned(2)), cordoned(3)
    why, signed = judge(prefix, old, False)
    assert (why, signed) == (None, False)
    why, signed = judge(prefix, new, signed)
    assert (why, signed) == (None, True)
    why, signed = judge(prefix, late, signed)
    assert why == "not signed" and signed
    assert judge(TRUST, old, False)[0] == "not signed"  # without the prefix: never
    assert judge(None, old, False) == (None, False)  # no trust: a worker without a key


def test_log_keys_that_are_not_ed25519_public_keys_are_refused() -> None:
    with pytest.raises(LogTrustError, match="not base64"):
        LogTrust.of(["not a key!"])
    with pytest.raises(LogTrustError, match="16 bytes, not 32"):
        LogTrust.of([base64.b64encode(b"x" * 16).decode()])
    with pytest.raises(LogTrustError, match="no log key"):
        LogTrust.of([])


def test_a_checkpoint_record_is_signed_over_every_snapshot_digest() -> None:
    ref = SnapshotRef(seq=9, events_offset=40, digest="ab" * 32, size=100, offsets=(3, 4))
    record = CheckpointRecord(partition=0, save=2, covers=41, snapshots={"c1": ref})
    signed = record.model_copy(update={"signature": WORKER.signature(checkpoint_payload(record))})
    assert TRUST.problem(signed, checkpoint_payload(signed)) is None
    again = CheckpointRecord.model_validate_json(signed.model_dump_json())
    assert TRUST.problem(again, checkpoint_payload(again)) is None
    moved = signed.model_copy(update={"snapshots": {"c1": ref.model_copy(update={"seq": 10})}})
    assert TRUST.problem(moved, checkpoint_payload(moved)) is not None
    assert TRUST.problem(record, checkpoint_payload(record)) == "not signed"
    as_event = WORKER.signature(event_payload(cordoned(1)))  # another record's signature
    assert TRUST.problem(record.model_copy(update={"signature": as_event}),
                         checkpoint_payload(record)) is not None  # fmt: skip


def records(*events: Any) -> list[SimpleNamespace]:
    return [
        SimpleNamespace(key=e.cluster.encode(), value=encode_event(e), offset=i, headers=[])
        for i, e in enumerate(events)
    ]


def registration() -> TopologyRegistered:
    return TopologyRegistered(id="c1-1", cluster="c1", seq=1, at=AT, actor="operator:alice",
                              topology=topology(rack("r1", nodes=4)),
                              settings=PolicySettings())  # fmt: skip


def test_a_rebuild_skips_a_forged_event_and_folds_the_controllers_event_of_that_seq() -> None:
    """The attack of issue 16: a `PolicyConfigured` making mallory admin, written to the
    events topic at the next seq before the controller's own event of that seq."""
    reg = WORKER.sign_event(registration())
    forged = PolicyConfigured(id="c1-x", cluster="c1", seq=2, at=AT, actor="operator:alice",
                              settings=PolicySettings(admins=("operator:mallory",)))  # fmt: skip
    node = reg.topology.racks[0].nodes[0]
    mine = WORKER.sign_event(cordoned(2, node=node))
    assert TRUST.event_problem(reg) is None
    tampered = mine.model_copy(update={"actor": "operator:mallory"})
    reading = _Reading(0, "events[0]", {}, initial_state, TRUST)
    reading.take(records(reg, forged, tampered, mine))
    log = reading.finish(4)
    assert log.forged == 2 and not log.broken and log.signed
    state = log.clusters["c1"].state
    assert state.seq == 2 and state.settings.admins is None and state.nodes[node].cordoned
    naive = _Reading(0, "events[0]", {}, initial_state)
    naive.take(records(reg, forged, mine))
    assert "c1" in naive.finish(3).broken  # a reader that trusts anything sees a fork


def test_a_rebuild_from_a_signed_checkpoint_takes_no_unsigned_event_even_with_the_prefix() -> None:
    prefix = LogTrust.of([WORKER.public_key], unsigned_prefix=True)
    reg = registration()
    fresh = _Reading(0, "events[0]", {}, initial_state, prefix)
    fresh.take(records(reg))
    assert fresh.finish(1).forged == 0  # an older, unsigned log: taken
    after = _Reading(0, "events[0]", {}, initial_state, prefix, signed=True)
    after.take(records(reg))
    assert after.finish(1).forged == 1


def test_the_wire_form_of_an_unsigned_event_is_unchanged_but_for_the_field() -> None:
    event = cordoned(1)
    assert EVENTS.validate_json(encode_event(event)).signature is None
