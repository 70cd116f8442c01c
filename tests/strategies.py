"""Hypothesis strategies built from the pydantic models themselves.

`from_model(cls)` walks a model's fields and builds values that satisfy their annotations
(constrained strings, bounded ints, enums, literals, tuples, nested models), so every command
and event type gets a strategy without a hand-written one per type.
"""

from __future__ import annotations

import base64
import types
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from rackplane.keyfiles import KeyFile
from rackplane.models import (
    Command,
    Event,
    JobSpec,
    PolicySettings,
    QueueSpec,
    Rack,
    Role,
    Signature,
    Topology,
    TrustedKey,
)
from rackplane.models._ids import POD_REF_PATTERN
from rackplane.models._text import FreeText, NameRule, refused

IDS = st.from_regex(r"\A[a-z][a-z0-9-]{0,10}\Z")
POD_REFS = st.from_regex(r"\A[a-z]([a-z0-9-]{0,7}[a-z0-9])?/[a-z]([a-z0-9.-]{0,10}[a-z0-9])?\Z")
"""Kubernetes pods, `namespace/name` (short: shrinking and examples stay readable)."""
TEXT_CHARS = st.characters(exclude_categories=("Cs",)).filter(lambda c: refused(c) is None)
"""What free text may hold: any character but those the text rule refuses (models._text)."""
TEXT = st.text(TEXT_CHARS, max_size=30)
AWARE = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)
)
DURATIONS = st.integers(min_value=1, max_value=10**7).map(lambda s: timedelta(seconds=s))


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    n_racks = draw(st.integers(1, 4))
    racks = []
    for r in range(n_racks):
        size = draw(st.integers(1, 6))
        racks.append(
            Rack(
                id=f"r{r}",
                pod=draw(st.sampled_from(["p1", "p2"])),
                nodes=tuple(f"r{r}-n{i}" for i in range(size)),
                gpus_per_node=draw(st.sampled_from([4, 8])),
            )
        )
    return Topology(cluster=draw(IDS), racks=tuple(racks))


@st.composite
def job_specs(draw: st.DrawFn) -> JobSpec:
    size = draw(st.one_of(st.none(), st.integers(1, 32)))
    floor = draw(st.one_of(st.none(), st.integers(1, size or 16)))
    return JobSpec(
        id=draw(IDS),
        name=draw(TEXT),
        owner=draw(IDS),
        nodes=draw(st.integers(1, 600)),
        slice_size=size,
        kind=draw(st.sampled_from(list(JobSpec.model_fields["kind"].annotation))),  # type: ignore[arg-type]
        priority=draw(st.integers(-5, 5)),
        checkpoint_interval=draw(st.one_of(st.none(), DURATIONS)),
        min_nodes_per_slice=floor,
        expected_duration=draw(st.one_of(st.none(), DURATIONS)),
    )


_POOL = [KeyFile.new(f"user:k{i}") for i in range(4)]
"""Real key pairs: a trusted key's id must be its public key's."""


@st.composite
def trusted_keys(draw: st.DrawFn) -> TrustedKey:
    key = draw(st.sampled_from(_POOL))
    roles = draw(st.lists(st.sampled_from(list(Role)), min_size=1, max_size=3, unique=True))
    return TrustedKey(id=key.id, public_key=key.public_key, actor=draw(IDS), roles=tuple(roles))


def key_sets() -> st.SearchStrategy[tuple[TrustedKey, ...]]:
    """What a cluster may trust: distinct keys, the first an admin."""
    return st.lists(trusted_keys(), min_size=1, max_size=3, unique_by=lambda k: k.id).map(
        lambda ks: (ks[0].model_copy(update={"roles": (Role.ADMIN,)}), *ks[1:])
    )


SIGNATURES = st.builds(
    Signature,
    key=st.sampled_from([k.id for k in _POOL]),
    value=st.binary(min_size=64, max_size=64).map(lambda b: base64.b64encode(b).decode()),
)
KEY_IDS = st.from_regex(r"\A[0-9a-f]{16}\Z").filter(lambda k: k not in {p.id for p in _POOL})
"""Key ids of no pool key (revoked ones: never one a cluster trusts)."""


@st.composite
def queue_trees(draw: st.DrawFn) -> tuple[tuple[QueueSpec, ...], str | None]:
    """A valid queue tree (orgs with teams, or none) and a default leaf (or None)."""
    orgs = draw(st.integers(0, 2))
    queues: list[QueueSpec] = []
    leaves: list[str] = []
    for o in range(orgs):
        queues.append(QueueSpec(name=f"org{o}", weight=draw(st.sampled_from([0.5, 1.0, 2.0]))))
        for t in range(draw(st.integers(1, 2))):
            name = f"org{o}-t{t}"
            nominal = draw(st.integers(0, 64))
            limit = draw(st.one_of(st.none(), st.integers(0, 64)))
            spec = QueueSpec(
                name=name, parent=f"org{o}", nominal_nodes=nominal, borrowing_limit=limit
            )
            queues.append(spec)
            leaves.append(name)
    default = draw(st.one_of(st.none(), st.sampled_from(leaves))) if leaves else None
    return tuple(queues), default


def policy_settings() -> st.SearchStrategy[PolicySettings]:
    """Settings with every field drawn, the queue tree valid."""
    fields = {
        name: _for(info.annotation, list(info.metadata))
        for name, info in PolicySettings.model_fields.items()
        if name not in ("queues", "default_queue")
    }

    def build(tree: tuple[tuple[QueueSpec, ...], str | None]) -> st.SearchStrategy[Any]:
        queues, default = tree
        return st.builds(PolicySettings, queues=st.just(queues),
                         default_queue=st.just(default), **fields)  # fmt: skip

    return queue_trees().flatmap(build)


_SPECIAL: dict[Any, st.SearchStrategy[Any]] = {
    PolicySettings: st.deferred(policy_settings),
    Topology: topologies(),
    JobSpec: job_specs(),
    TrustedKey: trusted_keys(),
    Signature: SIGNATURES,
}


def _bounds(metadata: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in metadata:
        for attr in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
            value = getattr(m, attr, None)
            if value is not None:
                out[attr] = value
        if isinstance(m, annotated_types.Len):
            out["min_length"] = m.min_length
    return out


def _for(annotation: Any, metadata: list[Any]) -> st.SearchStrategy[Any]:
    if annotation in _SPECIAL:
        return _SPECIAL[annotation]
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *meta = get_args(annotation)
        flat: list[Any] = []
        for m in meta:
            flat.extend(m.metadata if isinstance(m, FieldInfo) else [m])
        return _for(inner, metadata + flat)
    if origin in (Union, types.UnionType):
        return st.one_of(*(_for(a, metadata) for a in get_args(annotation)))
    if origin is Literal:
        return st.sampled_from(get_args(annotation))
    if origin is tuple:
        args = get_args(annotation)
        if args[0] is TrustedKey:
            return key_sets()
        b = _bounds(metadata)
        return st.lists(_for(args[0], []), min_size=b.get("min_length", 0), max_size=4).map(tuple)
    if origin is dict:
        key, value = get_args(annotation)
        return st.dictionaries(_for(key, []), _for(value, []), max_size=3)
    if annotation is type(None):
        return st.none()
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return st.sampled_from(list(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return from_model(annotation)
    b = _bounds(metadata)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        lo = b.get("ge", b["gt"] + 1 if "gt" in b else -(10**6))
        hi = b.get("le", b["lt"] - 1 if "lt" in b else 10**6)
        return st.integers(lo, hi)
    if annotation is float:
        low, high = b.get("ge", b.get("gt", -1e9)), b.get("le", 1e9)
        return st.floats(low, high, allow_nan=False, exclude_min="gt" in b and "ge" not in b)
    if annotation is str:
        rule = next((m for m in metadata if isinstance(m, NameRule)), None)
        if rule is not None and rule.first != "A-Za-z0-9":
            return st.from_regex(rule.pattern, fullmatch=True)  # a command type
        if b.get("pattern") == r"^[0-9a-f]{16}$":
            return KEY_IDS
        if b.get("pattern") == POD_REF_PATTERN:
            return POD_REFS
        if "pattern" in b:
            return IDS
        chars = TEXT_CHARS if any(isinstance(m, FreeText) for m in metadata) else st.characters()
        size = {"min_size": b.get("min_length", 0), "max_size": min(b.get("max_length", 30), 30)}
        return st.text(chars, **size)
    if annotation is datetime:
        return AWARE
    if annotation is timedelta:
        return DURATIONS
    if getattr(annotation, "__name__", "") == "AwareDatetime":
        return AWARE
    raise TypeError(f"no strategy for {annotation!r}")


def from_model(cls: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Instances of `cls` with every field drawn from its annotation."""
    if cls in _SPECIAL:
        return _SPECIAL[cls]
    fields = {}
    for name, info in cls.model_fields.items():
        annotation = info.annotation
        if get_origin(annotation) is Literal and name == "type":
            continue
        fields[name] = _for(annotation, list(info.metadata))
    return st.builds(cls, **fields)


def _members(union: Any) -> list[type[BaseModel]]:
    return list(get_args(get_args(union)[0]))  # Annotated[A | B | ..., Field(discriminator)]


COMMAND_TYPES = _members(Command)
EVENT_TYPES = _members(Event)
