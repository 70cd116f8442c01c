"""Reading a snapshot document back into a `ClusterState` (see `_snapshot_doc.py` for what
it holds). Nothing is trusted: every value is type-checked as it is read, and anything out of
shape raises (`Malformed`, or TypeError, KeyError, pydantic's ValidationError), which
snapshot.py turns into one `SnapshotError`.
"""

from __future__ import annotations

import math
from array import array
from datetime import datetime
from itertools import accumulate
from typing import Any

from immutables import Map

from rackplane.models import (
    JobId,
    JobSpec,
    NodeId,
    PolicySettings,
    RackId,
    Topology,
    TopologyIndex,
)
from rackplane.projections._snapshot_doc import (
    HEALTH,
    HEALTHY,
    KEYS,
    NOBODY,
    OPTIONAL_KEYS,
    RACK_HEALTH,
    RACK_HEALTHY,
    REASONS,
    SPECS,
    STATUS,
    STATUS_OF_CODE,
    holders,
    new_tuple,
)
from rackplane.projections.state import (
    BlockInfo,
    ClusterState,
    JobState,
    NodeState,
    QueueUsage,
    RackState,
    SeenCommands,
    SliceState,
    Window,
)


class Malformed(ValueError):
    """A value of the document is out of shape."""


def from_document(doc: Any, where: list[str]) -> ClusterState:
    """The state a document describes. `where` gets the section being read (for errors)."""
    if type(doc) is not dict or not KEYS <= doc.keys() <= KEYS | OPTIONAL_KEYS:
        raise Malformed("not a snapshot document (wrong top-level keys)")
    where.append("topology")
    topology = None if doc["topology"] is None else Topology.model_validate(doc["topology"])
    where.append("jobs")
    specs = SPECS.validate_python(doc["specs"])
    rows = _list(doc["jobs"])
    if len(rows) != len(specs):
        raise Malformed(f"{len(rows)} job rows for {len(specs)} specs")
    jobs = [_job_in(spec, row) for spec, row in zip(specs, rows, strict=True)]
    where.append("nodes")
    nodes = _nodes_in(doc["nodes"], topology, holders(j for _, j in jobs))
    where.append("racks")
    racks = _racks_in(doc["racks"], topology, nodes)
    where.append("finished")
    ids, codes = _pair(doc["finished"])
    if not _strings(ids) or type(codes) is not str or len(ids) != len(codes):
        raise Malformed("finished: ids and status codes do not match")
    finished = Map(zip(ids, map(STATUS_OF_CODE.__getitem__, codes), strict=True))
    where.append("seen")
    seen = _dict(doc["seen"], {"window", "recent", "older"})
    seen_commands = SeenCommands(
        _ids_in(seen["recent"]), _ids_in(seen["older"]), _int(seen["window"])
    )
    where.append("applied")
    applied = Map((_int(p), _int(o)) for p, o in map(_pair, _list(doc["applied"])))
    where.append("reservations")
    reservations = Map((_str(r), _str(j)) for r, j in map(_pair, _list(doc["reservations"])))
    where.append("settings")
    settings = PolicySettings.model_validate(doc["settings"])
    where.append("queues")
    queue_usage = Map(_usage_in(row) for row in _list(doc.get("queues", [])))
    where.append("windows")
    windows = Map(_window_in(row) for row in _list(doc.get("windows", [])))
    where.append("repairs")
    repairs = Map((_str(n), _int(q)) for n, q in map(_pair, _list(doc.get("repairs", []))))
    where.append("header fields")
    allowed_by, reason = _pair(doc["preemption"])
    return ClusterState(
        cluster=_str(doc["cluster"]),
        seq=_int(doc["seq"]),
        at=_time_in(doc["at"]),
        index=None if topology is None else TopologyIndex(topology),
        settings=settings,
        nodes=Map(nodes),
        racks=Map(racks),
        jobs=Map(jobs),
        finished=finished,
        reservations=reservations,
        interactive_preemption_allowed_by=_opt_str(allowed_by),
        interactive_preemption_reason=_str(reason),
        seen=seen_commands,
        applied=applied,
        queue_usage=queue_usage,
        windows=windows,
        repairs=repairs,
    )


def _window_in(row: Any) -> tuple[str, Window]:
    row = _list(row)
    if len(row) not in (7, 9):
        raise Malformed("a reservation row has 7 fields, or 9 (a dedicated one)")
    name, nodes, start, end, reason, started, cordoned, *members = row
    users, queues = members or ([], [])
    window = Window(
        _str(name),
        frozenset(_str_list(nodes)),
        _time_req(start),
        _time_req(end),
        _str(reason),
        _bool(started),
        frozenset(_str_list(cordoned)),
        tuple(_str_list(users)),
        tuple(_str_list(queues)),
    )
    return window.id, window


def _usage_in(row: Any) -> tuple[str, QueueUsage]:
    row = _list(row)
    if len(row) != 4:
        raise Malformed("a queue usage row has 4 fields")
    name, nodes, average, since = row
    if type(average) not in (int, float) or not math.isfinite(average) or average < 0:
        raise Malformed(f"queue usage average is {average!r}, not a finite number >= 0")
    return _str(name), QueueUsage(_int(nodes), float(average), _time_req(since))


def _nodes_in(
    section: Any, topology: Topology | None, held: dict[NodeId, tuple[JobId, int]]
) -> dict[NodeId, NodeState]:
    section = _dict(section, {"facts", "odd", "absent"})
    nodes: dict[NodeId, NodeState] = {}
    for rack in topology.racks if topology is not None else ():
        rid = rack.id
        for n in rack.nodes:
            job, index = held.get(n, NOBODY)
            nodes[n] = new_tuple(NodeState, (n, rid, HEALTHY, False, job, index, ""))
    for n, health, cordoned, cause in _list(section["facts"]):
        s = nodes[n]
        nodes[n] = NodeState(
            s.id, s.rack, HEALTH[health], _bool(cordoned), s.job, s.slice, _str(cause)
        )
    for key, n, rack, health, cordoned, job, index, cause in _list(section["odd"]):
        nodes[_str(key)] = NodeState(
            _str(n),
            _str(rack),
            HEALTH[health],
            _bool(cordoned),
            _opt_str(job),
            _opt_int(index),
            _str(cause),
        )
    for n in _list(section["absent"]):
        del nodes[n]
    return nodes


def _racks_in(
    section: Any, topology: Topology | None, nodes: dict[NodeId, NodeState]
) -> dict[RackId, RackState]:
    section = _dict(section, {"facts", "free", "odd", "absent"})
    racks: dict[RackId, RackState] = {}
    for rack in topology.racks if topology is not None else ():
        idle = []
        for n in rack.nodes:
            s = nodes.get(n)
            if s is not None and s.job is None and s.health is HEALTHY and not s.cordoned:
                idle.append(n)
        racks[rack.id] = new_tuple(
            RackState,
            (rack.id, rack.pod, len(rack.nodes), rack.gpus_per_node, frozenset(idle), *_FAIR),
        )
    for rid, free in _list(section["free"]):
        racks[rid] = racks[rid]._replace(free=frozenset(_str_list(free)))
    for rid, health, cause in _list(section["facts"]):
        racks[rid] = racks[rid]._replace(health=RACK_HEALTH[health], cause=_str(cause))
    for key, rid, pod, size, gpus, free, health, cause in _list(section["odd"]):
        racks[_str(key)] = RackState(
            _str(rid),
            _str(pod),
            _int(size),
            _int(gpus),
            frozenset(_str_list(free)),
            RACK_HEALTH[health],
            _str(cause),
        )
    for rid in _list(section["absent"]):
        del racks[rid]
    return racks


_FAIR = (RACK_HEALTHY, "")
"""A rack's health and cause when no fact says otherwise."""


def _job_in(spec: JobSpec, row: Any) -> tuple[JobId, JobState]:
    (
        key,
        status,
        order,
        submitted_at,
        slices,
        placed_at,
        started_at,
        run_since,
        blocked,
        borrowing,
        front,
        preemptions,
        migrations,
        swaps,
        *rest,  # protected_by: written only when set (snapshots before it have 14 fields)
    ) = _list(row)
    if len(rest) > 1:
        raise Malformed(f"a job record has {14 + len(rest)} fields, at most 15")
    job = new_tuple(
        JobState,
        (
            spec,
            STATUS[status],
            _int(order),
            _time_req(submitted_at),
            tuple(_slice_in(s) for s in _list(slices)),
            _time_in(placed_at),
            _time_in(started_at),
            _time_in(run_since),
            None if blocked is None else _block_in(blocked),
            _bool(borrowing),
            _bool(front),
            _int(preemptions),
            _int(migrations),
            _int(swaps),
            _str(rest[0]) if rest else None,
        ),
    )
    return (spec.id if key is None else _str(key)), job


def _slice_in(row: Any) -> SliceState:
    index, size, nodes, racks = _list(row)
    return new_tuple(
        SliceState, (_int(index), _int(size), tuple(_str_list(nodes)), tuple(_str_list(racks)))
    )


def _block_in(row: Any) -> BlockInfo:
    reason, since, allocatable, placeable, explanation = _list(row)
    if reason not in REASONS:
        raise Malformed(f"unknown block reason {reason!r}")
    return BlockInfo(
        reason,
        _time_req(since),
        _int(allocatable),
        _int(placeable),
        _str(explanation),
    )


def _ids_in(value: Any) -> Map[str, int]:
    count, ids, deltas = _list(value)
    if type(ids) is str:
        ids = ids.split("\n") if count else []
    elif not _strings(ids):
        raise Malformed("command ids are not strings")
    if len(ids) != count or len(_list(deltas)) != count:
        raise Malformed("command ids and seqs do not match")
    # array: every delta an integer (of 64 bits), checked in C
    return Map(zip(ids, accumulate(array("q", deltas)), strict=True))


# Type checks: JSON gives the right Python types or the document is malformed (bool is
# refused where an int is wanted: `type(x) is int`).


def _list(x: Any) -> list[Any]:
    if type(x) is not list:
        raise Malformed(f"expected a list, got {type(x).__name__}")
    return x


def _pair(x: Any) -> tuple[Any, Any]:
    a, b = _list(x)
    return a, b


def _dict(x: Any, keys: set[str]) -> dict[str, Any]:
    if type(x) is not dict or x.keys() != keys:
        raise Malformed(f"expected an object with keys {sorted(keys)}")
    return x


def _strings(x: Any) -> bool:
    return type(x) is list and all(type(s) is str for s in x)


def _str_list(x: Any) -> list[str]:
    if not _strings(x):
        raise Malformed("expected a list of strings")
    return x  # type: ignore[no-any-return]


def _str(x: Any) -> str:
    if type(x) is not str:
        raise Malformed(f"expected a string, got {type(x).__name__}")
    return x


def _opt_str(x: Any) -> str | None:
    return None if x is None else _str(x)


def _int(x: Any) -> int:
    if type(x) is not int:
        raise Malformed(f"expected an integer, got {type(x).__name__}")
    return x


def _opt_int(x: Any) -> int | None:
    return None if x is None else _int(x)


def _bool(x: Any) -> bool:
    if type(x) is not bool:
        raise Malformed(f"expected true or false, got {type(x).__name__}")
    return x


def _time_in(x: Any) -> datetime | None:
    return None if x is None else _time_req(x)


def _time_req(x: Any) -> datetime:
    return datetime.fromisoformat(_str(x))
