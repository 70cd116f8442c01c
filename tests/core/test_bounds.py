"""Every string of every message has a length limit and a charset (issue 15).

Names (ids, actors, command types) are ASCII from a small alphabet; free text is printable
Unicode plus newline and tab. Each hostile value below is refused with a reason a person can
read, and each legitimate one is kept as it is.
"""

from __future__ import annotations

import itertools
import types
import typing
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError

from rackplane.models import (
    COMMANDS,
    EVENTS,
    ID_RULE,
    CancelJob,
    CommandRejected,
    CordonNode,
    DefragAlternative,
    FreeText,
    GpuSample,
    JobSpec,
    NameRule,
    NodeTelemetry,
    PlacedSlice,
    PlanDefrag,
    PolicySettings,
    Rack,
    RegisterTopology,
    Rejection,
    ReportNodeHealth,
    SubmitJob,
    Topology,
    describe_error,
    printable,
)
from rackplane.models._text import _REFUSED, refused, text_problem
from rackplane.models.jobs import MAX_SLICE_NODES
from rackplane.models.values import MAX_ALTERNATIVES
from rackplane.policies import decide
from rackplane.policies._defrag_search import ALTERNATIVES_KEPT
from rackplane.projections import evolve, initial_state
from tests.strategies import COMMAND_TYPES, EVENT_TYPES, TEXT_CHARS

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MB = "x" * 1_000_000


def envelope(**over: Any) -> dict[str, Any]:
    return {"id": "cli-1", "cluster": "c1", "actor": "operator:alice", **over}


def event_envelope(**over: Any) -> dict[str, Any]:
    return {"id": "c1/1", "cluster": "c1", "seq": 1, "at": NOW, "actor": "runtime", **over}


@dataclass(frozen=True)
class Kind:
    """A kind of string field: how a value goes into a real message, and back out."""

    build: Callable[[str], Any]
    read: Callable[[Any], str]
    limit: int
    name: bool = False


def _rejected(**over: Any) -> CommandRejected:
    fields = {"command_id": "x", "command_type": "CancelJob", "code": "unknown_job", "reason": "no"}
    return CommandRejected(**event_envelope(**{**fields, **over}))


KINDS: dict[str, Kind] = {
    "an id (a node)": Kind(
        lambda v: CordonNode(**envelope(node=v)), lambda m: m.node, 128, name=True
    ),
    "a compound id (correlation_id)": Kind(
        lambda v: CancelJob(**envelope(correlation_id=v, job="j")),
        lambda m: m.correlation_id,
        256,
        name=True,
    ),
    "an actor": Kind(
        lambda v: CancelJob(**envelope(actor=v, job="j")), lambda m: m.actor, 128, name=True
    ),
    "an admin in the policy": Kind(
        lambda v: PolicySettings(admins=(v,)), lambda m: m.admins[0], 128, name=True
    ),
    "a command type": Kind(lambda v: _rejected(command_type=v), lambda m: m.command_type, 64),
    "a command's reason": Kind(
        lambda v: CancelJob(**envelope(job="j", reason=v)), lambda m: m.reason, 2_000
    ),
    "an event's reason": Kind(lambda v: _rejected(reason=v), lambda m: m.reason, 4_000),
    "a job's name": Kind(lambda v: JobSpec(id="j", nodes=1, name=v), lambda m: m.name, 200),
    "a GPU's model": Kind(lambda v: GpuSample(index=0, model=v), lambda m: m.model, 200),
    "a defrag alternative's why_not": Kind(
        lambda v: DefragAlternative(target_racks=("r1",), victims=(), cost_gpu_hours=0, why_not=v),
        lambda m: m.why_not,
        2_000,
    ),
}
NAMES = [k for k, kind in KINDS.items() if kind.name]

HOSTILE = [
    pytest.param("ab\x00cd", "a NUL character (U+0000) at position 2", id="NUL"),
    pytest.param("ab\x85cd", "a control character (U+0085) at position 2", id="C1 control"),
    pytest.param("ab\x1b[2Jcd", "a control character (U+001B) at position 2", id="ESC"),
    pytest.param("ab\rcd", "a control character (U+000D) at position 2", id="CR"),
    pytest.param(
        "operator:\u202eecila", "a bidi control character (U+202E) at position 9", id="RLO"
    ),
    pytest.param("ab\u2066cd", "a bidi control character (U+2066) at position 2", id="LRI"),
    pytest.param("ab\u200dcd", "a zero-width character (U+200D) at position 2", id="ZWJ"),
    pytest.param("\ufeffabcd", "a zero-width character (U+FEFF)", id="BOM"),
    pytest.param("ab\U000e0041cd", "a format character (U+E0041) at position 2", id="tag char"),
    pytest.param("ab\u2028cd", "a line or paragraph separator (U+2028)", id="line separator"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("value", "want"), HOSTILE)
def test_a_hostile_character_is_refused_and_named_with_its_position(
    kind: str, value: str, want: str
) -> None:
    if kind == "a command type":
        value = "Cancel" + value.replace("operator:", "").replace(":", "")
        want = want.split(" at position")[0]
    with pytest.raises(ValidationError) as caught:
        KINDS[kind].build(value)
    said = describe_error(caught.value)
    assert want in said
    assert "\n" not in said and text_problem(said) is None  # one line, safe to print


@pytest.mark.parametrize("kind", KINDS)
def test_one_character_over_the_limit_is_refused_with_the_length(kind: str) -> None:
    limit = KINDS[kind].limit
    value = ("Cancel" + "x" * limit)[: limit + 1] if kind == "a command type" else "x" * (limit + 1)
    assert KINDS[kind].read(KINDS[kind].build(value[:limit])) == value[:limit]  # at the limit
    with pytest.raises(ValidationError) as caught:
        KINDS[kind].build(value)
    assert f"has {limit + 1:,} characters" in describe_error(caught.value)


@pytest.mark.parametrize("kind", KINDS)
def test_a_megabyte_string_is_refused_in_one_short_line(kind: str) -> None:
    with pytest.raises(ValidationError) as caught:
        KINDS[kind].build(MB if kind != "a command type" else "C" + MB)
    said = describe_error(caught.value)
    assert "has 1,000,00" in said
    assert len(said) < 400


@pytest.mark.parametrize("kind", NAMES)
@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("al ice", "contains a space (U+0020) at position 2", id="a space"),
        pytest.param("café", "contains 'é' (U+00E9) at position 3", id="a letter outside ASCII"),
        pytest.param("аlice", "starts with 'а' (U+0430)", id="a Cyrillic look-alike"),
        pytest.param("-alice", "starts with '-' (U+002D)", id="a leading dash"),
        pytest.param("", "is empty", id="empty"),
    ],
)
def test_a_name_outside_the_alphabet_is_refused_with_the_alphabet(
    kind: str, value: str, want: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        KINDS[kind].build(value)
    said = describe_error(caught.value)
    assert want in said
    assert "ASCII letters, digits and . _ : / @ + -" in said


def test_the_spoofed_operator_of_issue_15_is_refused_in_words() -> None:
    with pytest.raises(ValidationError) as caught:
        CancelJob(**envelope(actor="operator:\u202eecila", job="j"))
    assert describe_error(caught.value) == (
        "actor: contains a bidi control character (U+202E) at position 9 (expected an actor: "
        "ASCII letters, digits and . _ : / @ + -, starting with a letter or digit, at most 128 "
        "characters)"
    )


def test_the_megabyte_correlation_id_of_issue_15_is_refused_on_decode() -> None:
    raw = (
        CancelJob(**envelope(job="j"))
        .model_dump_json()
        .replace('"correlation_id":null', f'"correlation_id":"{MB}"')
    )
    with pytest.raises(ValidationError) as caught:
        COMMANDS.validate_json(raw)
    assert describe_error(caught.value).startswith(
        "CancelJob.correlation_id: has 1,000,000 characters (expected a compound id"
    )


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        pytest.param("an id (a node)", "n" * 128, id="an id at the maximum length"),
        pytest.param("an id (a node)", "gb200-r01.n07@dc1:a/b+c_d", id="an id with every symbol"),
        pytest.param("a compound id (correlation_id)", "c" * 256, id="a compound id at 256"),
        pytest.param("an actor", "operator:alice", id="an operator"),
        pytest.param("an actor", "user:research", id="a user"),
        pytest.param("an actor", "policy:tas", id="a policy"),
        pytest.param("an actor", "gpu_manager", id="the GPU Manager"),
        pytest.param("an actor", "alice@example.com", id="an e-mail address"),
        pytest.param("a command's reason", "café au lait", id="an accented reason"),
        pytest.param("a command's reason", "fan noise\nsee ticket 42\tasap", id="newline, tab"),
        pytest.param("a command's reason", "r" * 2_000, id="a reason at the maximum length"),
        pytest.param("an event's reason", "日本語の説明 🔧", id="CJK and an emoji"),
        pytest.param("a job's name", "Llama-4 pretrain (ω=0.3)", id="a Greek letter"),
        pytest.param("a GPU's model", "NVIDIA GB200 – Grâce", id="a Unicode GPU name"),
        pytest.param("a GPU's model", "\ufffd\ufffdH200", id="replacement characters"),
    ],
)
def test_a_legitimate_value_is_kept_as_it_is(kind: str, value: str) -> None:
    message = KINDS[kind].build(value)
    assert KINDS[kind].read(message) == value
    assert KINDS[kind].read(type(message).model_validate_json(message.model_dump_json())) == value


def test_the_refused_table_is_sorted_disjoint_and_covers_pythons_controls_and_formats() -> None:
    for (_, last, _), (first, _, _) in itertools.pairwise(_REFUSED):
        assert last < first
    allowed = {"\t", "\n"}
    missing = [
        f"U+{cp:04X}"
        for cp in range(0x110000)
        if unicodedata.category(chr(cp)) in ("Cc", "Cf", "Cs", "Zl", "Zp")
        and chr(cp) not in allowed
        and refused(chr(cp)) is None
    ]
    assert missing == [], "a newer Unicode has format characters the table does not refuse"
    assert refused("\t") is None and refused("\n") is None and refused(" ") is None


TEXT_RULE: TypeAdapter[str] = TypeAdapter(typing.Annotated[str, FreeText(4_000)])
ID_ADAPTER: TypeAdapter[str] = TypeAdapter(typing.Annotated[str, ID_RULE])


@settings(max_examples=300)
@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=40))
def test_the_core_pattern_and_the_explanation_agree_on_free_text(value: str) -> None:
    try:
        TEXT_RULE.validate_python(value)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == (text_problem(value) is None)


@settings(max_examples=300)
@given(st.text(st.characters(max_codepoint=0x7F) | st.sampled_from("é\u202e "), max_size=12))
def test_the_core_pattern_and_the_explanation_agree_on_ids(value: str) -> None:
    try:
        ID_ADAPTER.validate_python(value)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == (ID_RULE.culprit(value) is None)


@settings(max_examples=200)
@given(st.text(max_size=600) | st.just("\u202e" * 300), st.integers(48, 300))
def test_printable_never_fails_and_gives_valid_text_within_the_limit(
    value: str, limit: int
) -> None:
    out = printable(value, limit)
    assert len(out) <= limit
    TypeAdapter(typing.Annotated[str, FreeText(limit)]).validate_python(out)
    if len(value) <= limit and text_problem(value) is None:
        assert out == value


def test_printable_escapes_what_it_refuses_and_never_cuts_an_escape_in_half() -> None:
    assert printable("a\u202eb\x00c", 100) == "a\\u202eb\\u0000c"
    assert printable("\U000e0041", 100) == "\\U000e0041"
    cut = printable("x" * 14 + "\u202e" * 10, 60)  # the marker leaves room for 2.x escapes
    assert cut.startswith("x" * 14 + "\\u202e\\u202e")
    assert cut.endswith("...[truncated: 24 characters]")
    assert "\\u202e\\u20..." not in cut and "\\u2..." not in cut


def test_a_slice_larger_than_the_largest_slice_size_is_refused() -> None:
    nodes = tuple(f"n{i}" for i in range(MAX_SLICE_NODES + 1))
    with pytest.raises(ValidationError, match="at most 1024 items"):
        PlacedSlice(index=0, nodes=nodes, racks=("r1",))
    PlacedSlice(index=0, nodes=nodes[:-1], racks=("r1",))


def test_a_plan_holds_every_alternative_the_defrag_search_keeps() -> None:
    assert ALTERNATIVES_KEPT <= MAX_ALTERNATIVES
    alternative = DefragAlternative(target_racks=("r1",), victims=("j1",), cost_gpu_hours=1)
    with pytest.raises(ValidationError, match="at most 16 items"):
        PlanDefrag(
            **envelope(),
            job="j",
            target_racks=("r1",),
            cost_gpu_hours=1,
            alternatives=(alternative,) * (MAX_ALTERNATIVES + 1),
        )


# -- what the controller builds from valid input at every limit stays valid -----------------

LONG_CLUSTER = "c" * 128
LONG_NODES = tuple(f"n{i:03d}" + "x" * 124 for i in range(4))


def long_topology() -> Topology:
    return Topology(
        cluster=LONG_CLUSTER, racks=(Rack(id="r" * 128, pod="p" * 128, nodes=LONG_NODES),)
    )


def test_commands_at_every_limit_decide_into_valid_events() -> None:
    """Ids at 128 characters make event ids (`cluster/seq`), command ids of the GPU Manager
    (`gpu_manager:<node>:<time>`) and reasons the controller wraps around the command's: each
    must still fit the event it lands in (before compound ids, a 128-character cluster made
    `decide` raise)."""
    reason = "é" * 2_000
    common = {"cluster": LONG_CLUSTER, "actor": "a" * 128, "correlation_id": "k" * 256}
    stamp = (NOW + timedelta(microseconds=1)).isoformat()
    commands = [
        RegisterTopology(id="1" * 256, topology=long_topology(), **common),
        CordonNode(id="2" * 256, node=LONG_NODES[0], reason=reason, **common),
        ReportNodeHealth(
            id=f"gpu_manager:{LONG_NODES[1]}:{stamp}",
            node=LONG_NODES[1],
            health="failed",
            cause=reason,
            **common,
        ),
        SubmitJob(
            id="3" * 256,
            job=JobSpec(id="j" * 128, nodes=2, name="ñ" * 200, owner="a" * 128),
            **common,
        ),
        CancelJob(id="4" * 256, job="u" * 128, reason=reason, **common),  # unknown: rejected
        CordonNode(id="5" * 256, node="z" * 128, reason=reason, **common),  # unknown node
    ]
    state = initial_state(LONG_CLUSTER)
    outcomes = []
    for command in commands:
        events = decide(state, command, now=NOW)
        for event in events:
            assert EVENTS.validate_json(EVENTS.dump_json(event)) == event
            state = evolve(state, event)
        outcomes.append([e.type for e in events])
    assert outcomes == [
        ["TopologyRegistered"],
        ["NodeCordoned"],
        ["NodeFailed"],
        ["JobSubmitted"],
        ["CommandRejected"],
        ["CommandRejected"],
    ]


# -- the audit, kept: no string field without a rule ----------------------------------------


def _models() -> list[type[BaseModel]]:
    extra = [JobSpec, Topology, Rack, PolicySettings, GpuSample, NodeTelemetry, Rejection]
    found: list[type[BaseModel]] = []
    todo = [*COMMAND_TYPES, *EVENT_TYPES, *extra]
    while todo:
        model = todo.pop()
        if model in found:
            continue
        found.append(model)
        for info in model.model_fields.values():
            todo += [t for t in _types_in(info.annotation) if _is_model(t)]
    return found


def _is_model(t: object) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _types_in(annotation: object) -> list[object]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _types_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, tuple, dict, list):
        return [t for a in typing.get_args(annotation) for t in _types_in(a)]
    return [annotation]


def _unruled_strings(annotation: object, metadata: list[Any], where: str) -> list[str]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *meta = typing.get_args(annotation)
        return _unruled_strings(inner, metadata + meta, where)
    if origin in (typing.Union, types.UnionType):
        return [
            w for a in typing.get_args(annotation) for w in _unruled_strings(a, metadata, where)
        ]
    if origin in (tuple, dict, list):
        return [
            w
            for a in typing.get_args(annotation)
            if a is not Ellipsis
            for w in _unruled_strings(a, [], where)
        ]
    if annotation is str:
        ruled = any(isinstance(m, NameRule | FreeText) for m in metadata) or any(
            getattr(m, "pattern", None) and getattr(m, "max_length", None) for m in metadata
        )
        return [] if ruled else [where]
    return []


def test_every_string_field_of_every_model_has_a_length_and_a_charset() -> None:
    unruled = [
        w
        for model in _models()
        for name, info in model.model_fields.items()
        if not (name == "type" and typing.get_origin(info.annotation) is typing.Literal)
        for w in _unruled_strings(info.annotation, list(info.metadata), f"{model.__name__}.{name}")
    ]
    assert unruled == []


def test_the_audit_finds_a_bare_string_field() -> None:
    class Loose(BaseModel):
        note: str
        tags: tuple[str, ...] = ()

    found = [
        w
        for name, info in Loose.model_fields.items()
        for w in _unruled_strings(info.annotation, list(info.metadata), f"Loose.{name}")
    ]
    assert found == ["Loose.note", "Loose.tags"]


def test_generated_free_text_is_always_valid() -> None:
    @given(st.text(TEXT_CHARS, max_size=50))
    def check(value: str) -> None:
        assert text_problem(value) is None

    check()
