"""Snapshots: lossless, safe on bad bytes, and deciding goes on from them exactly as before.

The state machine reuses tests/core/test_properties.py's cluster (three racks of six nodes)
and its random operators, runtimes and policies, with two changes: at any step the state may
be replaced by the decoding of its own snapshot, and every command is also decided by a twin
state that never went through one; both must give the same events and states. The id window
is three commands, so both generations of ids seen are in use.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import fields, is_dataclass, replace
from datetime import datetime, timedelta, timezone
from hashlib import sha256
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule
from immutables import Map

from rackplane.models import (
    Command,
    CommandPosition,
    CordonNode,
    Event,
    Health,
    JobStatus,
    PolicySettings,
    RackHealth,
    ReportDisruptionBudget,
    ReportNodeHealth,
    SubmitJob,
    Topology,
    TopologyIndex,
)
from rackplane.policies import decide
from rackplane.projections import (
    BlockInfo,
    ClusterState,
    JobState,
    NodeState,
    QueueUsage,
    RackState,
    SeenCommands,
    SliceState,
    Window,
    evolve,
    fold,
    initial_state,
)
from rackplane.projections.snapshot import (
    CODEC_FIELDS,
    FORMAT_VERSION,
    SnapshotError,
    decode_state,
    encode_state,
)
from tests.builders import CLUSTER, Harness, cmd, job, register
from tests.core.test_properties import RACKS, ClusterMachine
from tests.strategies import AWARE, DURATIONS, IDS, job_specs, topologies

# -- every field is known -----------------------------------------------------------------


def _fields_of(cls: type) -> tuple[str, ...]:
    if is_dataclass(cls):
        return tuple(f.name for f in fields(cls))
    return tuple(cls._fields)  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", list(CODEC_FIELDS), ids=lambda c: c.__name__)
def test_the_codec_knows_every_field_of_the_state_records(cls: type) -> None:
    assert _fields_of(cls) == CODEC_FIELDS[cls], (
        f"{cls.__name__} changed: teach rackplane/projections/_snapshot_doc.py and "
        "_snapshot_read.py the new "
        "field, then list it in CODEC_FIELDS"
    )


def test_the_codec_lists_every_record_type_of_the_state() -> None:
    want = {ClusterState, NodeState, RackState, JobState, SliceState, BlockInfo, SeenCommands,
            QueueUsage, Window}  # fmt: skip
    assert set(CODEC_FIELDS) == want


# -- round trips through the controller ---------------------------------------------------


class TwinHarness(Harness):
    """A harness whose every command is decided twice: on its state, which may have been
    through snapshots, and on a twin that never was."""

    def __init__(self) -> None:
        super().__init__(replace(initial_state(CLUSTER), seen=SeenCommands(window=3)))
        self.twin = self.state
        self.snapshots = 0

    def when(self, command: Command, position: CommandPosition | None = None) -> list[Event]:
        want = decide(self.twin, command, now=self.now, position=position)
        got = super().when(command, position)
        assert got == want, "the state from a snapshot decided differently"
        for e in want:
            self.twin = evolve(self.twin, e)
        assert self.state == self.twin
        return got

    def restore(self) -> None:
        data = encode_state(self.state)
        self.state = decode_state(data)
        assert self.state == self.twin
        self.snapshots += 1


class SnapshotMachine(ClusterMachine):
    """ClusterMachine whose state goes through snapshots between commands."""

    @initialize()
    def register_cluster(self) -> None:
        self.h = TwinHarness().given(register(*RACKS, spares_per_rack=1))
        self.sent = []
        self.jobs = []
        self.offsets = [100, 0]

    @rule()
    def restore_from_a_snapshot(self) -> None:
        assert isinstance(self.h, TwinHarness)
        self.h.restore()

    @rule(data=st.data())
    def redeliver(self, data: st.DataObject) -> None:
        # With a window of three ids, a redelivery is known by its position only.
        if self.sent:
            again, position = data.draw(st.sampled_from(self.sent))
            assert decide(self.h.state, again, now=self.h.now, position=position) == []

    def teardown(self) -> None:
        if hasattr(self, "h"):
            # Replaying the log from a snapshot of any prefix gives the state the run reached.
            start = replace(initial_state(CLUSTER), seen=SeenCommands(window=3))
            assert fold(start, self.h.log) == self.h.state
            for k in (1, len(self.h.log) // 2, len(self.h.log)):
                head = decode_state(encode_state(fold(start, self.h.log[:k])))
                assert fold(head, self.h.log[k:]) == self.h.state


SnapshotMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestSnapshotsMidRun = SnapshotMachine.TestCase


def test_the_state_before_registration_round_trips() -> None:
    state = initial_state("c-empty")
    assert decode_state(encode_state(state)) == state


def test_a_registered_state_round_trips_with_its_topology_index_rebuilt() -> None:
    h = Harness().given(register(*RACKS, spares_per_rack=1))
    back = decode_state(encode_state(h.state))
    assert back == h.state
    assert back.index is not h.state.index
    assert isinstance(back.index, TopologyIndex)
    assert back.index.hops("r01", "r03") == h.state.index.hops("r01", "r03")  # type: ignore[union-attr]


def test_times_keep_their_utc_offset_and_naive_times_stay_naive() -> None:
    plus2 = datetime(2026, 11, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    state = replace(initial_state(CLUSTER), seq=3, at=plus2)
    back = decode_state(encode_state(state))
    assert back.at == plus2 and back.at.utcoffset() == timedelta(hours=2)  # type: ignore[union-attr]
    naive = replace(state, at=datetime(2026, 11, 1, 12, 0))
    assert decode_state(encode_state(naive)).at == naive.at


def test_a_command_id_with_a_line_break_round_trips() -> None:
    seen = SeenCommands(Map({"a\nb": 4, "c": 5, "": 6}), Map({"\n": 1}), window=9)
    state = replace(initial_state(CLUSTER), seen=seen)
    assert decode_state(encode_state(state)).seen == seen


# -- round trips of any state, even one evolve never makes ----------------------------------

_TEXT = st.text(max_size=12)
_OPT_IDS = st.none() | IDS


@st.composite
def _nodes(draw: st.DrawFn, topology: Topology | None) -> dict[str, NodeState]:
    known = [(n, r.id) for r in topology.racks for n in r.nodes] if topology else []
    out: dict[str, NodeState] = {}
    for n, rack in known:
        if draw(st.integers(0, 9)) == 0:  # absent from the map
            continue
        odd = draw(st.integers(0, 9)) == 0
        out[n] = NodeState(
            draw(IDS) if odd else n,
            draw(IDS) if odd else rack,
            draw(st.sampled_from(list(Health))),
            draw(st.booleans()),
            draw(_OPT_IDS),
            draw(st.none() | st.integers(0, 5)),
            draw(_TEXT),
        )
    for _ in range(draw(st.integers(0, 2))):  # nodes the topology does not have
        key = draw(IDS)
        out[key] = NodeState(key, draw(IDS), Health.FAILED, draw(st.booleans()))
    return out


@st.composite
def _racks(draw: st.DrawFn, topology: Topology | None) -> dict[str, RackState]:
    out: dict[str, RackState] = {}
    for r in topology.racks if topology else ():
        if draw(st.integers(0, 9)) == 0:
            continue
        free = draw(st.frozensets(st.sampled_from(r.nodes) | IDS, max_size=4))
        odd = draw(st.integers(0, 5)) == 0
        out[r.id] = RackState(
            r.id,
            draw(IDS) if odd else r.pod,
            draw(st.integers(0, 9)) if odd else len(r.nodes),
            r.gpus_per_node,
            free,
            draw(st.sampled_from(list(RackHealth))),
            draw(_TEXT),
        )
    if draw(st.booleans()):
        key = draw(IDS)
        out[key] = RackState(key, "p9", 3, 8, frozenset({"x", "y"}))
    return out


@st.composite
def _jobs(draw: st.DrawFn, nodes: list[str]) -> dict[str, JobState]:
    out: dict[str, JobState] = {}
    for spec in draw(st.lists(job_specs(), max_size=4, unique_by=lambda s: s.id)):
        slices = (
            tuple(
                SliceState(i, draw(st.integers(1, 8)), tuple(ns), (draw(IDS),))
                for i, ns in enumerate(
                    draw(st.lists(st.lists(st.sampled_from(nodes) | IDS, max_size=3), max_size=3))
                )
            )
            if nodes
            else ()
        )
        blocked = draw(
            st.none()
            | st.builds(
                BlockInfo,
                st.sampled_from(["capacity", "topology"]),
                AWARE,
                st.integers(0, 99),
                st.integers(0, 9),
                _TEXT,
            )
        )
        key = draw(IDS) if draw(st.integers(0, 5)) == 0 else spec.id
        out[key] = JobState(
            spec,
            draw(st.sampled_from(list(JobStatus))),
            draw(st.integers(0, 10**9)),
            draw(AWARE),
            slices,
            draw(st.none() | AWARE),
            draw(st.none() | AWARE),
            draw(st.none() | AWARE),
            blocked,
            draw(st.booleans()),
            draw(st.booleans()),
            draw(st.integers(0, 9)),
            draw(st.integers(0, 9)),
            draw(st.integers(0, 9)),
            draw(st.none() | _TEXT),
        )
    return out


@st.composite
def any_states(draw: st.DrawFn) -> ClusterState:
    """Cluster states with every field drawn, consistent or not."""
    topology = draw(st.none() | topologies())
    nodes = draw(_nodes(topology))
    settings_ = PolicySettings(
        spares_per_rack=draw(st.integers(0, 3)),
        restart_overhead=draw(DURATIONS),
        admins=draw(st.none() | st.tuples(IDS)),
        xid_actions=draw(
            st.dictionaries(st.integers(1, 200), st.sampled_from(["none", "reset_gpu"]), max_size=2)
        ),
    )
    seen_ids = st.dictionaries(st.text(max_size=20), st.integers(0, 10**12), max_size=12)
    return ClusterState(
        cluster=draw(IDS),
        seq=draw(st.integers(0, 10**9)),
        at=draw(st.none() | AWARE),
        index=None if topology is None else TopologyIndex(topology),
        settings=settings_,
        nodes=Map(nodes),
        racks=Map(draw(_racks(topology))),
        jobs=Map(draw(_jobs(list(nodes)))),
        finished=Map(draw(st.dictionaries(IDS, st.sampled_from(list(JobStatus)), max_size=5))),
        reservations=Map(draw(st.dictionaries(IDS, IDS, max_size=3))),
        interactive_preemption_allowed_by=draw(st.none() | IDS),
        interactive_preemption_reason=draw(_TEXT),
        seen=SeenCommands(Map(draw(seen_ids)), Map(draw(seen_ids)), draw(st.integers(1, 10**6))),
        applied=Map(draw(st.dictionaries(st.integers(0, 64), st.integers(0, 10**12), max_size=4))),
        repairs=Map(draw(st.dictionaries(IDS, st.integers(1, 10**12), max_size=3))),
    )


@settings(max_examples=300, deadline=None)
@given(any_states())
def test_any_state_round_trips_even_one_evolve_never_makes(state: ClusterState) -> None:
    assert decode_state(encode_state(state)) == state


# -- bad bytes ------------------------------------------------------------------------------


def _small_snapshot() -> bytes:
    h = Harness().given(register(*RACKS, spares_per_rack=1))
    return encode_state(h.state)


SMALL = _small_snapshot()


def _sealed(raw: bytes, *, version: int = FORMAT_VERSION, size: int | None = None) -> bytes:
    """A snapshot of the document `raw` with a correct digest (what a buggy writer or a
    forger could send)."""
    body = zlib.compress(raw)
    head = struct.pack(">4sHBBQ", b"RPSN", version, 1, 0, len(raw) if size is None else size)
    return head + sha256(head + body).digest() + body


def _document(data: bytes) -> Any:
    return json.loads(zlib.decompress(data[48:]))


def test_the_sealing_helper_makes_snapshots_the_decoder_accepts() -> None:
    raw = json.dumps(_document(SMALL)).encode()
    assert decode_state(_sealed(raw)) == decode_state(SMALL)


@pytest.mark.parametrize("cut", [0, 1, 15, 16, 47, 48, 60, len(SMALL) // 2, len(SMALL) - 1])
def test_a_truncated_snapshot_is_refused(cut: int) -> None:
    with pytest.raises(SnapshotError, match="truncated"):
        decode_state(SMALL[:cut])


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(SMALL) - 1), st.integers(1, 255))
def test_any_flipped_byte_is_refused(at: int, xor: int) -> None:
    bad = bytearray(SMALL)
    bad[at] ^= xor
    with pytest.raises(SnapshotError):
        decode_state(bytes(bad))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(SnapshotError):
        decode_state(data)


def test_another_format_version_is_refused_by_name() -> None:
    raw = json.dumps(_document(SMALL)).encode()
    with pytest.raises(SnapshotError, match="format version 2; this build reads version 1"):
        decode_state(_sealed(raw, version=2))


def test_a_body_larger_than_its_header_says_is_refused() -> None:
    raw = json.dumps(_document(SMALL)).encode()
    with pytest.raises(SnapshotError, match="inflates to"):
        decode_state(_sealed(raw, size=100))


def test_a_header_declaring_a_huge_document_is_refused_before_inflating() -> None:
    with pytest.raises(SnapshotError, match="over the limit"):
        decode_state(_sealed(b"{}", size=1 << 40))


def test_a_document_that_is_not_json_is_refused() -> None:
    with pytest.raises(SnapshotError, match="malformed snapshot"):
        decode_state(_sealed(b"\xff\xfe not json"))


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*path, i)))
    return out


def _rich_document() -> Any:
    h = Harness(replace(initial_state(CLUSTER), seen=SeenCommands(window=2)))
    h.given(register(*RACKS, spares_per_rack=1))
    h.given(cmd(SubmitJob, job=job("j1", 2, slice_size=2)), cmd(CordonNode, node="r01-n01"))
    h.given(cmd(ReportNodeHealth, node="r02-n02", health=Health.FAILED, cause="xid 79"))
    return _document(encode_state(h.state))


RICH = _rich_document()
RICH_PATHS = _paths(RICH)[1:]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(RICH_PATHS), _JSON)
def test_a_document_with_any_value_swapped_decodes_or_raises_only_snapshot_error(
    path: tuple[Any, ...], value: Any
) -> None:
    doc = json.loads(json.dumps(RICH))
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    data = _sealed(json.dumps(doc).encode())
    try:
        state = decode_state(data)
    except SnapshotError:
        with pytest.raises(SnapshotError, match=r"^malformed snapshot \(\w[\w ]*\): [^\n]*$"):
            decode_state(data)
    else:
        assert isinstance(state, ClusterState)


def test_a_job_row_of_the_wrong_length_names_the_section() -> None:
    doc = json.loads(json.dumps(RICH))
    doc["jobs"][0] = doc["jobs"][0][:-1]
    with pytest.raises(SnapshotError, match=r"malformed snapshot \(jobs\)"):
        decode_state(_sealed(json.dumps(doc).encode()))


def test_a_job_row_written_before_protected_by_reads_as_unprotected() -> None:
    h = Harness(initial_state(CLUSTER))
    h.given(register(*RACKS, spares_per_rack=1), cmd(SubmitJob, job=job("j1", 2, slice_size=2)))
    h.given(cmd(ReportDisruptionBudget, job="j1", allows=False, budget="pdb team/j1"))
    doc = _document(encode_state(h.state))
    assert doc["jobs"][0][-1] == "pdb team/j1"
    assert decode_state(encode_state(h.state)).jobs["j1"].protected_by == "pdb team/j1"
    doc["jobs"][0] = doc["jobs"][0][:-1]  # as a snapshot of an earlier build has it
    assert decode_state(_sealed(json.dumps(doc).encode())).jobs["j1"].protected_by is None
    doc["jobs"][0] += ["a", "b"]
    with pytest.raises(SnapshotError, match=r"\(jobs\).*at most 15"):
        decode_state(_sealed(json.dumps(doc).encode()))


def test_a_seq_that_is_not_an_integer_is_refused() -> None:
    doc = json.loads(json.dumps(RICH))
    count, ids, deltas = doc["seen"]["recent"]
    doc["seen"]["recent"] = [count, ids, [*deltas[:-1], 1.5]]
    with pytest.raises(SnapshotError, match=r"\(seen\)"):
        decode_state(_sealed(json.dumps(doc).encode()))
