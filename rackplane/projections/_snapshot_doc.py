"""The snapshot document: a `ClusterState` as plain JSON values, and back (see snapshot.py).

Rules of this file:
- Facts are stored; the indexes `evolve` keeps are derived. A node's `job` and `slice` follow
  from the jobs' slices, a rack's `free` from its nodes, a record's id, rack, pod, size and
  GPUs from the topology. The encoder derives them exactly as the decoder will and stores
  only the departures (a row in `odd`, a `free` row), so any state round-trips, and a state
  `evolve` made costs only its facts: the nodes and racks that are not healthy, cordoned or
  caused, and the jobs.
- The decoder trusts nothing: every value is type-checked as it is read; anything out of
  shape raises (ValueError, TypeError, KeyError, pydantic's ValidationError), which
  snapshot.py turns into one `SnapshotError`.
- The command ids seen are sorted by seq: deltas of 1-3 and neighbouring ids compress well.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from datetime import datetime
from itertools import accumulate, pairwise
from operator import itemgetter
from typing import Any, get_args

from immutables import Map
from pydantic import TypeAdapter

from rackplane.models import (
    BlockReason,
    Health,
    JobId,
    JobSpec,
    JobStatus,
    NodeId,
    PolicySettings,
    RackHealth,
    RackId,
    Topology,
    TopologyIndex,
)
from rackplane.projections.state import (
    BlockInfo,
    ClusterState,
    JobState,
    NodeState,
    RackState,
    SeenCommands,
    SliceState,
)

KEYS = frozenset(
    {
        "cluster",
        "seq",
        "at",
        "topology",
        "settings",
        "nodes",
        "racks",
        "specs",
        "jobs",
        "finished",
        "reservations",
        "preemption",
        "seen",
        "applied",
    }
)
"""The top-level keys of a document, all required."""

_HEALTH = {h.value: h for h in Health}
_RACK_HEALTH = {h.value: h for h in RackHealth}
_STATUS = {s.value: s for s in JobStatus}
_CODE = dict(zip(JobStatus, "qprcfx", strict=True))
"""One character per status: the finished jobs' statuses are one string."""
_STATUS_OF_CODE = {c: s for s, c in _CODE.items()}
_REASONS = frozenset(get_args(BlockReason))
_SPECS = TypeAdapter(list[JobSpec])
_HEALTHY, _RACK_HEALTHY = Health.HEALTHY, RackHealth.HEALTHY
_NOBODY: tuple[JobId | None, int | None] = (None, None)
_new = tuple.__new__


# -- encoding -----------------------------------------------------------------------------


def to_document(state: ClusterState) -> dict[str, Any]:
    """The document of `state` (JSON values only)."""
    jobs = list(state.jobs.items())
    holders = _holders(j for _, j in jobs)
    topology = state.index.topology if state.index is not None else None
    nodes, free = _nodes_out(state, topology, holders)
    finished = list(state.finished.items())
    return {
        "cluster": state.cluster,
        "seq": state.seq,
        "at": _time(state.at),
        "topology": None if topology is None else topology.model_dump(mode="json"),
        "settings": state.settings.model_dump(mode="json"),
        "nodes": nodes,
        "racks": _racks_out(state, topology, free),
        "specs": _SPECS.dump_python([j.spec for _, j in jobs], mode="json", exclude_defaults=True),
        "jobs": [_job_out(k, j) for k, j in jobs],
        "finished": [[k for k, _ in finished], "".join(_CODE[s] for _, s in finished)],
        "reservations": [[r, j] for r, j in state.reservations.items()],
        "preemption": [
            state.interactive_preemption_allowed_by,
            state.interactive_preemption_reason,
        ],
        "seen": {
            "window": state.seen.window,
            "recent": _ids_out(state.seen.recent),
            "older": _ids_out(state.seen.older),
        },
        "applied": [[p, o] for p, o in state.applied.items()],
    }


def _holders(jobs: Iterable[JobState]) -> dict[NodeId, tuple[JobId, int]]:
    """Node -> (job, slice) as the jobs' slices say (the last slice naming a node wins)."""
    out: dict[NodeId, tuple[JobId, int]] = {}
    for job in jobs:
        for s in job.slices:
            pair = (job.spec.id, s.index)
            for n in s.nodes:
                out[n] = pair
    return out


def _nodes_out(
    state: ClusterState, topology: Topology | None, holders: dict[NodeId, tuple[JobId, int]]
) -> tuple[dict[str, list[Any]], dict[RackId, frozenset[NodeId]]]:
    """The nodes section, and each topology rack's free index as derived from the nodes."""
    nodes = state.nodes
    facts: list[Any] = []
    odd: list[Any] = []
    absent: list[NodeId] = []
    free: dict[RackId, frozenset[NodeId]] = {}
    matched = 0
    for rack in topology.racks if topology is not None else ():
        rid = rack.id
        idle = []
        for n in rack.nodes:
            s = nodes.get(n)
            if s is None:
                absent.append(n)
                continue
            matched += 1
            if s.job is None and s.health is _HEALTHY and not s.cordoned:
                idle.append(n)
            job, index = holders.get(n, _NOBODY)
            if s.id != n or s.rack != rid or s.job != job or s.slice != index:
                odd.append(_node_row(n, s))
            elif s.health is not _HEALTHY or s.cordoned or s.cause:
                facts.append([n, s.health.value, s.cordoned, s.cause])
        free[rid] = frozenset(idle)
    if matched != len(nodes):  # nodes the topology does not have
        known = {n for r in topology.racks for n in r.nodes} if topology is not None else set()
        odd.extend(_node_row(k, s) for k, s in nodes.items() if k not in known)
    return {"facts": facts, "odd": odd, "absent": absent}, free


def _node_row(key: NodeId, s: NodeState) -> list[Any]:
    return [key, s.id, s.rack, s.health.value, s.cordoned, s.job, s.slice, s.cause]


def _racks_out(
    state: ClusterState, topology: Topology | None, free: dict[RackId, frozenset[NodeId]]
) -> dict[str, list[Any]]:
    racks = state.racks
    facts: list[Any] = []
    frees: list[Any] = []
    odd: list[Any] = []
    absent: list[RackId] = []
    matched = 0
    for rack in topology.racks if topology is not None else ():
        r = racks.get(rack.id)
        if r is None:
            absent.append(rack.id)
            continue
        matched += 1
        if (r.id, r.pod, r.size, r.gpus_per_node) != (
            rack.id,
            rack.pod,
            len(rack.nodes),
            rack.gpus_per_node,
        ):
            odd.append(_rack_row(rack.id, r))
            continue
        if r.free != free[rack.id]:
            frees.append([rack.id, sorted(r.free)])
        if r.health is not _RACK_HEALTHY or r.cause:
            facts.append([rack.id, r.health.value, r.cause])
    if matched != len(racks):  # racks the topology does not have
        known = {r.id for r in topology.racks} if topology is not None else set()
        odd.extend(_rack_row(k, r) for k, r in racks.items() if k not in known)
    return {"facts": facts, "free": frees, "odd": odd, "absent": absent}


def _rack_row(key: RackId, r: RackState) -> list[Any]:
    return [key, r.id, r.pod, r.size, r.gpus_per_node, sorted(r.free), r.health.value, r.cause]


def _job_out(key: JobId, j: JobState) -> list[Any]:
    """A job's row: its fields in order, the spec (in `specs`) left out, the key first when
    it is not the spec's id."""
    b = j.blocked
    return [
        None if key == j.spec.id else key,
        j.status.value,
        j.order,
        _time(j.submitted_at),
        [[s.index, s.size, list(s.nodes), list(s.racks)] for s in j.slices],
        _time(j.placed_at),
        _time(j.started_at),
        _time(j.run_since),
        None
        if b is None
        else [b.reason, _time(b.since), b.allocatable_nodes, b.placeable_slices, b.explanation],
        j.borrowing,
        j.front,
        j.preemptions,
        j.migrations,
        j.swaps,
    ]


def _ids_out(seen: Map[str, int]) -> list[Any]:
    """[count, ids, seq deltas], in seq order. The ids are one string, one id a line, unless
    an id holds a line break (then a list)."""
    pairs = sorted(seen.items(), key=itemgetter(1))
    ids = [k for k, _ in pairs]
    seqs = [s for _, s in pairs]
    lines = "\n".join(ids)
    one_string = lines.count("\n") == len(ids) - 1
    return [len(ids), lines if one_string else ids, seqs[:1] + [b - a for a, b in pairwise(seqs)]]


def _time(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


# -- decoding -----------------------------------------------------------------------------


class Malformed(ValueError):
    """A value of the document is out of shape."""


def from_document(doc: Any, where: list[str]) -> ClusterState:
    """The state a document describes. `where` gets the section being read (for errors)."""
    if type(doc) is not dict or doc.keys() != KEYS:
        raise Malformed("not a snapshot document (wrong top-level keys)")
    where.append("topology")
    topology = None if doc["topology"] is None else Topology.model_validate(doc["topology"])
    where.append("jobs")
    specs = _SPECS.validate_python(doc["specs"])
    rows = _list(doc["jobs"])
    if len(rows) != len(specs):
        raise Malformed(f"{len(rows)} job rows for {len(specs)} specs")
    jobs = [_job_in(spec, row) for spec, row in zip(specs, rows, strict=True)]
    where.append("nodes")
    nodes = _nodes_in(doc["nodes"], topology, _holders(j for _, j in jobs))
    where.append("racks")
    racks = _racks_in(doc["racks"], topology, nodes)
    where.append("finished")
    ids, codes = _pair(doc["finished"])
    if not _strings(ids) or type(codes) is not str or len(ids) != len(codes):
        raise Malformed("finished: ids and status codes do not match")
    finished = Map(zip(ids, map(_STATUS_OF_CODE.__getitem__, codes), strict=True))
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
    )


def _nodes_in(
    section: Any, topology: Topology | None, holders: dict[NodeId, tuple[JobId, int]]
) -> dict[NodeId, NodeState]:
    section = _dict(section, {"facts", "odd", "absent"})
    nodes: dict[NodeId, NodeState] = {}
    for rack in topology.racks if topology is not None else ():
        rid = rack.id
        for n in rack.nodes:
            job, index = holders.get(n, _NOBODY)
            nodes[n] = _new(NodeState, (n, rid, _HEALTHY, False, job, index, ""))
    for n, health, cordoned, cause in _list(section["facts"]):
        s = nodes[n]
        nodes[n] = NodeState(
            s.id, s.rack, _HEALTH[health], _bool(cordoned), s.job, s.slice, _str(cause)
        )
    for key, n, rack, health, cordoned, job, index, cause in _list(section["odd"]):
        nodes[_str(key)] = NodeState(
            _str(n),
            _str(rack),
            _HEALTH[health],
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
            if s is not None and s.job is None and s.health is _HEALTHY and not s.cordoned:
                idle.append(n)
        racks[rack.id] = _new(
            RackState,
            (rack.id, rack.pod, len(rack.nodes), rack.gpus_per_node, frozenset(idle), *_FAIR),
        )
    for rid, free in _list(section["free"]):
        racks[rid] = racks[rid]._replace(free=frozenset(_str_list(free)))
    for rid, health, cause in _list(section["facts"]):
        racks[rid] = racks[rid]._replace(health=_RACK_HEALTH[health], cause=_str(cause))
    for key, rid, pod, size, gpus, free, health, cause in _list(section["odd"]):
        racks[_str(key)] = RackState(
            _str(rid),
            _str(pod),
            _int(size),
            _int(gpus),
            frozenset(_str_list(free)),
            _RACK_HEALTH[health],
            _str(cause),
        )
    for rid in _list(section["absent"]):
        del racks[rid]
    return racks


_FAIR = (_RACK_HEALTHY, "")
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
    ) = _list(row)
    job = _new(
        JobState,
        (
            spec,
            _STATUS[status],
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
        ),
    )
    return (spec.id if key is None else _str(key)), job


def _slice_in(row: Any) -> SliceState:
    index, size, nodes, racks = _list(row)
    return _new(
        SliceState, (_int(index), _int(size), tuple(_str_list(nodes)), tuple(_str_list(racks)))
    )


def _block_in(row: Any) -> BlockInfo:
    reason, since, allocatable, placeable, explanation = _list(row)
    if reason not in _REASONS:
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
