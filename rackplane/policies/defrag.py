"""Auto Defrag: free rack-shaped room for a job blocked by topology, at the least cost.

Algorithm overview (`plan_defrag`):

1. Victims. Candidates are jobs that hold nodes, are `managed` (or `interactive` while an
   operator allows it; `inference` never), and have a priority no higher than the blocked
   job's. Preempting one costs its GPUs x (time since its last checkpoint + restart overhead),
   halved for each priority level below the blocked job's (lower priority is preferred) and
   multiplied by 1 + its earlier preemptions (the same job is not moved again and again).
2. Options. For each slice of the blocked job, every healthy rack not reserved for another job
   offers options: nothing to do when it already has room, else each minimal set of its victims
   whose nodes make room. Options are ranked by cost, then fewer victims, then fabric distance
   to the slices already chosen.
3. Validation. An option is taken only if every victim chosen so far can be placed again at
   once, outside the target racks, with the placement the scheduler itself uses; the first
   valid option in rank order wins (for a one-slice job, the cheapest valid plan among the
   options). Each slice of a multi-slice job is chosen in turn on top of the earlier ones.
4. Plan. Target racks, victims with their new placements, the blocked job's placement, the
   cost, and the best alternatives that lost. The controller records it (`DefragPlanned`),
   reserves the target racks for the blocked job (make-before-break), and applies the
   preemptions and placements; each is re-validated.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from rackplane.models import (
    Command,
    DefragAlternative,
    Event,
    Health,
    JobBlocked,
    JobId,
    JobKind,
    JobStatus,
    PlaceJob,
    PlanDefrag,
    PreemptJobs,
    RackId,
    SliceAssignment,
    TopologyIndex,
)
from rackplane.policies._proposals import Proposals
from rackplane.policies.placement import Capacity, Placement, find_placement
from rackplane.projections.state import ClusterState, JobState, restart_cost

MAX_SUBSETS_PER_RACK = 4096
"""Exhaustive victim subsets per rack up to 12 candidates; greedy beyond."""
MAX_TRIES = 128
"""Victim sets validated per plan (plus one per slice) before giving up: each try re-places
the victims chosen so far."""
RETRY_TRIES = 16
"""Validations per slice when retrying after jobs ended (no new block): most retries find
nothing new, and a full search on every completion made defrag 10x the cost of a simulated
year (214 of 246 attempts found no plan)."""
MAX_EXTRAS = 3
"""Extra victims (outside the target rack) a chain may add to a seed."""
ALTERNATIVES_KEPT = 3


@dataclass(frozen=True, slots=True)
class DefragPlan:
    """A valid defragmentation: what to preempt, where everything goes, what it costs."""

    job: JobId
    target_racks: tuple[RackId, ...]
    placement: Placement
    victims: tuple[JobId, ...]
    moves: tuple[tuple[JobId, Placement], ...]
    cost: float
    alternatives: tuple[DefragAlternative, ...]
    explanation: str


@dataclass(frozen=True, slots=True)
class _Option:
    cost: float
    rack: RackId
    victims: tuple[JobId, ...]


def victim_cost(state: ClusterState, victim: JobState, priority: int, now: datetime) -> float:
    """Weighted cost of preempting `victim` for a job of `priority` (see step 1)."""
    weight = 2.0 ** (victim.spec.priority - priority) * (1 + victim.preemptions)
    return restart_cost(state, victim, now) * weight


def candidates(state: ClusterState, job: JobState) -> list[JobState]:
    """Jobs the defrag may preempt for `job`, in queue order."""
    return _candidates(state, job.id, job.spec.priority)


def _candidates(state: ClusterState, beneficiary: JobId, priority: int) -> list[JobState]:
    # Victims never include the beneficiary itself, nor jobs of higher priority.
    interactive_ok = (
        state.settings.allow_interactive_preemption
        and state.interactive_preemption_allowed_by is not None
    )
    out = []
    for v in state.jobs.values():
        if v.id == beneficiary or not v.status.holds_nodes or v.spec.priority > priority:
            continue
        kind = v.spec.kind
        if kind is JobKind.MANAGED or (kind is JobKind.INTERACTIVE and interactive_ok):
            out.append(v)
    return sorted(out, key=lambda v: v.queue_key)


@dataclass(frozen=True, slots=True)
class Attempt:
    """A validated choice: the blocked job's slices, every victim's new placement, and the
    capacity left after all of it (so a next slice can build on it)."""

    hero: Placement
    moves: list[tuple[JobId, Placement]]
    capacity: Capacity


def replace_victims(
    state: ClusterState,
    base: Capacity,
    victims: Sequence[JobState],
    targets: Sequence[tuple[RackId, int]],
) -> Attempt | None:
    """Free the victims, put the blocked job's slices on `targets`, re-place every victim
    elsewhere; None when some victim finds no room."""
    cap = base.copy()
    for v in victims:
        cap.release(v.nodes)
    slices = []
    for rack, size in targets:
        if cap.usable[rack] < size:
            return None
        nodes = cap.nodes(rack, size)
        cap.take(nodes)
        slices.append(nodes)
    hero = Placement(tuple(slices), tuple(r for r, _ in targets), "")
    held = set(state.reservations) | {r for r, _ in targets}
    moves = []
    for v in sorted(victims, key=lambda j: j.queue_key):
        p = find_placement(cap, v.spec.slice_sizes, exclude=held)
        if not isinstance(p, Placement):
            return None
        cap.commit(p)
        moves.append((v.id, p))
    return Attempt(hero, moves, cap)


def _extend(attempt: Attempt, rack: RackId, size: int) -> Attempt | None:
    """Add a slice on a rack that has room, no new victim: valid without re-placing anyone
    when no victim was re-placed onto that rack (their placements excluded the targets)."""
    cap = attempt.capacity
    if cap.usable[rack] < size or any(rack in p.racks for _, p in attempt.moves):
        return None
    cap = cap.copy()
    nodes = cap.nodes(rack, size)
    cap.take(nodes)
    hero = Placement(
        (*attempt.hero.slices, nodes), (*attempt.hero.racks, rack), attempt.hero.explanation
    )
    return Attempt(hero, attempt.moves, cap)


def plan_defrag(
    state: ClusterState, job_id: JobId, *, now: datetime, max_tries: int = MAX_TRIES
) -> DefragPlan | None:
    """The least disruptive valid plan that places `job_id` inside racks, or None."""
    job = state.jobs[job_id]
    if job.status is not JobStatus.QUEUED:
        return None
    return plan_room(state, job_id, job.spec.slice_sizes, now=now, max_tries=max_tries)


def plan_room(
    state: ClusterState,
    job_id: JobId,
    sizes: Sequence[int],
    *,
    now: datetime,
    avoid: frozenset[RackId] = frozenset(),
    max_tries: int = MAX_TRIES,
) -> DefragPlan | None:
    """The least disruptive valid plan that frees rack-shaped room for slices of `sizes`
    nodes on behalf of `job_id` (queued, or running and needing a rack for one slice), never
    in the racks of `avoid`; None when no valid plan exists."""
    assert state.index is not None
    job = state.jobs[job_id]
    pool = candidates(state, job)
    cost = {v.id: victim_cost(state, v, job.spec.priority, now) for v in pool}
    by_id = {v.id: v for v in pool}
    # Per rack, the nodes each victim would give back (healthy, uncordoned): counted once per
    # plan, O(victim nodes); options read it for every slice and rack.
    in_rack: dict[RackId, dict[JobId, int]] = {}
    for v in pool:
        for n in v.nodes:
            node = state.nodes[n]
            if node.health is Health.HEALTHY and not node.cordoned:
                per = in_rack.setdefault(node.rack, {})
                per[v.id] = per.get(v.id, 0) + 1
    freed_in: dict[JobId, dict[RackId, int]] = {}
    for rack, per in in_rack.items():
        for victim, k in per.items():
            freed_in.setdefault(victim, {})[rack] = k
    base = Capacity(state)
    room_total = sum(u for u in base.usable.values() if u > 0)
    index = state.index
    open_racks = [
        r.id
        for r in index.racks
        if state.racks[r.id].healthy
        and state.reservations.get(r.id, job_id) == job_id
        and r.id not in avoid
    ]
    targets: list[tuple[RackId, int]] = []
    chosen: list[JobId] = []
    result: Attempt | None = None
    alternatives: list[DefragAlternative] = []
    budget = _Budget(max_tries + len(sizes))  # one plan's validations, all slices together
    for size in sizes:
        trial = base.copy()
        for vid in chosen:
            trial.release(by_id[vid].nodes)
        for rack, taken in targets:
            trial.usable[rack] -= taken
        seeds = _options(trial, open_racks, size, in_rack, cost, set(chosen))
        anchor = targets[0][0] if targets else None
        search = _Search(seeds, pool, chosen, cost, index, anchor, budget)
        picked = None
        for option in search:
            attempt = None
            if result is not None and not option.victims:
                attempt = _extend(result, option.rack, size)
            elif not _room_for(
                [by_id[v] for v in (*chosen, *option.victims)],
                {r for r, _ in targets} | {option.rack},
                base,
                room_total,
                freed_in,
            ):
                # Not enough free nodes outside the targets for the victims, shape aside: no
                # placement can work; skipping it does not spend a validation.
                search.failed(option, counted=False)
                continue
            if attempt is None:
                victims = [*chosen, *option.victims]
                attempt = replace_victims(
                    state, base, [by_id[v] for v in victims], [*targets, (option.rack, size)]
                )
            if attempt is not None:
                picked, result = option, attempt
                break
            search.failed(option)
        if picked is None:
            return None
        if not targets:
            alternatives = search.alternatives(picked)
        targets.append((picked.rack, size))
        chosen.extend(picked.victims)
    assert result is not None
    hero, moves = result.hero, result.moves
    total = sum(cost[v] for v in chosen)
    return DefragPlan(
        job=job_id,
        target_racks=tuple(dict.fromkeys(r for r, _ in targets)),
        placement=hero,
        victims=tuple(chosen),
        moves=tuple(moves),
        cost=total,
        alternatives=tuple(alternatives),
        explanation=_explain(state, job, targets, chosen, moves, total, alternatives),
    )


class _Budget:
    """Validations left to one plan, and options skipped without one (bounded too)."""

    def __init__(self, tries: int) -> None:
        self.left = tries
        self.skips_left = 50 * tries


def _room_for(
    victims: Sequence[JobState],
    targets: set[RackId],
    base: Capacity,
    room_total: int,
    freed_in: dict[JobId, dict[RackId, int]],
) -> bool:
    """A necessary condition for re-placing `victims` outside `targets`: as many usable
    nodes there (now free, or freed by the victims) as the victims ask for."""
    need = sum(v.spec.nodes for v in victims)
    room = room_total - sum(max(0, base.usable[r]) for r in targets)
    for v in victims:
        room += sum(k for r, k in freed_in.get(v.id, {}).items() if r not in targets)
    return room >= need


class _Search:
    """Victim sets for one slice in order of cost: each seed (a rack and a minimal set of its
    victims) first alone, then with extra victims elsewhere, whose leaving can make room to
    re-place the others (a chain of at most `MAX_EXTRAS`). Extras are enumerated lazily,
    cheapest subsets first: from (set, last) the next are (set + next) and (set - last + next),
    which visits every subset of the extras exactly once in non-decreasing cost. Stops after
    the plan's budget of validations."""

    def __init__(
        self,
        seeds: list[_Option],
        pool: list[JobState],
        chosen: list[JobId],
        cost: dict[JobId, float],
        index: TopologyIndex,
        anchor: RackId | None,
        budget: _Budget,
    ) -> None:
        self.budget = budget
        self.cost = cost
        self.index = index
        self.anchor = anchor
        taken = set(chosen)
        self.extras = sorted((v.id for v in pool if v.id not in taken), key=lambda v: (cost[v], v))
        self.heap: list[tuple[tuple[float, int, int, int, int], _Option, tuple[JobId, ...], int]]
        self.heap = []
        self.counter = itertools.count()
        self.seen: set[tuple[RackId, frozenset[JobId]]] = set()
        self.rejected: list[_Option] = []
        self.seeds = seeds
        for seed in seeds:
            self._push(seed, (), -1)

    def _key(self, o: _Option) -> tuple[float, int, int, int, int]:
        hops = self.index.hops(self.anchor, o.rack) if self.anchor else 0
        return (
            round(o.cost, 9),
            len(o.victims),
            hops,
            self.index.rack_order[o.rack],
            next(self.counter),
        )

    def _push(self, seed: _Option, extra: tuple[JobId, ...], last: int) -> None:
        victims = seed.victims + extra
        option = _Option(seed.cost + sum(self.cost[v] for v in extra), seed.rack, victims)
        heapq.heappush(self.heap, (self._key(option), seed, extra, last))

    def __iter__(self) -> Iterator[_Option]:
        while self.heap and self.budget.left > 0:
            _, seed, extra, last = heapq.heappop(self.heap)
            nxt = last + 1
            while nxt < len(self.extras) and self.extras[nxt] in seed.victims:
                nxt += 1
            if nxt < len(self.extras):
                if len(extra) < MAX_EXTRAS:
                    self._push(seed, (*extra, self.extras[nxt]), nxt)
                if extra:
                    self._push(seed, (*extra[:-1], self.extras[nxt]), nxt)
            victims = seed.victims + extra
            key = (seed.rack, frozenset(victims))
            if key in self.seen:
                continue
            self.seen.add(key)
            self.budget.left -= 1
            yield _Option(seed.cost + sum(self.cost[v] for v in extra), seed.rack, victims)

    def failed(self, option: _Option, *, counted: bool = True) -> None:
        self.rejected.append(option)
        if not counted:
            self.budget.left += 1
            self.budget.skips_left -= 1
            if self.budget.skips_left <= 0:
                self.budget.left = 0

    def alternatives(self, picked: _Option) -> list[DefragAlternative]:
        """Options that lost: cheaper ones that were invalid, then the next seeds by cost."""
        out = [
            DefragAlternative(
                target_racks=(o.rack,),
                victims=o.victims,
                cost_gpu_hours=o.cost,
                why_not="a victim could not be re-placed elsewhere",
            )
            for o in self.rejected[:ALTERNATIVES_KEPT]
        ]
        costlier = sorted(
            (o for o in self.seeds if (o.rack, o.victims) != (picked.rack, picked.victims)),
            key=self._key,
        )
        for o in costlier:
            if len(out) >= ALTERNATIVES_KEPT:
                break
            if o.cost >= picked.cost and o not in self.rejected:
                out.append(
                    DefragAlternative(
                        target_racks=(o.rack,),
                        victims=o.victims,
                        cost_gpu_hours=o.cost,
                        why_not="costlier",
                    )
                )
        return out


def _options(
    capacity: Capacity,
    racks: Iterable[RackId],
    size: int,
    in_rack: dict[RackId, dict[JobId, int]],
    cost: dict[JobId, float],
    taken: set[JobId],
) -> list[_Option]:
    out = []
    for r in racks:
        room = capacity.usable[r]
        if room >= size:
            out.append(_Option(0.0, r, ()))
            continue
        freeable = {v: n for v, n in in_rack.get(r, {}).items() if v not in taken}
        for subset in _minimal_subsets(freeable, size - room, cost):
            out.append(_Option(sum(cost[v] for v in subset), r, subset))
    return out


def _minimal_subsets(
    freeable: dict[JobId, int], need: int, cost: dict[JobId, float]
) -> list[tuple[JobId, ...]]:
    """Sets of victims freeing at least `need` nodes, none of whose members is superfluous."""
    if sum(freeable.values()) < need:
        return []
    ids = sorted(freeable, key=lambda v: (cost[v], v))
    if len(ids) > 12:
        # Greedy by cost per node freed, plus every single victim that suffices alone.
        greedy: list[JobId] = []
        got = 0
        for v in sorted(ids, key=lambda v: (cost[v] / freeable[v], v)):
            greedy.append(v)
            got += freeable[v]
            if got >= need:
                break
        singles = [(v,) for v in ids if freeable[v] >= need]
        return [tuple(greedy), *singles]
    out = []
    for k in range(1, len(ids) + 1):
        for subset in itertools.combinations(ids, k):
            freed = sum(freeable[v] for v in subset)
            if freed >= need and freed - min(freeable[v] for v in subset) < need:
                out.append(subset)
                if len(out) >= MAX_SUBSETS_PER_RACK:
                    return out
    return out


def _explain(
    state: ClusterState,
    job: JobState,
    targets: list[tuple[RackId, int]],
    victims: list[JobId],
    moves: list[tuple[JobId, Placement]],
    total: float,
    alternatives: list[DefragAlternative],
) -> str:
    racks = ", ".join(dict.fromkeys(r for r, _ in targets))
    if not victims:
        return f"room for {job.id} on {racks} without preemption"
    moved = "; ".join(f"{v} -> {', '.join(dict.fromkeys(p.racks))}" for v, p in moves)
    alt = (
        f"; next best {alternatives[0].cost_gpu_hours:.2f} GPU-h on "
        f"{', '.join(alternatives[0].target_racks)}"
        if alternatives
        else ""
    )
    return (
        f"preempt {', '.join(victims)} ({total:.2f} GPU-h) to free {racks} for {job.id}; "
        f"re-placed: {moved}{alt}"
    )


@dataclass(frozen=True)
class Defrag:
    """Reacts to jobs blocked by topology with a defragmentation plan (module docstring)."""

    name: str = "defrag"

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        """Plan for the first topology-blocked job without a plan in flight."""
        if state.index is None or not state.settings.defrag_enabled:
            return []
        wanted = [e.job for e in events if isinstance(e, JobBlocked) and e.reason == "topology"]
        if not wanted and not any(e.type in _RETRY for e in events):
            return []
        tries = MAX_TRIES if wanted else RETRY_TRIES
        for job in state.queued():
            blocked = job.blocked
            if blocked is None or blocked.reason != "topology" or state.reserved_for(job.id):
                continue
            plan = plan_defrag(state, job.id, now=now, max_tries=tries)
            if plan is not None and plan.victims:
                return proposals(state, plan, self.name)
            # No plan, or room without preemption (the scheduler will place it; a replica that
            # lags the controller sees such rooms late): nothing for defrag to do.
            break  # the head of the blocked line gets the plan, or nobody does
        return []


# After these, a plan that was impossible may have become possible.
_RETRY = frozenset({"JobCompleted", "JobFailed", "JobCancelled", "PolicyConfigured"})


def proposals(state: ClusterState, plan: DefragPlan, policy: str = "defrag") -> list[Command]:
    """The commands that carry out a plan, in order: record, preempt, place."""
    out = Proposals(policy, state)
    out.add(
        PlanDefrag,
        job=plan.job,
        target_racks=plan.target_racks,
        victims=plan.victims,
        cost_gpu_hours=plan.cost,
        alternatives=plan.alternatives,
        explanation=plan.explanation,
    )
    if plan.victims:
        interactive = any(state.jobs[v].spec.kind is JobKind.INTERACTIVE for v in plan.victims)
        out.add(
            PreemptJobs,
            jobs=plan.victims,
            cause="defrag",
            reason=f"defrag for {plan.job}",
            allow_interactive=interactive,
            explanation=plan.explanation,
        )
    out.add(
        PlaceJob,
        job=plan.job,
        slices=tuple(SliceAssignment(nodes=n) for n in plan.placement.slices),
        explanation=f"defrag target: {', '.join(plan.target_racks)}",
    )
    for victim, p in plan.moves:
        out.add(
            PlaceJob,
            job=victim,
            slices=tuple(SliceAssignment(nodes=n) for n in p.slices),
            explanation=f"re-placed after defrag for {plan.job}: {p.explanation}",
        )
    return list(out.commands)
