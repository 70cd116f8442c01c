"""Step 1 of Auto Defrag, counted once per plan: the victims, what each costs, and the nodes
each would give back, rack by rack (see `defrag`).

Theory of operation. A plan reads every candidate victim: the search ranks all of them by
cost, and each rack's options and lower bound need the victims on that rack. That is
O(victims) per plan and cannot be less (costs move with `now`), so the pass is kept to a few
steps per job: a slice lies inside the racks its `racks` names (a state invariant), so a
rack-local slice's nodes are counted by its length, not node by node; the nodes that do not
count (out of service: unhealthy or cordoned; kept from the job by a reservation) are found
once, by one pass over the nodes (O(nodes), no per-node lookups), and taken off their holders.
A job's nodes per rack and its GPUs are remembered from the last plan while its state is the
same object (`_MEMO`): between two plans most jobs did not change.
Nothing here depends on the order the jobs come in: every later order is by (cost, id).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from rackplane.models import Health, JobId, JobKind, NodeId, RackId, TopologyIndex
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
    outside `kept`."""
    pool = eligible(state, beneficiary, priority)
    nodes = state.nodes
    overhead = state.settings.restart_overhead
    memo = _memo(state)
    fresh: dict[int, _Held] = {}
    by_id: dict[JobId, JobState] = {}
    lost: dict[JobId, float] = {}
    cost: dict[JobId, float] = {}
    held: dict[JobId, dict[RackId, int]] = {}
    demand: dict[JobId, int] = {}
    for v in pool:
        key = id(v)
        got = memo.get(key)
        if got is None or got[0] is not v:
            got = _held(state, v)
        fresh[key] = got
        spec = v.spec
        vid = spec.id
        by_id[vid] = v
        demand[vid] = spec.nodes
        held[vid] = got[1]
        # `restart_cost` and `victim_cost`, the same operations in the same order.
        span = v.at_risk(now) + overhead
        lost[vid] = x = got[2] * span.total_seconds() / 3600.0
        cost[vid] = x * (2.0 ** (spec.priority - priority) * (1 + v.preemptions))
    _MEMO[:] = [(state.index, fresh)]
    # What the victims hold but do not give back: nodes out of service, nodes kept. The
    # memo's counts are shared: a victim that loses some gets a copy.
    copied: set[JobId] = set()
    for n in _not_given(state, kept):
        node = nodes[n]
        job = node.job
        if job is None or job not in held:
            continue
        if job not in copied:
            held[job] = dict(held[job])
            copied.add(job)
        held[job][node.rack] -= 1
    freed_in: dict[JobId, dict[RackId, int]] = {}
    in_rack: dict[RackId, dict[JobId, int]] = {}
    freed_total: dict[JobId, int] = {}
    for vid, mine in held.items():
        if vid in copied:
            mine = {r: k for r, k in mine.items() if k > 0}
        if not mine:
            continue
        freed_in[vid] = mine
        total = 0
        for r, k in mine.items():
            total += k
            per = in_rack.get(r)
            if per is None:
                per = in_rack[r] = {}
            per[vid] = k
        freed_total[vid] = total
    return Victims(pool, by_id, lost, cost, freed_in, in_rack, freed_total, demand)


_Held = tuple[JobState, dict[RackId, int], int]
"""A job, its nodes per rack (all of them, in service or not) and its GPUs."""

_MEMO: list[tuple[TopologyIndex | None, dict[int, _Held]]] = []
"""The last plan's `_Held` by job (by identity: a job's state is immutable and replaced when
it changes), for the topology it was counted on. Between two plans most jobs are the same
objects; each plan keeps only its own victims, so the memo never outgrows the jobs."""


def _memo(state: ClusterState) -> dict[int, _Held]:
    if _MEMO and _MEMO[0][0] is state.index:
        return _MEMO[0][1]
    return {}


def _held(state: ClusterState, v: JobState) -> _Held:
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
    return (v, mine, sum(racks[r].gpus_per_node * k for r, k in mine.items()))


def _not_given(state: ClusterState, kept: frozenset[NodeId]) -> Iterable[NodeId]:
    """Nodes that serve a job but would not come back to the blocked one: out of service
    (each once), or in service and kept."""
    healthy = _HEALTHY
    down = [
        n.id
        for n in state.nodes.values()
        if (n.health is not healthy or n.cordoned) and n.job is not None
    ]
    if not kept:
        return down
    nodes = state.nodes
    return [*down, *(n for n in kept if _serving_in_service(nodes.get(n)))]


def _serving_in_service(node: NodeState | None) -> bool:
    return node is not None and node.job is not None and node.in_service
