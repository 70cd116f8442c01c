"""Load YAML (and JSON) safely while remembering where every value came from.

Theory of operation: PyYAML builds documents in two passes: *compose* (text -> a tree of nodes
that carry their start line) and *construct* (nodes -> Python values). We run both ourselves on
a safe loader: the values come from the safe constructor exactly as `yaml.safe_load` would make
them (plain dicts, lists, str, int, float, bool, None, dates; any `!!python/...` tag is an
error), and a second walk over the same node tree records the line of every mapping key and
sequence item under its path, e.g. `("racks", 3, "nodes") -> 17`.

Pydantic reports a validation error at a path of the same shape, so `file_error` can look the
path up (falling back to the nearest recorded ancestor for a missing field) and raise one
`TopologyFileError` with the file, the line, a dotted field and a sentence a person can act on.

Text that is valid JSON is decoded by `json` (YAML 1.1 reads `1e5` as a string, JSON does not);
its lines still come from composing it as YAML, which shares JSON's tree shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rackplane.importers._messages import describe
from rackplane.importers.errors import TopologyFileError

try:  # the libyaml loader is ~10x faster on large kubectl dumps; same safe semantics
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

Path = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)

_MERGE_TAG = "tag:yaml.org,2002:merge"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class LineMap:
    """Where each value of a loaded document sits: path -> 1-based line."""

    def __init__(self, lines: Mapping[Path, int] | None = None) -> None:
        self._lines: dict[Path, int] = dict(lines or {})

    def __len__(self) -> int:
        return len(self._lines)

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """The line of `path`, else of its nearest recorded ancestor, else None."""
        key = tuple(path)
        while True:
            line = self._lines.get(key)
            if line is not None or not key:
                return line
            key = key[:-1]


def load_document(text: str, source: str) -> tuple[object, LineMap]:
    """Parse YAML or JSON text with safe semantics and record the line of every value.

    Args:
        text: the file's content.
        source: the file's name, used in errors.

    Returns:
        The document as plain Python values, and where each of them sits.

    Raises:
        TopologyFileError: the text is not valid YAML, uses a tag the safe loader does not
            know (such as `!!python/object`), or is empty.
    """
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            pass  # maybe YAML flow style; let the YAML parser have it and report its error
        else:
            # Tabs are only legal between JSON tokens, where YAML may refuse them.
            return data, _compose_lines(text.replace("\t", " "), source)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise TopologyFileError(source, "expected a YAML or JSON document (the file is empty)")
        lines = LineMap(_record_lines(node, loader, source))
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as err:
        raise _syntax_error(err, source) from None
    except yaml.YAMLError as err:
        raise TopologyFileError(source, f"expected valid YAML: {err}") from None
    finally:
        loader.dispose()


def validate(model: type[M], data: object, source: str, lines: LineMap) -> M:
    """Validate `data` as `model`, turning a `ValidationError` into a located file error.

    Raises:
        TopologyFileError: the first validation error, with its line, field and wording.
    """
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise file_error(err, source, lines, model) from None


def file_error(
    err: ValidationError,
    source: str,
    lines: LineMap,
    model: type[BaseModel] | None = None,
    *,
    prefix: Path = (),
    line: int | None = None,
) -> TopologyFileError:
    """The first error of `err` as a `TopologyFileError`.

    Args:
        err: what pydantic raised.
        source: the file's name.
        lines: where the validated document's values sit.
        model: the model that was validated, to list the allowed fields of an unknown one.
        prefix: the path of the validated value inside the whole document.
        line: the line to report when `lines` knows none for the error's path.
    """
    first = _most_helpful(err)
    loc: Path = tuple(first["loc"])
    path = prefix + loc
    expected, got = describe(first, model, loc)
    found = lines.line_of(path)
    return TopologyFileError(
        source,
        expected,
        line=found if found is not None else line,
        field=format_path(path) or None,
        got=got,
    )


def _most_helpful(err: ValidationError) -> ErrorDetails:
    """The first error, except that a typo beats the missing field it was meant to be."""
    errors = err.errors(include_url=False)
    first = errors[0]
    if first["type"] == "missing":
        parent = tuple(first["loc"][:-1])
        for other in errors:
            if other["type"] == "extra_forbidden" and tuple(other["loc"][:-1]) == parent:
                return other
    return first


def format_path(path: Sequence[str | int]) -> str:
    """`("racks", 3, "nodes")` -> `racks[3].nodes`; odd keys are quoted: `labels["a.b/c"]`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


def _syntax_error(err: yaml.MarkedYAMLError, source: str) -> TopologyFileError:
    mark = err.problem_mark or err.context_mark
    problem = err.problem or "unreadable YAML"
    if err.context and err.problem:
        started = err.context_mark
        if started is not None and mark is not None and started.line != mark.line:
            problem = f"{problem} ({err.context} started on line {started.line + 1})"
        else:
            problem = f"{problem} ({err.context})"
    return TopologyFileError(
        source,
        f"expected valid YAML: {problem}",
        line=None if mark is None else mark.line + 1,
    )


def _compose_lines(text: str, source: str) -> LineMap:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        return LineMap() if node is None else LineMap(_record_lines(node, loader, source))
    except yaml.YAMLError:
        return LineMap()  # the data is fine; only the line numbers are lost
    finally:
        loader.dispose()


def _record_lines(root: Node, loader: _Loader, source: str) -> dict[Path, int]:
    """Walk the composed tree in document order, recording lines and refusing repeated keys.

    Each node is visited once, so aliases cannot blow up the walk; an aliased value keeps the
    line of its first (anchored) path.
    """
    lines: dict[Path, int] = {(): root.start_mark.line + 1}
    seen: set[int] = set()
    stack: list[tuple[Node, Path]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        children: list[tuple[Node, Path]] = []
        if isinstance(node, MappingNode):
            _refuse_repeated_keys(node, path, loader, source)
            loader.flatten_mapping(node)  # resolve `<<` merge keys as the constructor will
            for key_node, value_node in node.value:
                key = _key(key_node, loader)
                if key is not None:
                    # A later key overrides a merged one, in the data and so in the lines.
                    lines[(*path, key)] = key_node.start_mark.line + 1
                    children.append((value_node, (*path, key)))
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                lines[(*path, index)] = item.start_mark.line + 1
                children.append((item, (*path, index)))
        stack.extend(reversed(children))
    return lines


def _refuse_repeated_keys(node: MappingNode, path: Path, loader: _Loader, source: str) -> None:
    # PyYAML (and json) silently keep the last of two equal keys; in a config file the first
    # was almost always meant to be something else.
    first: dict[str | int, int] = {}
    for key_node, _ in node.value:
        key = None if key_node.tag == _MERGE_TAG else _key(key_node, loader)
        if key is None:
            continue
        line = key_node.start_mark.line + 1
        if key in first:
            raise TopologyFileError(
                source,
                f"expected each key once in a mapping; {key!r} is repeated "
                f"(first on line {first[key]})",
                line=line,
                field=format_path((*path, key)),
            )
        first[key] = line


def _key(node: Node, loader: _Loader) -> str | int | None:
    if not isinstance(node, ScalarNode):
        return None
    value = loader.construct_object(node)
    return value if isinstance(value, str | int) else None
