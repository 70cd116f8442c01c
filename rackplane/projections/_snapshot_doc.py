"""The snapshot document: a `ClusterState` as plain JSON values (see snapshot.py); reading
it back is `_snapshot_read.py`.

Rules of this file:
- Facts are stored; the indexes `evolve` keeps are derived. A node's `job` and `slice` follow
  from the jobs' slices, a rack's `free` from its nodes, a record's id, rack, pod, size and
  GPUs from the topology. The encoder derives them exactly as the decoder will and stores
  only the departures (a row in `odd`, a `free` row), so any state round-trips, and a state
  `evolve` made costs only its facts: the nodes and racks that are not healthy, cordoned or
  caused, and the jobs.
- The decoder (`_snapshot_read.py`) trusts nothing: every value is type-checked as it is read.
- The command ids seen are sorted by seq: deltas of 1-3 and neighbouring ids compress well.

The document, one JSON object:
- `cluster`, `seq`, `at`: the state's own fields (times in ISO 8601, with their offset);
- `topology`, `settings`: pydantic's JSON of the `Topology` (or null) and `PolicySettings`;
- `nodes`: `facts` [id, health, cordoned, cause] of nodes not plainly healthy; `odd`, whole
  rows of nodes that depart from what the topology and the jobs say; `absent`, topology
  nodes the map lacks;
- `racks`: `facts` [id, health, cause]; `free` [id, nodes] where a free index departs from
  the nodes; `odd`; `absent`;
- `specs`, `jobs`: the `JobSpec`s (pydantic, defaults left out) and one row per job, its
  `JobState` fields after the spec in order, the key first (null when it is the spec's id);
- `finished`: [ids, one status letter per id]; `reservations`, `applied`: [key, value]s;
  `preemption`: [allowed_by, reason];
- `queues` (only when a queue ever held nodes; older documents lack it): [queue, nodes,
  average, since] per leaf queue (`ClusterState.queue_usage`);
- `windows` (only while a reservation stands; older documents lack it): [id, nodes, start,
  end, reason, started, cordoned] per reservation (`ClusterState.windows`), then [users,
  queues] for a dedicated one (older documents have none);
- `repairs` (only once a node was repaired; older documents lack it): [node, seq] per node
  (`ClusterState.repairs`);
- `seen`: `window`, and `recent` and `older`, each [count, ids (one string, one id a line;
  a list when an id holds a line break), seq deltas].
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from itertools import pairwise
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
    RackHealth,
    RackId,
    Topology,
)
from rackplane.projections.state import (
    ClusterState,
    JobState,
    NodeState,
    RackState,
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
"""The top-level keys every document has (the others: `OPTIONAL_KEYS`)."""
OPTIONAL_KEYS = frozenset({"queues", "windows", "repairs"})
"""Keys a document has only when there is something to say (older documents lack them)."""

HEALTH = {h.value: h for h in Health}
RACK_HEALTH = {h.value: h for h in RackHealth}
STATUS = {s.value: s for s in JobStatus}
_CODE = dict(zip(JobStatus, "qprcfx", strict=True))
"""One character per status: the finished jobs' statuses are one string."""
STATUS_OF_CODE = {c: s for s, c in _CODE.items()}
REASONS = frozenset(get_args(BlockReason))
SPECS = TypeAdapter(list[JobSpec])
HEALTHY, RACK_HEALTHY = Health.HEALTHY, RackHealth.HEALTHY
NOBODY: tuple[JobId | None, int | None] = (None, None)
new_tuple = tuple.__new__


# -- encoding -----------------------------------------------------------------------------


def to_document(state: ClusterState) -> dict[str, Any]:
    """The document of `state` (JSON values only)."""
    jobs = list(state.jobs.items())
    held = holders(j for _, j in jobs)
    topology = state.index.topology if state.index is not None else None
    nodes, free = _nodes_out(state, topology, held)
    finished = list(state.finished.items())
    return (
        {
            "cluster": state.cluster,
            "seq": state.seq,
            "at": _time(state.at),
            "topology": None if topology is None else topology.model_dump(mode="json"),
            "settings": state.settings.model_dump(mode="json"),
            "nodes": nodes,
            "racks": _racks_out(state, topology, free),
            "specs": SPECS.dump_python(
                [j.spec for _, j in jobs], mode="json", exclude_defaults=True
            ),
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
        | _queues_out(state)
        | _windows_out(state)
        | ({"repairs": [[n, q] for n, q in state.repairs.items()]} if state.repairs else {})
    )


def _windows_out(state: ClusterState) -> dict[str, Any]:
    if not state.windows:
        return {}
    rows = [
        [w.id, sorted(w.nodes), _time(w.start), _time(w.end), w.reason, w.started,
         sorted(w.cordoned)] + ([list(w.users), list(w.queues)] if w.dedicated else [])
        for w in state.windows.values()
    ]  # fmt: skip
    return {"windows": rows}


def _queues_out(state: ClusterState) -> dict[str, Any]:
    if not state.queue_usage:
        return {}
    rows = [[q, u.nodes, u.average, _time(u.since)] for q, u in state.queue_usage.items()]
    return {"queues": rows}


def holders(jobs: Iterable[JobState]) -> dict[NodeId, tuple[JobId, int]]:
    """Node -> (job, slice) as the jobs' slices say (the last slice naming a node wins)."""
    out: dict[NodeId, tuple[JobId, int]] = {}
    for job in jobs:
        for s in job.slices:
            pair = (job.spec.id, s.index)
            for n in s.nodes:
                out[n] = pair
    return out


def _nodes_out(
    state: ClusterState, topology: Topology | None, held: dict[NodeId, tuple[JobId, int]]
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
            if s.job is None and s.health is HEALTHY and not s.cordoned:
                idle.append(n)
            job, index = held.get(n, NOBODY)
            if s.id != n or s.rack != rid or s.job != job or s.slice != index:
                odd.append(_node_row(n, s))
            elif s.health is not HEALTHY or s.cordoned or s.cause:
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
        if r.health is not RACK_HEALTHY or r.cause:
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
        *(() if j.protected_by is None else (j.protected_by,)),
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
