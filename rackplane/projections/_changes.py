"""Which keys of a state's persistent map the fold changed, so a table derived from the map
can be patched for those keys instead of being rebuilt over every key.

`evolve` records, for each map it rebuilds (`racks`, `jobs`), the map it started from and
the keys it may have changed (a superset is fine: a patch recomputes those keys from the new
map). A reader holding a table derived from an earlier map asks `since` for the keys changed
between the two, walking the log back from the new map. The log holds the last `KEPT`
changes per kind; a map the fold did not make (a registration, a snapshot) or one too far
back has no path, and the reader rebuilds. Nothing here changes what any table says: tests
check patched tables against tables rebuilt from scratch
(tests/core/test_incremental_tables.py).

Cost: O(keys changed) per fold to record; O(folds walked + keys changed) to ask.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

KEPT = 256
"""Changes remembered per kind: more than the folds between two scheduling cycles."""

_Entry = tuple[Any, Any, Iterable[Hashable]]
_LOGS: dict[str, OrderedDict[int, _Entry]] = {"racks": OrderedDict(), "jobs": OrderedDict()}
"""Per kind: id(new map) -> (new map, old map, keys changed), oldest first. Holding the new
map keeps its id from being reused while the entry lives. An `OrderedDict` drops its oldest
in O(1): `next(iter(d))` on a plain dict walks the slots its earlier deletions left at the
front (a few percent of a simulated year's CPU, with two records per event)."""


def record(kind: str, new: object, old: object, keys: Iterable[Hashable]) -> None:
    """Remember that `new` is `old` with (at most) `keys` changed."""
    if new is old:
        return
    log = _LOGS[kind]
    log[id(new)] = (new, old, keys)
    if len(log) > KEPT:
        log.popitem(last=False)


def since(
    kind: str, new: object, known: Callable[[object], bool], limit: int = KEPT
) -> tuple[object, set[Hashable]] | None:
    """The nearest map back from `new` for which `known(map)` holds, with every key changed
    between it and `new`; None when the log has no such path (rebuild instead)."""
    log = _LOGS[kind]
    changed: set[Hashable] = set()
    at = new
    for _ in range(limit):
        if known(at):
            return at, changed
        entry = log.get(id(at))
        if entry is None or entry[0] is not at:
            return None
        changed.update(entry[2])
        at = entry[1]
    return None
