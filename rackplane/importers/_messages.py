"""Pydantic error details, reworded for the person who wrote the file.

Theory of operation: pydantic says `Input should be a valid integer` with an error `type` and a
`ctx`; an operator wants `expected an integer (got 'four')`. `describe` maps the error types a
topology file can hit to such phrases; for an unknown field it walks the model along the error's
path to list the fields that are allowed there. Anything unmapped falls back to pydantic's own
message, which is still correct, only less friendly.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, RootModel
from pydantic_core import ErrorDetails

from rackplane.models._text import rule_of

_MAX_GOT = 60

_PLAIN: dict[str, str] = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "set_type": "expected a list",
    "iterable_type": "expected a list",
    "dict_type": "expected a mapping",
    "mapping_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "dataclass_type": "expected a mapping",
    "time_delta_type": "expected a duration: seconds, or ISO 8601 such as PT10M",
    "time_delta_parsing": "expected a duration: seconds, or ISO 8601 such as PT10M",
}

_BOUNDS: dict[str, tuple[str, str]] = {
    "greater_than_equal": ("ge", ">="),
    "greater_than": ("gt", ">"),
    "less_than_equal": ("le", "<="),
    "less_than": ("lt", "<"),
}


def describe(
    error: ErrorDetails, model: type[BaseModel] | None, loc: Sequence[str | int]
) -> tuple[str, str | None]:
    """Word one pydantic error as (what was expected, what was there instead)."""
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    value = error.get("input")
    if kind == "missing":
        return f"required field '{loc[-1]}' is missing", None
    if kind == "extra_forbidden":
        allowed = _allowed_fields(model, loc[:-1]) if model is not None else None
        what = f"unknown field '{loc[-1]}'"
        return (what if allowed is None else f"{what} (allowed: {', '.join(allowed)})"), None
    if kind in _PLAIN:
        return _PLAIN[kind], render_value(value)
    if kind in _BOUNDS:
        key, sign = _BOUNDS[kind]
        return f"expected a number {sign} {ctx.get(key)}", render_value(value)
    rule = rule_of(error)
    if rule is not None:  # an id's or a text's: say which character is wrong, and where
        culprit = rule.culprit(value) if isinstance(value, str) else None
        got = render_value(value)
        return rule.wanted, got if culprit is None else f"{got}, which {culprit}"
    if kind == "string_pattern_mismatch":
        return f"expected text matching {ctx.get('pattern')}", render_value(value)
    if kind in ("too_short", "string_too_short"):
        n = ctx.get("min_length", 1)
        noun = "character" if kind == "string_too_short" else "item"
        return f"expected at least {n} {noun}{'' if n == 1 else 's'}", render_value(value)
    if kind in ("too_long", "string_too_long"):
        n = ctx.get("max_length")
        noun = "character" if kind == "string_too_long" else "item"
        return f"expected at most {n} {noun}{'' if n == 1 else 's'}", render_value(value)
    if kind in ("literal_error", "enum"):
        return f"expected {ctx.get('expected')}", render_value(value)
    if kind in ("value_error", "assertion_error"):
        message = str(ctx.get("error", error["msg"]))
        got = render_value(value)
        # Our own validators often quote the bad value already; do not say it twice.
        return message, None if (isinstance(value, str) and repr(value) in message) else got
    return error["msg"], render_value(value)


def render_value(value: object) -> str:
    """A short, YAML-flavoured rendering of an input value for `(got ...)`."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= _MAX_GOT else f"{text[: _MAX_GOT - 4]}...'"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _allowed_fields(model: type[BaseModel], loc: Sequence[str | int]) -> list[str] | None:
    """The field names of the model found at `loc` under `model`, in declaration order."""
    current: object = model
    if issubclass(model, RootModel):
        current = model.model_fields["root"].annotation
    for part in loc:
        if isinstance(part, int):
            current = _item_type(current)
            continue
        found = _model_in(current)
        if found is not None:
            field = found.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        else:
            return None
    found = _model_in(current)
    return None if found is None else list(found.model_fields)


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The model class an annotation stands for (`X`, `X | None`, `Annotated[X, ...]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _item_type(annotation: object) -> object:
    """The element type of `tuple[X, ...]`, `list[X]` (through `Annotated` and `| None`)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _item_type(args[0])
    if origin is typing.Union or origin is types.UnionType:
        for arg in args:
            if typing.get_origin(arg) in (tuple, list):
                return _item_type(arg)
        return None
    if origin in (tuple, list) and args:
        return args[0]
    return None
