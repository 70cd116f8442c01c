"""Auto Defrag: free rack-shaped room for a job blocked by topology, at the least cost.

Algorithm overview (`plan_defrag`):

1. Victims. Candidates are jobs that hold nodes, are `managed` (or `interactive` while an
   operator allows it; `inference` never), have a priority no higher than the blocked
   job's and do not run in a reservation (`JobSpec.reservation`: its room is there).
   Preempting one costs its GPUs x (time since its last checkpoint + restart overhead),
   halved for each priority level below the blocked job's (lower priority is preferred) and
   multiplied by 1 + its earlier preemptions (the same job is not moved again and again).
2. Options. For each slice of the blocked job, every healthy rack not reserved for another job
   (a degraded rack, an NVSwitch tray lost, only when no plan frees healthy ones: the whole
   search runs again with them) offers options: nothing to do when it already has room, else
   each minimal set of its victims whose nodes make room, alone or with up to `MAX_EXTRAS` (3)
   extra victims elsewhere whose leaving lets the others be re-placed (a plan needing more is
   not searched). Options are ranked by cost, then fewer victims, then fabric distance to the
   slices already chosen. Nodes a pending reservation keeps from the blocked job (its time
   limit would run past the start) are not counted as room and not taken.
3. Validation. An option is taken only if every victim chosen so far can be placed again at
   once, outside the target racks and never on a degraded rack (work is not moved onto a
   degraded rack to free a healthy one) nor on nodes a pending reservation keeps from that
   victim, with the placement the scheduler itself uses; the first
   valid option in rank order wins (for a one-slice job, the cheapest valid plan among the
   options). Each slice of a multi-slice job is chosen in turn on top of the earlier ones.
4. Plan. Target racks, victims with their new placements, the blocked job's placement, the
   cost, and the best alternatives that lost. The controller records it (`DefragPlanned`),
   reserves the target racks for the blocked job (make-before-break), and applies the
   preemptions and placements; each is re-validated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from rackplane._gc import cycle_collection_paused
from rackplane.models import (
    Command,
    DefragAlternative,
    Event,
    JobBlocked,
    JobId,
    JobKind,
    JobStatus,
    NodeId,
    PlaceJob,
    PlanDefrag,
    PreemptJobs,
    RackId,
    SliceAssignment,
)
from rackplane.policies._defrag_search import Budget, RoomBound, Search
from rackplane.policies._defrag_seeds import Option, RackVictims, Ranked, Seeds
from rackplane.policies._defrag_victims import count_victims, eligible, prime
from rackplane.policies._proposals import Proposals
from rackplane.policies.placement import (
    Capacity,
    Placement,
    Unplaceable,
    choose_racks,
    find_placement,
)
from rackplane.policies.reclaim import next_plan
from rackplane.projections.state import (
    ClusterState,
    JobState,
    _queued_line,
    kept_nodes,
    restart_cost,
)

MAX_TRIES = 128
"""Victim sets validated per plan (plus one per slice) before giving up: each try re-places
the victims chosen so far."""
RETRY_TRIES = 16
"""Validations per slice when retrying after jobs ended (no new block): most retries find
nothing new, and a full search on every completion made defrag 10x the cost of a simulated
year (214 of 246 attempts found no plan)."""


@dataclass(frozen=True, slots=True)
class DefragPlan:
    """A valid defragmentation: what to preempt, where everything goes, what it costs."""

    job: JobId
    target_racks: tuple[RackId, ...]
    placement: Placement
    victims: tuple[JobId, ...]
    moves: tuple[tuple[JobId, Placement], ...]
    cost: float
    """The ranking score: the victims' weighted costs (`victim_cost`), summed."""
    alternatives: tuple[DefragAlternative, ...]
    explanation: str
    lost_gpu_hours: float = 0.0
    """What the victims lose, in GPU-hours (`restart_cost`, unweighted), summed."""


def victim_weight(victim: JobState, priority: int) -> float:
    """How much a victim's GPU-hours count for a job of `priority` (see step 1)."""
    return 2.0 ** (victim.spec.priority - priority) * (1 + victim.preemptions)


def victim_cost(state: ClusterState, victim: JobState, priority: int, now: datetime) -> float:
    """Weighted cost of preempting `victim` for a job of `priority` (see step 1)."""
    return restart_cost(state, victim, now) * victim_weight(victim, priority)


def candidates(state: ClusterState, job: JobState) -> list[JobState]:
    """Jobs the defrag may preempt for `job`, in queue order."""
    return _candidates(state, job.id, job.spec.priority)


def _candidates(state: ClusterState, beneficiary: JobId, priority: int) -> list[JobState]:
    return sorted(eligible(state, beneficiary, priority), key=lambda v: v.queue_key)


@dataclass(frozen=True, slots=True)
class Attempt:
    """A validated choice: the blocked job's slices, every victim's new placement, and the
    capacity left after all of it (so a next slice can build on it)."""

    hero: Placement
    moves: list[tuple[JobId, Placement]]
    capacity: Capacity
    kept: frozenset[NodeId] = frozenset()
    """Nodes reservations keep from the blocked job (a next slice does not take them)."""


def replace_victims(
    state: ClusterState,
    base: Capacity,
    victims: Sequence[JobState],
    targets: Sequence[tuple[RackId, int]],
    *,
    now: datetime,
    kept: frozenset[NodeId] = frozenset(),
) -> Attempt | None:
    """Free the victims, put the blocked job's slices on `targets` (never on the nodes of
    `kept`), re-place every victim elsewhere (never on nodes a reservation keeps from it when
    placed at `now`); None when some victim finds no room."""
    cap = base.copy()
    for v in victims:
        cap.release(v.nodes)
    slices = []
    for rack, size in targets:
        nodes = _hero_nodes(cap, kept, rack, size)
        if nodes is None:
            return None
        cap.take(nodes)
        slices.append(nodes)
    hero = Placement(tuple(slices), tuple(r for r, _ in targets), "")
    held = set(state.reservations) | {r for r, _ in targets} | cap.degraded
    moves = []
    for v in sorted(victims, key=lambda j: j.queue_key):
        room = cap.without(kept_nodes(state, v, now)) if state.windows else cap
        p = find_placement(room, v.spec.slice_sizes, exclude=held)
        if not isinstance(p, Placement):
            return None
        cap.commit(p)
        moves.append((v.id, p))
    return Attempt(hero, moves, cap, kept)


def _hero_nodes(
    cap: Capacity, kept: frozenset[NodeId], rack: RackId, size: int
) -> tuple[NodeId, ...] | None:
    """The nodes the blocked job's slice takes on `rack`, outside `kept`; None if too few."""
    room = cap.without(kept) if kept else cap
    return room.nodes(rack, size) if room.usable[rack] >= size else None


def fits_on_counts(
    state: ClusterState,
    base: Capacity,
    victims: Sequence[JobState],
    targets: Sequence[tuple[RackId, int]],
    freed_in: dict[JobId, dict[RackId, int]],
    base_view: dict[RackId, int] | None = None,
) -> bool:
    """`replace_victims` on node counts alone (the same rack choices, no node lists, no
    explanations): whether it would succeed (may succeed, while a pending reservation keeps
    some victim from nodes). Most candidate plans fail; they fail here.
    `base_view` is `base.view(state.reservations | base.degraded)`, when the caller has it
    already."""
    usable = dict(base.usable)
    touched = {r for r, _ in targets}
    for v in victims:
        for rack, k in freed_in.get(v.id, {}).items():
            usable[rack] += k
            touched.add(rack)
    for rack, size in targets:
        if usable[rack] < size:
            return False
        usable[rack] -= size
    held = set(state.reservations) | {r for r, _ in targets} | base.degraded
    # What the scheduler would see: `base_view` but on the racks the victims and targets
    # touched (the same as rebuilding it from `usable`).
    view = dict(base.view(held) if base_view is None else base_view)
    for rack in touched:
        u = usable[rack]
        view[rack] = 0 if rack in held or u < 0 else u
    for v in sorted(victims, key=lambda j: j.queue_key):
        sizes = v.spec.slice_sizes
        racks = choose_racks(base.index, view, sizes)
        if isinstance(racks, Unplaceable):
            return False
        for rack, size in zip(racks, sizes, strict=True):
            usable[rack] -= size
            u = usable[rack]
            view[rack] = 0 if rack in held or u < 0 else u  # the view of the next victim
    return True


def _extend(attempt: Attempt, rack: RackId, size: int) -> Attempt | None:
    """Add a slice on a rack that has room, no new victim: valid without re-placing anyone
    when no victim was re-placed onto that rack (their placements excluded the targets)."""
    if any(rack in p.racks for _, p in attempt.moves):
        return None
    nodes = _hero_nodes(attempt.capacity, attempt.kept, rack, size)
    if nodes is None:
        return None
    cap = attempt.capacity.copy()
    cap.take(nodes)
    hero = Placement(
        (*attempt.hero.slices, nodes), (*attempt.hero.racks, rack), attempt.hero.explanation
    )
    return Attempt(hero, attempt.moves, cap, attempt.kept)


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
    in the racks of `avoid`; on healthy racks, else on degraded ones too; None when no valid
    plan exists."""
    # A plan builds tens of thousands of short-lived, acyclic dicts and tuples on a large
    # cluster; refcounting frees them. The cyclic collector would now and then walk the whole
    # state's heap meanwhile and find nothing (a 1,024-rack plan: 21 ms of CPU, 55 ms when a
    # full collection ran).
    with cycle_collection_paused():
        degraded = frozenset(r for r, rs in state.racks.items() if rs.degraded) - avoid
        plan = _plan_room(state, job_id, sizes, now, avoid | degraded, max_tries)
        if plan is not None or not degraded:
            return plan
        plan = _plan_room(state, job_id, sizes, now, avoid, max_tries)
    used = [r for r in plan.target_racks if r in degraded] if plan is not None else []
    if plan is None or not used:
        return plan
    note = f"; on degraded {', '.join(used)}: no plan frees a healthy rack"
    return replace(plan, explanation=plan.explanation + note)


def _plan_room(
    state: ClusterState,
    job_id: JobId,
    sizes: Sequence[int],
    now: datetime,
    avoid: frozenset[RackId],
    max_tries: int,
) -> DefragPlan | None:
    assert state.index is not None
    job = state.jobs[job_id]
    # Nodes pending reservations keep from the job (a running one counts from its start): its
    # slices never take them. The counts below leave them out (what the victims free for the
    # job; a bound, for their re-placement, that is then conservative), `replace_victims`
    # checks node by node.
    kept = kept_nodes(state, job, now, running=job.status.holds_nodes)
    # Every victim's cost and the nodes it frees per rack: counted once per plan,
    # O(victims + nodes); options read it for every slice and rack.
    victims_of = count_victims(state, job_id, job.spec.priority, now, kept)
    lost, cost, by_id = victims_of.lost, victims_of.cost, victims_of.by_id
    in_rack, freed_in = victims_of.in_rack, victims_of.freed_in
    freed_total, demand = victims_of.freed_total, victims_of.demand
    offer = RackVictims(in_rack, cost)
    base = Capacity(state)
    room_total = sum(u for u in base.usable.values() if u > 0)
    own = base.without(kept)  # what the job itself may use
    base_view = base.view(set(state.reservations) | base.degraded)
    index = state.index
    reservations = state.reservations
    open_racks = [
        r
        for r in base.in_service()
        if r not in avoid and (not reservations or reservations.get(r, job_id) == job_id)
    ]
    targets: list[tuple[RackId, int]] = []
    chosen: list[JobId] = []
    result: Attempt | None = None
    first: tuple[Search, Option] | None = None  # the first slice's search, for alternatives
    budget = Budget(max_tries + len(sizes))  # one plan's validations, all slices together
    for size in sizes:
        # Usable nodes per open rack once the chosen victims left and earlier slices took
        # theirs (what `options` reads; open racks are in service, so every freed node counts).
        trial = dict(own.usable)
        for vid in chosen:
            for rack, k in freed_in.get(vid, {}).items():
                trial[rack] += k
        for rack, taken in targets:
            trial[rack] -= taken
        seeds = Seeds(trial, open_racks, size, offer, set(chosen))
        anchor = targets[0][0] if targets else None
        bound = RoomBound(
            base, room_total, freed_in, freed_total, demand, chosen, {r for r, _ in targets}
        )
        search = Search(seeds, Ranked(cost, chosen), chosen, cost, index, anchor, budget, bound)
        picked = None
        for option in search:
            attempt = None
            # Options that fail the room bound were skipped by the search. Without victims:
            # the first slice always passes it; later ones extend the attempt so far.
            if result is not None and not option.victims:
                attempt = _extend(result, option.rack, size)
            if attempt is None:
                victims = [by_id[v] for v in (*chosen, *option.victims)]
                where = [*targets, (option.rack, size)]
                # The counts do not know what reservations keep from whom.
                if kept or fits_on_counts(state, base, victims, where, freed_in, base_view):
                    attempt = replace_victims(state, base, victims, where, now=now, kept=kept)
            if attempt is not None:
                picked, result = option, attempt
                break
            search.failed(option)
        if picked is None:
            return None
        if not targets:
            first = (search, picked)
        targets.append((picked.rack, size))
        chosen.extend(picked.victims)
    assert result is not None and first is not None
    alternatives = first[0].alternatives(first[1], lost)
    hero, moves = result.hero, result.moves
    total = sum(cost[v] for v in chosen)
    lost_total = sum(lost[v] for v in chosen)
    return DefragPlan(
        job=job_id,
        target_racks=tuple(dict.fromkeys(r for r, _ in targets)),
        placement=hero,
        victims=tuple(chosen),
        moves=tuple(moves),
        cost=total,
        alternatives=tuple(alternatives),
        explanation=_explain(state, job, targets, chosen, moves, lost_total, total, alternatives),
        lost_gpu_hours=lost_total,
    )


def _explain(
    state: ClusterState,
    job: JobState,
    targets: list[tuple[RackId, int]],
    victims: list[JobId],
    moves: list[tuple[JobId, Placement]],
    lost: float,
    score: float,
    alternatives: list[DefragAlternative],
) -> str:
    racks = ", ".join(dict.fromkeys(r for r, _ in targets))
    if not victims:
        return f"room for {job.id} on {racks} without preemption"
    moved = "; ".join(f"{v} -> {', '.join(dict.fromkeys(p.racks))}" for v, p in moves)
    alt = (
        f"; next best {alternatives[0].cost_gpu_hours:.2f} GPU-h lost "
        f"(score {alternatives[0].score:.2f}) on "
        f"{', '.join(alternatives[0].target_racks)}"
        if alternatives
        else ""
    )
    return (
        f"preempt {', '.join(victims)} ({lost:.2f} GPU-h lost, score {score:.2f}) to free "
        f"{racks} for {job.id}; "
        f"re-placed: {moved}{alt}"
    )


@dataclass(frozen=True)
class Defrag:
    """Reacts to jobs blocked by topology with a defragmentation plan (module docstring)."""

    name: str = "defrag"

    def warm(self, state: ClusterState) -> None:
        """Prime the tables a plan reads (`_defrag_victims.prime`) for the priorities of the
        queued jobs, highest first (the head of a blocked line is among them)."""
        if state.index is None or not state.settings.defrag_enabled:
            return
        prime(state, (j.spec.priority for _, _, j in _queued_line(state.jobs)))

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        """Plan for the first topology-blocked job without a plan in flight."""
        if state.index is None or not state.settings.defrag_enabled:
            return []
        wanted = {e.job for e in events if isinstance(e, JobBlocked) and e.reason == "topology"}
        retry = any(e.type in _RETRY for e in events)
        if not wanted and not retry:
            return []
        # The head of the blocked line (in queue order) gets the plan, or nobody does: the
        # first queued job blocked by topology that holds no reservation, read off the
        # queued line in queue order (kept across folds; the scheduler's cycle asked for it
        # on this state already) up to the first such job, not every queued job. A job that
        # runs in a reservation (`JobSpec.reservation`) waits for room there: a plan would
        # make it elsewhere.
        job = _blocked_head(state)
        if job is None:
            return []
        # A job blocked behind the head changes nothing for the head: search again only when
        # the head is newly blocked (full budget) or room may have come back (retry).
        if job.id not in wanted and not retry:
            return []
        if state.settings.queues:
            claimed = next_plan(state, now=now)
            if claimed is not None and claimed.job == job.id:
                return []  # reclaim takes this one: its plan, not a second
        tries = MAX_TRIES if job.id in wanted else RETRY_TRIES
        plan = plan_defrag(state, job.id, now=now, max_tries=tries)
        if plan is not None and plan.victims:
            return proposals(state, plan, self.name)
        # No plan, or room without preemption (the scheduler will place it; a replica that
        # lags the controller sees such rooms late): nothing for defrag to do.
        return []


def _blocked_head(state: ClusterState) -> JobState | None:
    """The first queued job in queue order blocked by topology, holding no reservation and
    not running in one; None when there is none. O(its place in the line)."""
    holders = set(state.reservations.values())
    for _, _, j in _queued_line(state.jobs):
        blocked = j.blocked
        if (
            blocked is not None
            and blocked.reason == "topology"
            and j.spec.reservation is None
            and j.id not in holders
        ):
            return j
    return None


# After these, a plan that was impossible may have become possible.
_RETRY = frozenset(
    {
        "JobCompleted",
        "JobFailed",
        "JobCancelled",
        "PolicyConfigured",
        "NodeRepaired",
        "NodeRecovered",
        "NodeUncordoned",
        "RackDegraded",
        "RackRecovered",
        "DisruptionBudgetReported",
    }
)


def proposals(state: ClusterState, plan: DefragPlan, policy: str = "defrag") -> list[Command]:
    """The commands that carry out a plan, in order: record, preempt, place."""
    out = Proposals(policy, state)
    out.add(
        PlanDefrag,
        job=plan.job,
        target_racks=plan.target_racks,
        victims=plan.victims,
        cost_gpu_hours=plan.lost_gpu_hours,
        alternatives=plan.alternatives,
        explanation=plan.explanation,
        score=plan.cost,
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
