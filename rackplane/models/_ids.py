"""Identifier types shared by every model.

Ids are plain strings with a conservative alphabet: they become Kafka keys, DuckDB values,
file names and terminal cells, so nothing in them may need quoting.
"""

from typing import Annotated

from pydantic import StringConstraints

_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$"

Id = Annotated[str, StringConstraints(pattern=_ID_PATTERN)]
ClusterId = Id
RackId = Id
NodeId = Id
PodId = Id
JobId = Id
CommandId = Id
EventId = Id
Actor = Annotated[str, StringConstraints(min_length=1, max_length=128)]
