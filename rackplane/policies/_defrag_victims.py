"""Step 1 of Auto Defrag, counted once per plan: the victims, what each costs, and the nodes
each would give back, rack by rack (see `defrag`).

Theory of operation. A plan reads every candidate victim: the search ranks all of them by
cost, and each rack's options and lower bound need the victims on that rack. That is
O(victims) per plan and cannot be less (costs move with `now`), so the pass is kept to a few
steps per victim: the candidates of a plan's key (beneficiary, priority, interactive
preemption allowed) and what does not move with `now` (GPUs, weight, nodes per rack, ...)
form a pool kept from the last plan of that key and patched for the jobs the fold changed
since (`_pool`, `projections._changes`: O(jobs changed)); a pool built anew reads every job,
remembering each job's counts while its state is the same object (`_MEMO`), and a slice
lies inside the racks its `racks` names (a state invariant), so a rack-local slice's nodes
are counted by its length, not node by node. Per plan, each victim's cost at `now` is
computed (one pass over the pool); the victims-by-rack tables come with the pool, copied
only where a victim frees fewer nodes than it holds. The nodes that do not count (out of
service: unhealthy or cordoned; kept from the job by a reservation) are taken off their
holders: the out-of-service ones come from a table by rack patched for the racks the fold
changed since the last plan (`out_of_service`), not from a pass over every node.
Nothing here depends on the order the jobs come in (a patched pool lists the changed jobs
last): every later order is by (cost, id).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from rackplane.models import Health, JobId, JobKind, NodeId, RackId, TopologyIndex
from rackplane.projections import _changes
from rackplane.projections.state import ClusterState, JobState, NodeState

_HEALTHY = Health.HEALTHY


@dataclass(frozen=True, slots=True)
class Victims:
    """The candidate victims of one plan, counted (see the module docstring)."""

    pool: list[JobState]
    """Candidates, in no particular order."""
    by_id: dict[JobId, JobState]
    lost: dict[JobId, float]
    """GPU-hours each loses when preempted (`restart_cost`)."""
    cost: dict[JobId, float]
    """The ranking score: `lost` weighted (`victim_cost`)."""
    freed_in: dict[JobId, dict[RackId, int]]
    """Per victim, the nodes it gives back per rack (healthy, uncordoned, not kept); only
    victims and racks with at least one."""
    in_rack: dict[RackId, dict[JobId, int]]
    """`freed_in` by rack."""
    freed_total: dict[JobId, int]
    demand: dict[JobId, int]
    """Nodes each victim asks for (what its re-placement needs)."""


def eligible(state: ClusterState, beneficiary: JobId, priority: int) -> list[JobState]:
    """Jobs the defrag may preempt for `beneficiary` of `priority`, in the state's order."""
    # Victims never include the beneficiary itself, nor jobs of higher priority.
    interactive_ok = (
        state.settings.allow_interactive_preemption
        and state.interactive_preemption_allowed_by is not None
    )
    managed, interactive = JobKind.MANAGED, JobKind.INTERACTIVE
    out = []
    for v in state.jobs.values():
        spec = v.spec
        if spec.id == beneficiary or spec.priority > priority or not v.status.holds_nodes:
            continue
        if v.protected_by is not None:  # its disruption budget refuses: not a victim now
            continue
        if spec.reservation is not None:  # its room is its reservation: it is not moved
            continue
        kind = spec.kind
        if kind is managed or (kind is interactive and interactive_ok):
            out.append(v)
    return out


def count_victims(
    state: ClusterState,
    beneficiary: JobId,
    priority: int,
    now: datetime,
    kept: frozenset[NodeId],
) -> Victims:
    """Candidates for a job of `priority`, their costs at `now` and the nodes they free
    outside `kept` (`eligible`, `restart_cost` and `victim_cost`, one pass over the jobs)."""
    interactive_ok = (
        state.settings.allow_interactive_preemption
        and state.interactive_preemption_allowed_by is not None
    )
    pool = _pool(state, (priority, interactive_ok))
    if beneficiary in pool.by_id:  # it holds nodes: never its own victim (a copy, not kept)
        pool = _copy(pool)
        _drop(pool, beneficiary, set())
    overhead = state.settings.restart_overhead
    zero = _ZERO
    lost: dict[JobId, float] = {}
    cost: dict[JobId, float] = {}
    for vid, (gpus, factor, since, interval) in pool.terms.items():
        # `restart_cost` and `victim_cost`, the same operations in the same order
        # (`JobState.at_risk` inline; `factor` is `victim_weight`).
        if since is None or now <= since:
            risk = zero
        else:
            elapsed = now - since
            risk = elapsed % interval if interval else elapsed
        lost[vid] = x = gpus * (risk + overhead).total_seconds() / 3600.0
        cost[vid] = x * factor
    # What the victims hold but do not give back: nodes out of service, nodes kept. The
    # pool's counts are shared: a victim that loses some gets a copy, and only the tables'
    # entries of those victims change (copies again).
    held = pool.held
    lose: dict[JobId, dict[RackId, int]] = {}
    nodes_of = state.nodes
    for n in _not_given(state, kept):
        node = nodes_of[n]
        job = node.job
        if job is None or job not in held:
            continue
        mine = lose.get(job)
        if mine is None:
            mine = lose[job] = dict(held[job])
        mine[node.rack] -= 1
    if not lose:
        freed_in, in_rack, freed_total = pool.freed_in, pool.in_rack, pool.freed_total
    else:
        freed_in, freed_total = dict(pool.freed_in), dict(pool.freed_total)
        in_rack = dict(pool.in_rack)
        owned: set[RackId] = set()
        for vid, mine in lose.items():
            for r in held[vid]:  # every rack of its counts has its entry
                per = _own(in_rack, r, owned)
                del per[vid]
                if not per:
                    del in_rack[r]
            freed_in.pop(vid, None)
            freed_total.pop(vid, None)
            _add(
                freed_in, in_rack, freed_total, vid, {r: k for r, k in mine.items() if k > 0}, owned
            )
    by_id = pool.by_id
    return Victims(
        list(by_id.values()), by_id, lost, cost, freed_in, in_rack, freed_total, pool.demand
    )


_Key = tuple[int, bool]
"""What decides whether a job may be a victim, but for the beneficiary itself: the
beneficiary's priority and whether an operator allows interactive preemption. The
beneficiary is not in the key: a queued one holds no nodes (it is no candidate anyway), so
the next head of the blocked line, of the same priority, patches the last head's pool
instead of building one (a pass over every job); a beneficiary that holds nodes is taken
out of a copy (`count_victims`)."""


@dataclass(slots=True)
class _Pool:
    """The candidates for one `_Key` on one jobs map, with what does not move with `now`
    (none of its dicts may be changed once built)."""

    jobs: object
    """The jobs map it was built for."""
    index: TopologyIndex | None
    key: _Key
    terms: dict[JobId, tuple[int, float, datetime | None, timedelta | None]]
    """Per candidate: its GPUs, `victim_weight`, when its run started, its checkpoint
    interval (what its cost at `now` needs)."""
    by_id: dict[JobId, JobState]
    demand: dict[JobId, int]
    held: dict[JobId, dict[RackId, int]]
    """Per candidate, its nodes per rack (all of them, in service or not)."""
    freed_in: dict[JobId, dict[RackId, int]]
    """`held` of the candidates that hold some: `Victims.freed_in` while no node is out of
    service or kept."""
    in_rack: dict[RackId, dict[JobId, int]]
    freed_total: dict[JobId, int]


_POOLS: list[_Pool] = []
"""The last pools built, newest first: a few keys (the priorities of the jobs planned for,
with and without interactive preemption allowed) alternate."""
_POOLS_KEPT = 4


def _pool(state: ClusterState, key: _Key) -> _Pool:
    """The candidates of `key` on `state`'s jobs. A pool of the same key for an earlier jobs
    map of the same fold history is patched for the jobs changed since
    (`projections._changes`): O(jobs changed), where a rebuild is a pass over every job."""
    jobs, index = state.jobs, state.index
    mine = [p for p in _POOLS if p.key == key and p.index is index]
    got = next((p for p in mine if p.jobs is jobs), None)
    if got is None:
        bases = {id(p.jobs): p for p in mine}
        path = _changes.since("jobs", jobs, lambda m: id(m) in bases) if bases else None
        if path is None:
            got = _rebuilt(state, key)
        else:
            got = _patched(state, key, bases[id(path[0])], cast("set[JobId]", path[1]))
    else:
        _POOLS.remove(got)
    _POOLS.insert(0, got)
    del _POOLS[_POOLS_KEPT:]
    return got


def _rebuilt(state: ClusterState, key: _Key) -> _Pool:
    pool = _Pool(state.jobs, state.index, key, {}, {}, {}, {}, {}, {}, {})
    for got in _remembered(state).values():
        _admit(pool, got)
    return pool


def _remembered(state: ClusterState) -> dict[int, _Job]:
    """Every job of `state` as a plan reads it (`_Job`), from the memo where the job is the
    same object; the memo then holds these."""
    memo = _memo(state)
    fresh: dict[int, _Job] = {}
    for v in state.jobs.values():
        k = id(v)
        got = memo.get(k)
        if got is None or got[0] is not v:
            got = _job(state, v)
        fresh[k] = got
    _MEMO[:] = [(state.index, fresh)]
    return fresh


def prime(state: ClusterState, priorities: Iterable[int] = ()) -> None:
    """Build what a first plan on `state` would: the per-job memo, the out-of-service table
    and the pools of `priorities` (the newest `_POOLS_KEPT`). A worker primes a replica it
    has just rebuilt, so the first plan after a start costs what later ones do (at 4,096
    racks, a pass over ~8,700 jobs and one over ~74,000 nodes: docs/BENCHMARKS.md)."""
    out_of_service(state)
    _remembered(state)
    interactive_ok = (
        state.settings.allow_interactive_preemption
        and state.interactive_preemption_allowed_by is not None
    )
    for p in list(dict.fromkeys(priorities))[:_POOLS_KEPT][::-1]:
        _pool(state, (p, interactive_ok))


def _patched(state: ClusterState, key: _Key, base: _Pool, changed: set[JobId]) -> _Pool:
    pool = _copy(base, state.jobs)
    owned: set[RackId] = set()  # racks whose victims' dict is this pool's own copy
    jobs = state.jobs
    for vid in changed:
        if vid in pool.by_id:
            _drop(pool, vid, owned)
        v = jobs.get(vid)
        if v is not None:
            _admit(pool, _job(state, v), owned)
    return pool


def _copy(base: _Pool, jobs: object | None = None) -> _Pool:
    """A pool whose tables may be changed (their per-rack dicts only through `_own`)."""
    return _Pool(
        base.jobs if jobs is None else jobs, base.index, base.key, dict(base.terms),
        dict(base.by_id), dict(base.demand), dict(base.held), dict(base.freed_in),
        dict(base.in_rack), dict(base.freed_total),
    )  # fmt: skip


def _drop(pool: _Pool, vid: JobId, owned: set[RackId]) -> None:
    """Take a candidate out of a pool's own tables (`_copy`)."""
    for r in pool.held[vid]:
        per = _own(pool.in_rack, r, owned)
        del per[vid]
        if not per:
            del pool.in_rack[r]
    del pool.terms[vid], pool.by_id[vid], pool.demand[vid], pool.held[vid]
    pool.freed_in.pop(vid, None)
    pool.freed_total.pop(vid, None)


def _own(
    in_rack: dict[RackId, dict[JobId, int]], rack: RackId, owned: set[RackId]
) -> dict[JobId, int]:
    """The victims of `rack` in `in_rack`, copied first when shared with another table."""
    per = in_rack.get(rack)
    if per is None:
        per = in_rack[rack] = {}
    elif rack not in owned:
        per = in_rack[rack] = dict(per)
    owned.add(rack)
    return per


def _add(
    freed_in: dict[JobId, dict[RackId, int]],
    in_rack: dict[RackId, dict[JobId, int]],
    freed_total: dict[JobId, int],
    vid: JobId,
    mine: dict[RackId, int],
    owned: set[RackId] | None,
) -> None:
    """Enter a victim that frees `mine` (nothing when empty) in the three tables."""
    if not mine:
        return
    freed_in[vid] = mine
    total = 0
    for r, k in mine.items():
        total += k
        per = in_rack.get(r) if owned is None else _own(in_rack, r, owned)
        if per is None:
            per = in_rack[r] = {}
        per[vid] = k
    freed_total[vid] = total


def _admit(pool: _Pool, job: _Job, owned: set[RackId] | None = None) -> None:
    """Add the job to the pool when it is a candidate of the pool's key (`eligible`);
    `owned`: the racks whose victims' dicts the pool may change (None: all)."""
    v, vid, kind, vprio, mine, gpus, mult, since, interval, nodes = job
    priority, interactive_ok = pool.key
    if not kind or vprio > priority:
        return
    if kind == _INTERACTIVE and not interactive_ok:
        return
    pool.terms[vid] = (gpus, 2.0 ** (vprio - priority) * mult, since, interval)
    pool.by_id[vid] = v
    pool.demand[vid] = nodes
    pool.held[vid] = mine
    _add(pool.freed_in, pool.in_rack, pool.freed_total, vid, mine, owned)


_Job = tuple[
    JobState, JobId, int, int, dict[RackId, int], int, int, datetime | None, timedelta | None, int
]
"""What a plan reads of a job, all fixed while its state is the same object: the job, its id,
whether it may ever be a victim (`_MANAGED`, `_INTERACTIVE`; 0: never: it holds no nodes, its
disruption budget refuses, it runs in a reservation, or its kind is never preempted), its
priority, its nodes per rack (all of them, in service or not), its GPUs, 1 + its preemptions,
when its run started, its checkpoint interval, and the nodes it asked for."""

_MANAGED, _INTERACTIVE = 1, 2
_ZERO = timedelta(0)
_NO_RACKS: dict[RackId, int] = {}

_MEMO: list[tuple[TopologyIndex | None, dict[int, _Job]]] = []
"""The last plan's `_Job` of every job (by identity: a job's state is immutable and replaced
when it changes), for the topology it was counted on. Between two plans most jobs are the
same objects; each plan keeps only the jobs of its state, so the memo never outgrows them."""


def _memo(state: ClusterState) -> dict[int, _Job]:
    if _MEMO and _MEMO[0][0] is state.index:
        return _MEMO[0][1]
    return {}


def _job(state: ClusterState, v: JobState) -> _Job:
    """A job as a plan reads it (`_Job`); its nodes per rack and GPUs only when it may be a
    victim (`_held`)."""
    spec = v.spec
    kind = 0
    if v.status.holds_nodes and v.protected_by is None and spec.reservation is None:
        if spec.kind is JobKind.MANAGED:
            kind = _MANAGED
        elif spec.kind is JobKind.INTERACTIVE:
            kind = _INTERACTIVE
    mine, gpus = _held(state, v) if kind else (_NO_RACKS, 0)
    interval = spec.checkpoint_interval
    return (
        v, spec.id, kind, spec.priority, mine, gpus, 1 + v.preemptions, v.run_since, interval,
        spec.nodes,
    )  # fmt: skip


def _held(state: ClusterState, v: JobState) -> tuple[dict[RackId, int], int]:
    """A job's nodes per rack: a slice in one rack (a state invariant: its `racks` are its
    nodes' racks) counts by its length; and its GPUs (`job_gpus`)."""
    mine: dict[RackId, int] = {}
    for s in v.slices:
        if len(s.racks) == 1:
            r = s.racks[0]
            mine[r] = mine.get(r, 0) + len(s.nodes)
        else:
            for n in s.nodes:
                r = state.nodes[n].rack
                mine[r] = mine.get(r, 0) + 1
    racks = state.racks
    return mine, sum(racks[r].gpus_per_node * k for r, k in mine.items())


def _not_given(state: ClusterState, kept: frozenset[NodeId]) -> Iterable[NodeId]:
    """Nodes that serve a job but would not come back to the blocked one: out of service
    (each once), or in service and kept."""
    nodes = state.nodes
    down = [n for per in out_of_service(state).values() for n in per if nodes[n].job is not None]
    if not kept:
        return down
    return [*down, *(n for n in kept if _serving_in_service(nodes.get(n)))]


_DOWN: list[tuple[object, object, TopologyIndex | None, dict[RackId, tuple[NodeId, ...]]]] = []
"""The last `out_of_service` table, with the racks map, nodes map and topology it was built
for."""


def out_of_service(state: ClusterState) -> dict[RackId, tuple[NodeId, ...]]:
    """The nodes out of service (unhealthy or cordoned), by rack; only racks with some (must
    not be changed).

    A table for an earlier state of the same fold history is patched for the racks changed
    since (`projections._changes`): the fold records a node's rack whenever it changes the
    node's health or cordon (`update_node` moves the node in or out of its rack's free index,
    which records the rack). O(racks changed x rack size), where a rebuild is a pass over every
    node (most of a 4,096-rack plan's setup otherwise). A state with the same racks map but
    other nodes (made outside the fold: tests, what-ifs) is rebuilt."""
    racks, nodes, index = state.racks, state.nodes, state.index
    last = _DOWN[0] if _DOWN else None
    if last is not None and last[0] is racks and last[1] is nodes and last[2] is index:
        return last[3]
    path = None
    if last is not None and last[0] is not racks and last[2] is index and index is not None:
        path = _changes.since("racks", racks, lambda m: m is last[0])
    if last is None or path is None or index is None:
        table = _down_rebuilt(state)
    else:
        table = dict(last[3])
        for r in cast("set[RackId]", path[1]):
            table.pop(r, None)
            if index.has_rack(r):
                per = tuple(n for n in index.rack(r).nodes if not nodes[n].in_service)
                if per:
                    table[r] = per
    _DOWN[:] = [(racks, nodes, index, table)]
    return table


def _down_rebuilt(state: ClusterState) -> dict[RackId, tuple[NodeId, ...]]:
    """`out_of_service` from every node, in the order of each rack's nodes."""
    healthy = _HEALTHY
    down = {n.id for n in state.nodes.values() if n.health is not healthy or n.cordoned}
    if not down or state.index is None:
        return {}
    table = {}
    for rack in state.index.racks:
        per = tuple(n for n in rack.nodes if n in down)
        if per:
            table[rack.id] = per
    return table


def _serving_in_service(node: NodeState | None) -> bool:
    return node is not None and node.job is not None and node.in_service
