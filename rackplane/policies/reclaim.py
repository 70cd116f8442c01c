"""Reclaim and priority preemption: a guaranteed job takes back the nodes it is owed.

A job is guaranteed when its leaf queue, with it, stays within its nominal quota
(`rackplane/policies/quotas.py`). When such a job is blocked (by capacity or topology) while
other queues run on borrowed quota, those queues must give it back; when its own queue lets
jobs preempt by priority, its lower-priority work must make way too.

Algorithm overview, for the first blocked job in queue order (priority, then FIFO) that holds
no reservation and is owed nodes: it is guaranteed and blocked by capacity or topology
(`plan_reclaim`), or its queue has `preempt_lower_priority` and its lower-priority work
stands in its way, for quota, capacity or topology (`plan_priority`):

1. Victims. `reclaim`: the borrowing jobs of other leaf queues (those whose queue's running
   total, in placement order, passes its nominal); `priority`: its own queue's jobs of lower
   priority, lowest priority and newest first. The victim rules of Auto
   Defrag hold: `managed` jobs, `interactive` ones only while an operator allows it,
   `inference` never, none whose disruption budget refuses. A queue gives back only what it
   borrowed: its victims, all but the smallest, must leave it above its nominal.
2. Cost. A victim costs what it loses (`restart_cost`: its GPUs x (work since its last
   checkpoint + restart overhead)) x (1 + its earlier preemptions).
3. Room, slice by slice. For each slice of the job, every healthy rack not reserved for
   another job offers either room already free, or the cheapest victims holding nodes there
   (cheapest per node freed in the rack first) that make the room; the cheapest rack wins
   (then fewer victims, then fullest rack). Topology rules: each slice gets its own rack.
   `priority` instead takes its victims in order until the job is guaranteed with them gone
   (its queue within nominal) and fits, then drops every victim it can do without, the
   costliest first.
4. Validation. The victims' nodes are freed in a copy of the cycle's capacity and the job
   must be placed there by the scheduler's own `find_placement`; otherwise no plan.
5. Plan. The controller records it (`DefragPlanned` with cause `reclaim` or `priority`:
   the target racks are reserved for the job, make-before-break), preempts the victims
   (`JobPreempted`, same cause; they queue again) and places the job on the freed nodes.

Cost: O(slices x racks x victims in a rack) per plan, plus one placement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rackplane.models import (
    Command,
    Event,
    JobBlocked,
    JobId,
    JobKind,
    PlaceJob,
    PlanCause,
    PlanDefrag,
    PreemptJobs,
    RackId,
    SliceAssignment,
)
from rackplane.policies._decide_windows import preemptible
from rackplane.policies._proposals import Proposals
from rackplane.policies.placement import Capacity, Placement, find_placement
from rackplane.policies.quotas import QueueBook, borrowing_jobs
from rackplane.projections.state import (
    ClusterState,
    JobState,
    _holding_of,
    _queued_line,
    kept_nodes,
    restart_cost,
)

TRIGGERS = frozenset({"JobPlaced", "PolicyConfigured", "DisruptionBudgetReported"})
"""Besides a job newly blocked: events after which work may be reclaimable."""


_Option = tuple[float, int, int, int, RackId, list[JobId]]
"""A rack for one slice: (cost, victims, room, rack order, rack, victims), least first."""


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """What to preempt for a guaranteed job, and where it goes then."""

    job: JobId
    cause: PlanCause
    victims: tuple[JobId, ...]
    placement: Placement
    lost_gpu_hours: float
    score: float
    explanation: str


@dataclass(frozen=True)
class Reclaim:
    """Proposes reclaim and priority preemptions for blocked guaranteed jobs (see above)."""

    name: str = "reclaim"

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        """A plan for the first blocked guaranteed job, when the events may allow one."""
        if state.index is None or not state.settings.queues:
            return []
        fresh = any(isinstance(e, JobBlocked) for e in events)
        if not fresh and not any(e.type in TRIGGERS for e in events):
            return []
        plan = next_plan(state, now=now)
        return [] if plan is None else proposals(state, plan, self.name)


def next_plan(state: ClusterState, *, now: datetime) -> ReclaimPlan | None:
    """The plan for the head of the line of jobs owed nodes, or None. Auto Defrag asks it too:
    it leaves a job this would plan for to reclaim (two plans for one job would both preempt)."""
    book = QueueBook.of(state)
    if book is None or state.index is None:
        return None
    holders = set(state.reservations.values())
    # The head of the owed line, or nobody: the first owed job in queue order. Only queued
    # jobs are owed: the queued line (kept across folds, in queue order) is read up to the
    # first owed job, not every job, its queue's side (`_owed_rule`) looked up once per queue.
    rules: dict[str | None, tuple[bool, int, int] | None] = {}
    job: JobState | None = None
    for _, _, j in _queued_line(state.jobs):
        blocked, spec = j.blocked, j.spec
        if blocked is None or spec.reservation is not None:
            continue
        queue = spec.queue
        if queue in rules:
            rule = rules[queue]
        else:
            rule = rules[queue] = _owed_rule(book, queue)
        if rule is None:
            continue
        preempts, nominal, room = rule
        nodes = spec.nodes
        if not ((preempts and nodes <= nominal) or (blocked.reason != "quota" and nodes <= room)):
            continue
        if holders and spec.id in holders:
            continue
        job = j
        break
    if job is None:
        return None
    plan = None
    queue = job.spec.queue or ""
    assert job.blocked is not None
    if job.blocked.reason != "quota" and book.guaranteed(queue, job.spec.nodes):
        plan = plan_reclaim(state, book, job, now=now)
    if plan is None and book.specs[queue].preempt_lower_priority:
        plan = plan_priority(state, book, job, now=now)
    return plan


def _owed_rule(book: QueueBook, queue: str | None) -> tuple[bool, int, int] | None:
    """A queue's side of whether its blocked job is owed nodes (None: never, not a leaf):
    (preempts by priority, nominal, nodes left under nominal). A queued job blocked and not
    running in a reservation (its room is there, not on what others borrowed) is owed when
    its queue preempts by priority and it fits the nominal, or when it is blocked by room
    (not for quota) and guaranteed (`QueueBook.guaranteed`: it fits what is left)."""
    if not book.leaf(queue):
        return None
    assert queue is not None
    nominal = book.nominal[queue]
    return book.specs[queue].preempt_lower_priority, nominal, nominal - book.held[queue]


def plan_reclaim(
    state: ClusterState, book: QueueBook, job: JobState, *, now: datetime
) -> ReclaimPlan | None:
    """The cheapest set of victims whose nodes place `job`, or None (module docstring)."""
    queue = job.spec.queue
    assert queue is not None
    pool = _borrowed(state, book, job)
    cause: PlanCause = "reclaim"
    if not pool:
        return None
    lost = {v.id: restart_cost(state, v, now) for v in pool}
    cost = {v.id: lost[v.id] * (1 + v.preemptions) for v in pool}
    by_id = {v.id: v for v in pool}
    nodes = state.nodes
    kept = kept_nodes(state, job, now)  # pending reservations' nodes the job may not use
    in_rack: dict[RackId, dict[JobId, int]] = {}
    for v in pool:
        for n in v.nodes:
            node = nodes[n]
            if node.in_service and n not in kept:
                per = in_rack.setdefault(node.rack, {})
                per[v.id] = per.get(v.id, 0) + 1
    others = {r for r, j in state.reservations.items() if j != job.id}
    base = Capacity(state).without(kept)
    trial = base.copy()
    open_racks = [
        r.id for r in base.index.racks if state.racks[r.id].healthy and r.id not in others
    ]
    given: dict[str, list[int]] = {}  # victim queue -> sizes given back so far
    chosen: list[JobId] = []
    for size in job.spec.slice_sizes:
        best: _Option | None = None
        order = base.index.rack_order
        for rack in open_racks:
            room = trial.usable[rack]
            key: _Option
            if room >= size:
                key = (0.0, 0, room, order[rack], rack, [])
            else:
                picked = _cheapest(rack, size - room, in_rack, cost, by_id, chosen, given, book)
                if picked is None:
                    continue
                key = (sum(cost[v] for v in picked), len(picked), 0, order[rack], rack, picked)
            if best is None or key[:4] < best[:4]:
                best = key
        if best is None:
            return None
        rack, picked = best[4], best[5]
        for vid in picked:
            trial.release(by_id[vid].nodes)
            given.setdefault(by_id[vid].spec.queue or "", []).append(len(by_id[vid].nodes))
            chosen.append(vid)
        trial.take(trial.nodes(rack, size))
    if not chosen:
        return None  # room without preemption: the scheduler places it
    freed = base.copy()
    for vid in chosen:
        freed.release(by_id[vid].nodes)
    placement = find_placement(freed, job.spec.slice_sizes, exclude=others)
    if not isinstance(placement, Placement):
        return None
    lost_total = sum(lost[v] for v in chosen)
    score = sum(cost[v] for v in chosen)
    held = book.held[queue]
    victims_of = ", ".join(f"{v} ({by_id[v].spec.queue})" for v in chosen)
    why = (
        f"queue {queue} holds {held} of its {book.nominal[queue]} nominal nodes and is owed "
        f"{job.spec.nodes} for {job.id}"
    )
    return ReclaimPlan(
        job=job.id,
        cause=cause,
        victims=tuple(chosen),
        placement=placement,
        lost_gpu_hours=lost_total,
        score=score,
        explanation=(
            f"{cause}: preempt {victims_of} ({lost_total:.2f} GPU-h lost) for {job.id}: {why}"
        ),
    )


def plan_priority(
    state: ClusterState, book: QueueBook, job: JobState, *, now: datetime
) -> ReclaimPlan | None:
    """The lower-priority work of `job`'s own queue to preempt so that it is guaranteed and
    fits (module docstring, step 3), or None."""
    queue = job.spec.queue
    assert queue is not None
    priority = job.spec.priority
    pool = sorted(
        (
            v
            for v in _holding_of(state.jobs).get(queue, {}).values()
            if v.spec.priority < priority and preemptible(state, v)
        ),
        key=lambda v: (v.spec.priority, -v.order),
    )
    need = book.held[queue] + job.spec.nodes - book.nominal[queue]
    # Nodes each holds (`len(v.nodes)`), counted once: `fits` sums them for every prefix.
    holds = {v.id: sum(len(s.nodes) for s in v.slices) for v in pool}
    if sum(holds.values()) < need:
        return None  # no prefix of the pool frees enough: skip building the capacity
    others = {r for r, j in state.reservations.items() if j != job.id}
    base = Capacity(state).without(kept_nodes(state, job, now))

    def fits(victims: Sequence[JobState]) -> Placement | None:
        if sum(holds[v.id] for v in victims) < need:
            return None
        cap = base.copy()
        for v in victims:
            cap.release(v.nodes)
        p = find_placement(cap, job.spec.slice_sizes, exclude=others)
        return p if isinstance(p, Placement) else None

    chosen: list[JobState] = []
    for v in pool:
        chosen.append(v)
        if fits(chosen) is not None:
            break
    else:
        return None
    lost = {v.id: restart_cost(state, v, now) for v in chosen}
    cost = {v.id: lost[v.id] * (1 + v.preemptions) for v in chosen}
    for v in sorted(chosen, key=lambda v: -cost[v.id]):
        fewer = [c for c in chosen if c.id != v.id]
        if fewer and fits(fewer) is not None:
            chosen = fewer
    placement = fits(chosen)
    assert placement is not None
    ids = tuple(v.id for v in chosen)
    lost_total = sum(lost[v] for v in ids)
    return ReclaimPlan(
        job=job.id,
        cause="priority",
        victims=ids,
        placement=placement,
        lost_gpu_hours=lost_total,
        score=sum(cost[v] for v in ids),
        explanation=(
            f"priority: preempt {', '.join(ids)} ({lost_total:.2f} GPU-h lost) for {job.id}: "
            f"priority {job.spec.priority} outranks them in queue {queue} (nominal "
            f"{book.nominal[queue]}, held {book.held[queue]})"
        ),
    )


def _borrowed(state: ClusterState, book: QueueBook, job: JobState) -> list[JobState]:
    """The borrowing jobs of other queues that may be reclaimed for `job` (step 1)."""
    holding = _holding_of(state.jobs).values()  # jobs holding nodes, by queue
    over = borrowing_jobs(book, (v for held in holding for v in held.values()))
    mine = job.spec.queue
    return [
        v for q, jobs in sorted(over.items()) if q != mine for v in jobs if preemptible(state, v)
    ]


def _cheapest(
    rack: RackId,
    need: int,
    in_rack: dict[RackId, dict[JobId, int]],
    cost: dict[JobId, float],
    by_id: dict[JobId, JobState],
    chosen: list[JobId],
    given: dict[str, list[int]],
    book: QueueBook,
) -> list[JobId] | None:
    """The cheapest victims with nodes in `rack` that free `need` nodes there, each queue
    giving back no more than it borrowed (step 1); None when they cannot."""
    here = in_rack.get(rack, {})
    ranked = sorted((v for v in here if v not in chosen), key=lambda v: (cost[v] / here[v], v))
    picked: list[JobId] = []
    taken = {q: list(sizes) for q, sizes in given.items()}
    freed = 0
    for vid in ranked:
        victim = by_id[vid]
        q = victim.spec.queue or ""
        sizes = [*taken.get(q, []), len(victim.nodes)]
        over = book.over_nominal(q)
        if book.leaf(q) and over and sum(sizes) - min(sizes) >= over:
            continue  # the queue would give back more than it borrowed
        taken[q] = sizes
        picked.append(vid)
        freed += here[vid]
        if freed >= need:
            return picked
    return None


def proposals(state: ClusterState, plan: ReclaimPlan, policy: str = "reclaim") -> list[Command]:
    """The commands that carry out a plan, in order: record (reserve), preempt, place."""
    out = Proposals(policy, state)
    out.add(
        PlanDefrag,
        job=plan.job,
        target_racks=tuple(dict.fromkeys(plan.placement.racks)),
        victims=plan.victims,
        cost_gpu_hours=plan.lost_gpu_hours,
        explanation=plan.explanation,
        score=plan.score,
        cause=plan.cause,
    )
    interactive = any(state.jobs[v].spec.kind is JobKind.INTERACTIVE for v in plan.victims)
    out.add(
        PreemptJobs,
        jobs=plan.victims,
        cause=plan.cause,
        reason=f"{plan.cause} for {plan.job}",
        allow_interactive=interactive,
        explanation=plan.explanation,
    )
    out.add(
        PlaceJob,
        job=plan.job,
        slices=tuple(SliceAssignment(nodes=n) for n in plan.placement.slices),
        explanation=f"{plan.cause} target: {', '.join(dict.fromkeys(plan.placement.racks))}",
    )
    return list(out.commands)
