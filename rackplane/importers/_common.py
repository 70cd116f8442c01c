"""Small pieces every importer shares: node-list fields, id cleaning, reading a file.

Theory of operation: a node list in a file is either a hostlist expression or a list of names;
`NodeList` is the pydantic field type that accepts both and always yields a tuple of names, so
a bad expression surfaces as an ordinary validation error at the field's path and line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field

from rackplane.importers.errors import TopologyFileError
from rackplane.importers.hostlist import expand_hostlist
from rackplane.models._ids import NodeId

_NOT_ID = re.compile(r"[^A-Za-z0-9._:/@+-]")
_MAX_ID = 128


def _node_names(value: object) -> object:
    if isinstance(value, str):
        try:
            return tuple(expand_hostlist(value))
        except ValueError as err:
            raise ValueError(f"expected a hostlist expression: {err}") from None
    if isinstance(value, list | tuple):
        return value  # element checks (strings, id alphabet) are the tuple type's job
    raise ValueError("expected a hostlist expression or a list of node names")


NodeList = Annotated[tuple[NodeId, ...], BeforeValidator(_node_names), Field(min_length=1)]
"""Node names written as `"gb[001-018]"` or `[gb001, gb002]`."""


def to_id(text: str, *, fallback: str) -> str:
    """Make `text` a valid rackplane id: odd characters become `-`, at most 128 characters.

    Args:
        text: e.g. a Kubernetes label value or a file stem.
        fallback: prefix used when nothing usable starts the text (must itself be an id).
    """
    cleaned = _NOT_ID.sub("-", text)
    if not cleaned or not cleaned[0].isascii() or not cleaned[0].isalnum():
        cleaned = f"{fallback}-{cleaned}" if cleaned else fallback
    return cleaned[:_MAX_ID]


def read_text(path: str | os.PathLike[str]) -> tuple[str, str]:
    """Read a topology file as UTF-8; return (text, source name for errors).

    Raises:
        OSError: the file cannot be read.
        TopologyFileError: the file is not UTF-8 text.
    """
    source = os.fspath(path)
    try:
        return Path(path).read_text(encoding="utf-8"), source
    except UnicodeDecodeError as err:
        raise TopologyFileError(
            source, f"expected UTF-8 text (byte {err.start} cannot be decoded)"
        ) from None
