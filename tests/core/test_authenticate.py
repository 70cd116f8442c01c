"""Who sent it: signed commands and roles in a cluster that trusts keys.

The cluster below trusts five keys (one per role) and registers with alice's admin key:

    alice  operator:alice   admin         bob    user:bob        operator
    carol  user:carol       operator      k8s    runtime:k8s     runtime
    worker worker:w1        policy        dcgm   exporter:dcgm   exporter

    r01  [n01 .. n06]   j1 (owner user:bob, 4 nodes) on n01-n04, n05 cordoned
    r02  [n01 .. n06]
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given as hgiven
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from rackplane.keyfiles import KeyFile
from rackplane.models import (
    CancelJob,
    Command,
    CommandRejected,
    CompleteJob,
    ConfigurePolicy,
    CordonNode,
    Health,
    PlaceJob,
    PolicyConfigured,
    PolicySettings,
    PreemptJobs,
    RegisterTopology,
    ReportNodeHealth,
    RevokeKey,
    Role,
    Signature,
    SliceAssignment,
    StartJob,
    SubmitJob,
    TrustKey,
    UncordonNode,
)
from rackplane.policies._authenticate import authenticate
from rackplane.policies._checks import Rejected
from tests.builders import Harness, cmd, job, node, nodes, rack, topology

KEYS = {
    "alice": KeyFile.new("operator:alice"),
    "bob": KeyFile.new("user:bob"),
    "carol": KeyFile.new("user:carol"),
    "k8s": KeyFile.new("runtime:k8s"),
    "worker": KeyFile.new("worker:w1"),
    "dcgm": KeyFile.new("exporter:dcgm"),
    "eve": KeyFile.new("operator:eve"),  # trusted by nobody
}
ROLES = {
    "alice": Role.ADMIN,
    "bob": Role.OPERATOR,
    "carol": Role.OPERATOR,
    "k8s": Role.RUNTIME,
    "worker": Role.POLICY,
    "dcgm": Role.EXPORTER,
}
R01, R02 = rack("r01", 6), rack("r02", 6)


def trusted(*names: str) -> tuple[Any, ...]:
    return tuple(KEYS[n].trusted(ROLES[n]) for n in names)


def keyed_settings(**changes: Any) -> PolicySettings:
    return PolicySettings(**({"spares_per_rack": 1, "keys": trusted(*ROLES)} | changes))


def signed(by: str, cls: type[Any], **fields: Any) -> Command:
    """A command signed by `by`, as its actor unless `actor` says otherwise."""
    fields.setdefault("actor", KEYS[by].actor)
    return KEYS[by].sign(cmd(cls, **fields))


def bootstrap() -> Command:
    return signed("alice", RegisterTopology, topology=topology(R01, R02), settings=keyed_settings())


def given() -> Harness:
    h = Harness().given(
        bootstrap(),
        signed("bob", SubmitJob, job=job("j1", 4, slice_size=4, owner="user:bob")),
        signed(
            "worker",
            PlaceJob,
            job="j1",
            slices=(SliceAssignment(nodes=nodes("r01", 1, 4)),),
            actor="policy:tas",
        ),
        signed("bob", CordonNode, node=node("r01", 5)),
    )
    assert not [e for e in h.log if isinstance(e, CommandRejected)], h.log
    return h


def keys_of(h: Harness) -> tuple[Any, ...]:
    keys = h.state.settings.keys
    assert keys is not None
    return keys


@dataclass
class Case:
    id: str
    when: Callable[[Harness], Command]
    want: str
    """The first event's type, or a rejection code."""


CASES = [
    # authentication
    Case("an unsigned command is refused", lambda h: cmd(CordonNode, node=node("r02", 1),
         actor="user:bob"), "unauthenticated"),
    Case("a key trusted by nobody is refused", lambda h: signed("eve", CordonNode,
         node=node("r02", 1)), "unauthenticated"),
    Case("a key signs only as its own actor", lambda h: signed("bob", CordonNode,
         node=node("r02", 1), actor="operator:alice"), "unauthenticated"),
    Case("only a worker's key signs as a policy", lambda h: signed("bob", PreemptJobs,
         jobs=("j1",), cause="defrag", actor="policy:defrag"), "unauthenticated"),
    Case("a command changed after signing is refused", lambda h: signed("bob", CordonNode,
         node=node("r02", 1)).model_copy(update={"node": node("r02", 2)}), "unauthenticated"),
    Case("a signature moved to another command is refused", lambda h: cmd(CordonNode,
         node=node("r02", 2), actor="user:bob").model_copy(update={"signature": signed(
             "bob", CordonNode, node=node("r02", 1)).signature}), "unauthenticated"),
    # operators
    Case("an operator cordons", lambda h: signed("bob", CordonNode, node=node("r02", 1)),
         "NodeCordoned"),
    Case("an operator may not uncordon", lambda h: signed("bob", UncordonNode,
         node=node("r01", 5)), "not_authorized"),
    Case("an operator submits a job it owns", lambda h: signed("carol", SubmitJob,
         job=job("j2", 2, owner="user:carol")), "JobSubmitted"),
    Case("an operator may not submit in another's name", lambda h: signed("carol", SubmitJob,
         job=job("j2", 2, owner="user:bob")), "not_authorized"),
    Case("an operator may not place jobs", lambda h: signed("bob", PlaceJob, job="j1",
         slices=(SliceAssignment(nodes=nodes("r02", 1, 4)),)), "not_authorized"),
    Case("an operator may not preempt by hand", lambda h: signed("bob", PreemptJobs,
         jobs=("j1",)), "not_authorized"),
    Case("an operator may not change the settings", lambda h: signed("bob", ConfigurePolicy,
         settings=h.state.settings.model_copy(update={"spares_per_rack": 0})),
         "not_authorized"),
    # job lifecycle
    Case("the owner completes its job", lambda h: signed("bob", CompleteJob, job="j1"),
         "JobCompleted"),
    Case("the runtime starts any job", lambda h: signed("k8s", StartJob, job="j1"),
         "JobStarted"),
    Case("the runtime completes any job", lambda h: signed("k8s", CompleteJob, job="j1"),
         "JobCompleted"),
    Case("the runtime submits for any owner", lambda h: signed("k8s", SubmitJob,
         job=job("j2", 2, owner="user:dave")), "JobSubmitted"),
    Case("another operator may not complete the job", lambda h: signed("carol", CompleteJob,
         job="j1"), "not_authorized"),
    Case("another operator may not start the job", lambda h: signed("carol", StartJob,
         job="j1"), "not_authorized"),
    Case("another operator may not cancel the job", lambda h: signed("carol", CancelJob,
         job="j1"), "not_authorized"),
    Case("the owner cancels its job", lambda h: signed("bob", CancelJob, job="j1"),
         "JobCancelled"),
    # the worker's key
    Case("the worker's key proposes as a policy", lambda h: signed("worker", PreemptJobs,
         jobs=("j1",), cause="defrag", actor="policy:defrag"), "JobPreempted"),
    Case("the worker's key reports as the GPU Manager", lambda h: signed("worker",
         ReportNodeHealth, node=node("r02", 1), health=Health.DEGRADED, cause="hot",
         actor="gpu_manager"), "NodeDegraded"),
    Case("the worker's key may not uncordon", lambda h: signed("worker", UncordonNode,
         node=node("r01", 5), actor="policy:tas"), "not_authorized"),
    Case("an exporter's key sends no command", lambda h: signed("dcgm", ReportNodeHealth,
         node=node("r02", 1), health=Health.DEGRADED, cause="hot"), "not_authorized"),
    # admins
    Case("an admin uncordons", lambda h: signed("alice", UncordonNode, node=node("r01", 5)),
         "NodeUncordoned"),
    Case("an admin preempts by hand", lambda h: signed("alice", PreemptJobs, jobs=("j1",)),
         "JobPreempted"),
    Case("an admin cancels another's job", lambda h: signed("alice", CancelJob, job="j1"),
         "JobCancelled"),
    Case("an admin changes the settings", lambda h: signed("alice", ConfigurePolicy,
         settings=h.state.settings.model_copy(update={"spares_per_rack": 0})),
         "PolicyConfigured"),
    Case("not even an admin changes the keys by ConfigurePolicy", lambda h: signed("alice",
         ConfigurePolicy, settings=h.state.settings.model_copy(update={"keys": trusted(
             "alice")})), "not_authorized"),
    Case("an admin trusts a key", lambda h: signed("alice", TrustKey,
         key=KEYS["eve"].trusted(Role.OPERATOR)), "PolicyConfigured"),
    Case("an operator may not trust a key", lambda h: signed("bob", TrustKey,
         key=KEYS["eve"].trusted(Role.ADMIN)), "not_authorized"),
    Case("an operator may not revoke a key", lambda h: signed("bob", RevokeKey,
         key=KEYS["alice"].id), "not_authorized"),
    Case("the last admin key is not revoked", lambda h: signed("alice", RevokeKey,
         key=KEYS["alice"].id), "invalid_state"),
    Case("a policy's name is only for a key of the policy role", lambda h: signed("alice",
         TrustKey, key=KeyFile.new("policy:tas").trusted(Role.OPERATOR)), "invalid_state"),
    Case("the GPU Manager's name is only for a key of the policy role", lambda h: signed(
         "alice", TrustKey, key=KeyFile.new("gpu_manager").trusted(Role.OPERATOR)),
         "invalid_state"),
    Case("an operator may not re-register", lambda h: signed("bob", RegisterTopology,
         topology=topology(R01, R02), settings=keyed_settings(spares_per_rack=0)),
         "not_authorized"),
    Case("an admin re-registers", lambda h: signed("alice", RegisterTopology,
         topology=topology(R01, R02, rack("r03", 6)), settings=None), "TopologyRegistered"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_who_may_do_what(case: Case) -> None:
    h = given()
    before = h.state
    events = h.when(case.when(h))
    if case.want[0].islower():
        (rejected,) = events
        assert isinstance(rejected, CommandRejected), events
        assert rejected.code == case.want, rejected.reason
        assert (h.state.jobs, h.state.nodes, h.state.settings) == (
            before.jobs,
            before.nodes,
            before.settings,
        )
    else:
        assert [type(e).__name__ for e in events][:1] == [case.want], events


def test_refusals_say_why() -> None:
    h = given()
    (unsigned,) = h.when(cmd(CordonNode, node=node("r02", 1), actor="user:bob"))
    assert isinstance(unsigned, CommandRejected)
    assert "is not signed: cluster 'c1' takes only commands signed by a key it trusts" in (
        unsigned.reason
    )
    (role,) = h.when(signed("bob", UncordonNode, node=node("r01", 5)))
    assert isinstance(role, CommandRejected)
    assert role.reason == (
        f"UncordonNode needs a key with the role admin: key {KEYS['bob'].id} of 'user:bob' "
        "has operator"
    )


def test_the_first_registration_is_signed_by_an_admin_key_it_brings() -> None:
    unsigned = cmd(RegisterTopology, topology=topology(R01), settings=keyed_settings())
    (e,) = Harness().when(unsigned)
    assert isinstance(e, CommandRejected) and e.code == "unauthenticated"
    by_operator = signed("bob", RegisterTopology, topology=topology(R01), settings=keyed_settings())
    (e,) = Harness().when(by_operator)
    assert isinstance(e, CommandRejected) and e.code == "not_authorized"
    by_stranger = signed("eve", RegisterTopology, topology=topology(R01), settings=keyed_settings())
    (e,) = Harness().when(by_stranger)
    assert isinstance(e, CommandRejected) and e.code == "unauthenticated"
    (e,) = Harness().when(bootstrap())
    assert type(e).__name__ == "TopologyRegistered"


def test_a_revoked_key_signs_nothing_and_is_never_trusted_again() -> None:
    h = given()
    (e,) = h.when(signed("alice", RevokeKey, key=KEYS["bob"].id, reason="laptop stolen"))
    assert isinstance(e, PolicyConfigured)
    assert e.reason == f"revoked key {KEYS['bob'].id} of 'user:bob': laptop stolen"
    assert KEYS["bob"].id in h.state.settings.revoked_keys
    (e,) = h.when(signed("bob", CordonNode, node=node("r02", 1)))
    assert isinstance(e, CommandRejected) and e.code == "unauthenticated"
    assert "was revoked" in e.reason
    (e,) = h.when(signed("alice", TrustKey, key=KEYS["bob"].trusted(Role.OPERATOR)))
    assert isinstance(e, CommandRejected) and e.code == "invalid_state"


def test_a_key_trusted_by_an_admin_signs_from_then_on() -> None:
    h = given()
    (e,) = h.when(signed("eve", CordonNode, node=node("r02", 1)))
    assert isinstance(e, CommandRejected) and e.code == "unauthenticated"
    h.when(signed("alice", TrustKey, key=KEYS["eve"].trusted(Role.OPERATOR), reason="new hire"))
    assert [k.actor for k in keys_of(h)][-1] == "operator:eve"
    (e,) = h.when(signed("eve", CordonNode, node=node("r02", 1)))
    assert type(e).__name__ == "NodeCordoned" and e.actor == "operator:eve"
    (e,) = h.when(signed("alice", TrustKey, key=KEYS["eve"].trusted(Role.OPERATOR)))
    assert type(e).__name__ == "CommandIgnored"  # already so


def test_an_open_clusters_admin_list_decides_who_turns_keys_on() -> None:
    h = Harness().given(
        cmd(RegisterTopology, topology=topology(R01), settings=PolicySettings(admins=("user:bob",)))
    )
    capture = signed("eve", RegisterTopology, topology=topology(R01),
                     settings=PolicySettings(keys=(KEYS["eve"].trusted(Role.ADMIN),)))  # fmt: skip
    (e,) = h.when(capture)
    assert isinstance(e, CommandRejected) and e.code == "not_authorized"
    assert h.state.settings.keys is None
    by_admin = signed("bob", RegisterTopology, topology=topology(R01),
                      settings=PolicySettings(admins=("user:bob",),
                                              keys=(KEYS["bob"].trusted(Role.ADMIN),)))  # fmt: skip
    (e,) = h.when(by_admin)
    assert type(e).__name__ == "TopologyRegistered"
    assert keys_of(h) == (KEYS["bob"].trusted(Role.ADMIN),)


def test_every_command_type_has_a_role_rule() -> None:
    from rackplane.policies._authorize import ROLE_RULES
    from tests.strategies import COMMAND_TYPES

    assert set(ROLE_RULES) == set(COMMAND_TYPES)


def test_a_cluster_without_keys_takes_unsigned_commands() -> None:
    h = Harness()
    h.when(cmd(RegisterTopology, topology=topology(R01), settings=PolicySettings()))
    (e,) = h.when(cmd(CordonNode, node=node("r01", 1), actor="user:anyone"))
    assert type(e).__name__ == "NodeCordoned"


# -- no change of a signed command verifies ---------------------------------------------------

FIELDS = {
    "id": st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    "actor": st.sampled_from(["user:bob", "operator:alice", "user:bobb", "policy:tas"]),
    "node": st.sampled_from([node("r01", i) for i in range(1, 7)]),
    "reason": st.text(st.characters(codec="utf-8", categories=("L", "N", "Zs")), max_size=30),
    "cluster": st.sampled_from(["c1", "c2", "c1x"]),
}


@hsettings(max_examples=300, deadline=None)
@hgiven(
    field=st.sampled_from(sorted(FIELDS)),
    data=st.data(),
)
def test_no_change_of_a_signed_command_verifies(field: str, data: st.DataObject) -> None:
    h = given()
    original = signed("bob", CordonNode, node=node("r02", 1), reason="fan")
    value = data.draw(FIELDS[field].filter(lambda v: v != getattr(original, field)))
    changed = original.model_copy(update={field: value})
    with pytest.raises(Rejected) as refused:
        authenticate(h.state, changed)
    assert refused.value.code == "unauthenticated"
    assert authenticate(h.state, original) == KEYS["bob"].trusted(Role.OPERATOR)


@hsettings(max_examples=200, deadline=None)
@hgiven(index=st.integers(0, 63), bit=st.integers(0, 7))
def test_no_flipped_bit_of_a_signature_verifies(index: int, bit: int) -> None:
    h = given()
    original = signed("bob", CordonNode, node=node("r02", 1))
    assert original.signature is not None
    raw = bytearray(original.signature.raw())
    raw[index] ^= 1 << bit
    forged = original.model_copy(
        update={
            "signature": Signature(key=original.signature.key, value=base64.b64encode(raw).decode())
        }
    )
    with pytest.raises(Rejected) as refused:
        authenticate(h.state, forged)
    assert refused.value.code == "unauthenticated"
