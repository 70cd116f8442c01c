"""`tas`: topology-aware slice scheduling, and the `naive` baseline that ignores racks.

The scheduling cycle (run when something that frees nodes or adds work happens):

1. Build this cycle's capacity from the state: usable nodes per rack, spares kept back.
2. Walk the queue: priority first, re-queued jobs ahead of their peers, then FIFO. With
   queues set (`PolicySettings.queues`), the queues take turns by fair share: the next job
   always comes from the leaf queue of the lowest share (`rackplane/policies/quotas.py`,
   compared top down: org, then team), and a placement raises its queue's share at once;
   inside a queue, priority, then FIFO. Jobs without a queue go first.
2a. A job its queue may not take now (nominal + borrowing limit reached, or nothing left to
   borrow) is blocked for `quota`, with where it stands; the queue's next job may still go.
3. A job that holds a defrag reservation is placed inside its reserved racks first.
4. Others are placed by `find_placement` (best fit, lowest fabric domain), never on racks
   reserved for another job, nor on the racks the head of the line holds (step 6); on a
   degraded rack only when the healthy racks cannot take the job.
5. A short preemptible job that does not fit may borrow spares when `borrow_spares` is on.
6. A job that does not fit is blocked with its reason (`capacity` or `topology`) and the
   numbers; the first such job that could ever fit holds the racks closest to fitting it, so
   smaller jobs behind it do not keep taking them (no starvation).
7. Backfill (Slurm's): the held racks free up when the jobs on them end; when every job
   whose nodes the head needs there has a time limit, that time is the head's start
   (`shadow`). A later job with a time limit that ends by then may use the held racks: it
   cannot delay the head. A job without a limit never backfills.
8. Reservations (`Reserve`): before one starts, a job that could run past its start (no
   time limit, or one that reaches it) is placed on a copy of the cycle's capacity without
   the reserved nodes (`Withheld`), never on the racks the head holds either; from the
   start a maintenance reservation's nodes are cordoned, and a dedicated one's are withheld
   from every job that does not name it. A job that names one (`JobSpec.reservation`) is
   placed on a copy holding only its nodes (spares of its racks kept back) while it runs,
   and blocked for `reservation` before its start or once it is over.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from rackplane.models import (
    BlockJob,
    Command,
    Event,
    JobId,
    PlaceJob,
    QueueStanding,
    RackId,
    SliceAssignment,
)
from rackplane.policies._checks import may_borrow
from rackplane.policies._proposals import Proposals, own_rejections
from rackplane.policies.placement import Capacity, Placement, Unplaceable, find_placement
from rackplane.policies.quotas import QueueBook
from rackplane.projections.state import ClusterState, JobState

# Events after which a scheduling cycle may place something (or must re-examine the queue).
TRIGGERS = frozenset(
    {
        "TopologyRegistered",
        "PolicyConfigured",
        "JobSubmitted",
        "JobCompleted",
        "JobFailed",
        "JobCancelled",
        "JobPreempted",
        "SliceMigrated",
        "SliceDegraded",
        "NodeRepaired",
        "NodeRecovered",
        "NodeUncordoned",
        "RackDegraded",
        "RackRecovered",
        "DefragPlanned",
        "ReservationStarted",
        "ReservationEnded",
    }
)


def triggered(policy: str, events: Sequence[Event]) -> bool:
    """True when `events` may change what the queue can place."""
    # A plain loop: asked after every command, of one or two events (a generator and an
    # `any` cost more than the look itself).
    for e in events:
        if e.type in TRIGGERS:
            return True
    return own_rejections(policy, events)


@dataclass(frozen=True)
class TopologyAwareScheduler:
    """Places queued jobs slice by slice inside racks (see the module docstring)."""

    name: str = "tas"

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        """Run a scheduling cycle when `events` call for one."""
        if state.index is None or not triggered(self.name, events):
            return []
        return schedule(state, self.name)


def schedule(state: ClusterState, policy: str = "tas", *, pass_over: bool = True) -> list[Command]:
    """One scheduling cycle over the queue; returns PlaceJob and BlockJob proposals.
    `pass_over=False` offers every queued job, even those `FairLine` may pass over: the same
    proposals, slower (for the tests that say so)."""
    if not state.any_queued():
        return []  # nothing to place or block: skip building the cycle's capacities
    out = Proposals(policy, state)
    capacity = Capacity(state)
    borrow = Capacity(state, keep_spares=False) if state.settings.borrow_spares else None
    reserved = dict(state.reservations)
    holders, reserved_racks = set(reserved.values()), frozenset(reserved)
    head_held: set[RackId] = set()
    others_of: set[RackId] | None = None  # the head's hold `others_all` was made with
    others_all: frozenset[RackId] | set[RackId] = reserved_racks
    verdicts: dict[tuple[int, ...], Unplaceable] = {}
    line = FairLine(state, QueueBook.of(state), capacity if pass_over else None)
    line.out = out
    backfill: Capacity | None = None  # the cycle's capacity without the head's hold
    shadow: datetime | None = None  # when the head could start on the held racks
    kept = Withheld(state, capacity)
    settings, at = state.settings, state.at

    def settled(job: JobState) -> bool:
        """True when offering `job` now would propose nothing and change nothing of the cycle
        (the loop below, step by step): no reservation concerns it, its slice sizes met a
        verdict since the last placement and it is blocked for that reason already, and it
        may neither backfill nor borrow. (The job that met that verdict made the head hold
        its racks, unless such a job could never fit: nor could this one.) Whether its
        queue takes its nodes is `FairLine`'s to ask (`_settled`)."""
        blocked = job.blocked
        if blocked is None or kept.windows or job.spec.reservation is not None:
            return False
        spec = job.spec
        verdict = verdicts.get(spec.slice_sizes)
        if verdict is None or verdict.reason != blocked.reason or spec.id in holders:
            return False
        limit = spec.time_limit
        if shadow is not None and limit is not None and at is not None and at + limit <= shadow:
            return False  # it may backfill
        return borrow is None or not may_borrow(settings, spec)

    if pass_over:
        line.settled = settled
    for job in line:
        if line.book is not None and line.refused(job, capacity):
            continue
        if kept.applies(job):
            job_cap = kept.for_job(job)
            if job_cap is not capacity:
                _place_around(out, kept, job_cap, job, line, reserved)
                continue
        sizes = job.spec.slice_sizes
        others: frozenset[RackId] | set[RackId]
        if job.id in holders:
            mine = [r for r, j in reserved.items() if j == job.id]
            others = {r for r, j in reserved.items() if j != job.id} | head_held
        else:  # most jobs hold no reservation: every reserved rack is another's
            mine = []
            if others_of is not head_held:
                others_of, others_all = head_held, reserved_racks | head_held
            others = others_all
        result: Placement | Unplaceable | None = None
        if mine:
            result = find_placement(capacity, sizes, within=mine)
        if not isinstance(result, Placement):
            result = verdicts.get(sizes) if not mine else None
            if result is None:
                result = find_placement(capacity, sizes, exclude=others)
        if not isinstance(result, Placement) and _backfills(state, job, shadow):
            assert backfill is not None
            early = find_placement(backfill, sizes, exclude=others - head_held)
            if isinstance(early, Placement):
                why = f"; backfilled: ends by {shadow:%Y-%m-%d %H:%M}, when the held racks free"
                result = Placement(early.slices, early.racks, early.explanation + why)
        if isinstance(result, Placement):
            _place(out, capacity, borrow, job, result, borrowing=False, also=backfill)
            line.placed(job)
            verdicts.clear()
            continue
        verdicts[sizes] = result
        if borrow is not None and may_borrow(state.settings, job.spec):
            lent = find_placement(borrow, sizes, exclude=others)
            if isinstance(lent, Placement):
                _place(out, capacity, borrow, job, lent, borrowing=True, also=backfill)
                line.placed(job)
                verdicts.clear()
                continue
        _block(out, job, result, line.standing)
        if not head_held and _could_ever_fit(state, sizes):
            head_held = _closest_racks(capacity, sizes, others)
            backfill = capacity.copy()
            shadow = _shadow(state, capacity, head_held, sizes)
            capacity.hold(head_held)
            # The copies for jobs reservations keep from some nodes hold them too: a copy
            # made before the hold would let such a job take the head's racks (step 8).
            for cap in (borrow, *kept.all()):
                if cap is not None:
                    cap.hold(head_held)
    return list(out.commands)


def _place(
    out: Proposals,
    capacity: Capacity,
    borrow: Capacity | None,
    job: JobState,
    placement: Placement,
    *,
    borrowing: bool,
    also: Capacity | None = None,
    extra: Sequence[Capacity] = (),
) -> None:
    out.add(
        PlaceJob,
        job=job.id,
        slices=tuple(SliceAssignment(nodes=n) for n in placement.slices),
        borrowing=borrowing,
        explanation=placement.explanation + (" (on borrowed spares)" if borrowing else ""),
    )
    for cap in (capacity, borrow, also, *extra):
        if cap is not None:
            cap.commit(placement)


def _block(
    out: Proposals,
    job: JobState,
    verdict: Unplaceable,
    standing: Callable[[JobState], QueueStanding | None] | None = None,
) -> None:
    # Re-blocking for the same reason would only repeat the record: numbers at the time the
    # job first met this reason stand until the reason changes.
    if job.blocked is not None and job.blocked.reason == verdict.reason:
        return
    out.add(
        BlockJob,
        job=job.id,
        reason=verdict.reason,
        allocatable_nodes=verdict.allocatable_nodes,
        placeable_slices=verdict.placeable_slices,
        explanation=verdict.explanation,
        standing=standing(job) if standing is not None else None,
    )


class FairLine:
    """The queued jobs of one cycle in the order they are offered: jobs without a queue
    first, then by fair share (module docstring, step 2). Iterate it once; tell it of each
    placement (`placed`) so the placed job's queue waits its turn again.

    Cost: O(jobs log jobs) to sort, O(log queues x depth) per job offered; a job blocked for
    quota that its queue refuses again is passed over (O(depth), nothing built), not offered,
    and so is a job the cycle would offer for nothing (`settled`, set by `schedule`)."""

    def __init__(
        self, state: ClusterState, book: QueueBook | None, capacity: Capacity | None = None
    ) -> None:
        self.book = book
        self.capacity = capacity
        """The cycle's capacity: without it no job is passed over (`__iter__`)."""
        self.out: Proposals | None = None
        self.settled: Callable[[JobState], bool] | None = None
        """The cycle's test of a job it would offer for nothing (`schedule`'s `settled`):
        such a job is passed over, as one refused again for quota is (`__iter__`)."""
        queued = state.queued()
        self.free: int | None = None
        """Nodes placement can use cluster-wide, counted once per cycle when first needed."""
        self.lines: dict[str, list[JobState]] = {}
        self.unmanaged: list[JobState] = []
        self.offered: dict[str, int] = {}
        self._refusals: dict[tuple[str, int], bool] = {}
        """(queue, nodes) -> the queue refuses that many nodes now, since the last placement
        (`_refuses`)."""
        if book is None:
            self.unmanaged = queued
            return
        for job in queued:
            q = job.spec.queue
            if q is not None and book.leaf(q):
                self.lines.setdefault(q, []).append(job)
            else:
                self.unmanaged.append(job)

    def __iter__(self) -> Iterator[JobState]:
        settled = self.settled
        if settled is None:
            yield from self.unmanaged
        else:
            # No queue's quota stands between these jobs and the cycle (`refused`).
            for job in self.unmanaged:
                if not settled(job):
                    yield job
        book = self.book
        if book is None:
            return
        lines, offered = self.lines, self.offered
        heap = [(book.rank_key(q), q) for q in lines]
        heapq.heapify(heap)
        while heap:
            key, q = heapq.heappop(heap)
            fresh = book.rank_key(q)
            if fresh != key:  # its share rose since it was pushed (shares only rise in a cycle)
                heapq.heappush(heap, (fresh, q))
                continue
            jobs, at = lines[q], offered.get(q, 0)
            # Jobs blocked for quota that the queue refuses again are passed over here: offered
            # one by one, each would come next (a refusal does not move the queue's key) and be
            # refused with nothing to say.
            while at < len(jobs) and (
                self._refused_again(q, jobs[at]) or self._settled(q, jobs[at], settled)
            ):
                at += 1
            if at == len(jobs):
                offered[q] = at
                continue
            offered[q] = at + 1
            yield jobs[at]
            if at + 1 < len(jobs):
                heapq.heappush(heap, (book.rank_key(q), q))

    def _refused_again(self, queue: str, job: JobState) -> bool:
        """True for a job blocked for quota already that its queue refuses now (as `refused`
        would, asking for the free count exactly when it would, but saying nothing)."""
        blocked, capacity = job.blocked, self.capacity
        if blocked is None or blocked.reason != "quota" or self.book is None or capacity is None:
            return False
        return self._refuses(queue, job.spec.nodes, capacity)

    def _settled(
        self, queue: str, job: JobState, settled: Callable[[JobState], bool] | None
    ) -> bool:
        """True for a job the cycle would offer for nothing (`settled`) that its queue takes
        now: `_refuses` is asked here exactly as `refused` would ask it first thing, at the
        same point of the walk (nothing changed since the last job), so the free count is
        read when the cycle would read it."""
        if settled is None or not settled(job):
            return False
        assert self.capacity is not None  # `schedule` sets `settled` only with it
        return not self._refuses(queue, job.spec.nodes, self.capacity)

    def _refuses(self, queue: str, nodes: int, capacity: Capacity) -> bool:
        """`QueueBook.refuses`, then the free count counted when it refuses (as a refusal's
        block counts it: a later count differs).

        Between two placements the answer depends on the queue and the nodes alone (the
        book and the free count stand), so it is asked once per pair (`_refusals`, cleared
        by `placed`)."""
        key = (queue, nodes)
        known = self._refusals.get(key)
        if known is None:
            assert self.book is not None
            known = self._refusals[key] = self.book.refuses(
                queue, nodes, lambda: self._free(capacity)
            )
            if known:
                self._free(capacity)
        return known

    def refused(self, job: JobState, capacity: Capacity) -> bool:
        """Block `job` for quota (and say so) when its queue may not take it now."""
        book, queue = self.book, job.spec.queue
        if book is None or queue is None or not book.leaf(queue):
            return False
        if not self._refuses(queue, job.spec.nodes, capacity):
            return False
        refusal = book.admit(queue, job.spec.nodes, lambda: self._free(capacity))
        assert refusal is not None, "refuses and admit disagree"
        if self.out is not None:
            verdict = Unplaceable("quota", self._free(capacity), 0, refusal.explanation)
            _block(self.out, job, verdict, self.standing)
        return True

    def _free(self, capacity: Capacity) -> int:
        if self.free is None:
            self.free = capacity.total
        return self.free

    def placed(self, job: JobState) -> None:
        """Count a placement of this cycle against its queue's quota and share."""
        book, queue = self.book, job.spec.queue
        if self.free is not None:
            # A placement on borrowed spares or on racks held for the job took nodes `total`
            # did not count: the count stays a count.
            self.free = max(0, self.free - job.spec.nodes)
        if book is not None and queue is not None and book.leaf(queue):
            book.commit(queue, job.spec.nodes)
        self._refusals.clear()

    def standing(self, job: JobState) -> QueueStanding | None:
        """Where a job offered in this cycle stands (for its `JobBlocked`)."""
        book, queue = self.book, job.spec.queue
        if book is None or queue is None or not book.leaf(queue):
            return None
        key = book.rank_key(queue)
        waiting = [q for q, jobs in self.lines.items() if self.offered.get(q, 0) < len(jobs)]
        rank = 1 + sum(1 for q in waiting if q != queue and book.rank_key(q) < key)
        return QueueStanding(
            queue=queue,
            share=round(book.share(queue), 4),
            queue_rank=rank,
            position=self.offered.get(queue, 0),
            nodes_held=book.held[queue],
            nominal_nodes=book.nominal[queue],
        )


class Withheld:
    """The cycle's capacities for jobs that reservations keep from some nodes (step 8): per
    set of reservations that keep a job out, a copy of the cycle's capacity without their
    nodes; per reservation jobs run in, a copy with only its nodes; each kept in step with
    every placement of the cycle and holding the racks the head holds (`schedule`)."""

    def __init__(self, state: ClusterState, capacity: Capacity) -> None:
        self.state = state
        self.capacity = capacity
        # Started maintenance reservations hold cordoned nodes, which no placement takes; one
        # whose node an operator uncordoned by hand still keeps work off it. A started
        # dedicated one keeps its uncordoned nodes from all but its jobs.
        self.windows = [
            w
            for w in state.windows.values()
            if not w.started or any(state.nodes[n].available for n in w.nodes)
        ]
        self.copies: dict[frozenset[str], Capacity] = {}
        self.counted: dict[RackId, int] = {}
        """Per rack, the nodes the cycle's capacity had given when the copies last caught up
        (a copy made later starts with them)."""
        self.verdicts: dict[tuple[int, tuple[int, ...]], tuple[object, Unplaceable]] = {}
        """Per copy and slice sizes, the last verdict and the view it was reached on: the
        queue asks the same question job after job that does not fit (as step 4's verdicts).
        A view stands until its capacity changes (`Capacity.cached_view`)."""

    def applies(self, job: JobState) -> bool:
        """True when reservations may change where `job` goes."""
        return bool(self.windows) or job.spec.reservation is not None

    def for_job(self, job: JobState) -> Capacity | Unplaceable:
        """The capacity `job` may use: the cycle's, or a copy without reserved nodes, or for a
        job that names a reservation a copy with only its nodes (or why it waits)."""
        at = self.state.at
        assert at is not None
        self._catch_up()
        name = job.spec.reservation
        keys = frozenset(w.id for w in self.windows if w.keeps_from(job.spec, at))
        if name is not None:
            return self._inside(name, keys, at)
        if not keys:
            return self.capacity
        cap = self.copies.get(keys)
        if cap is None:
            cap = self.capacity.copy()
            cap.withhold(n for w in self.windows if w.id in keys for n in w.nodes)
            self.copies[keys] = cap
        return cap

    def _inside(self, name: str, keys: frozenset[str], at: datetime) -> Capacity | Unplaceable:
        """The capacity of a job that runs in reservation `name`: its nodes, less those other
        reservations keep from the job. O(racks + the reservation's racks' nodes), once a
        cycle per reservation."""
        window = self.state.windows.get(name)
        if window is None:
            gone = f"reservation {name} is over (ended or cancelled): cancel the job or resubmit it"
            return Unplaceable("reservation", 0, 0, gone)
        waits = window.admits(at)
        if waits is not None:
            over = at >= window.end
            waits += ": cancel the job or resubmit it" if over else "; the job waits for it"
            return Unplaceable("reservation", 0 if over else len(window.nodes), 0, waits)
        key = frozenset({f"in:{name}", *keys})
        cap = self.copies.get(key)
        if cap is None:
            cap = self.capacity.copy()
            nodes = self.state.nodes
            racks = {nodes[n].rack for n in window.nodes}
            index = self.capacity.index
            cap.hold(r for r in cap.usable if r not in racks)
            outside = (n for r in racks for n in index.rack(r).nodes if n not in window.nodes)
            cap.withhold(outside)
            cap.withhold(n for w in self.windows if w.id in keys for n in w.nodes)
            self.copies[key] = cap
        return cap

    def all(self) -> list[Capacity]:
        return list(self.copies.values())

    def _catch_up(self) -> None:
        """Deduct from every copy what the cycle placed on its own capacity since (a job no
        reservation keeps out is placed there, not here): else a copy would offer those nodes
        again, and the controller would refuse the second placement. O(racks placed on in
        the cycle) per job, plus O(copies x a rack's nodes) per rack placed on since."""
        seen = self.counted
        for rack, ns in self.capacity.taken.items():
            if seen.get(rack) == len(ns):
                continue
            seen[rack] = len(ns)
            for cap in self.copies.values():
                mine = cap.taken.get(rack, set())
                new = [n for n in ns if n not in mine]
                if new:
                    cap.take(new)


def _place_around(
    out: Proposals,
    kept: Withheld,
    cap: Capacity | Unplaceable,
    job: JobState,
    line: FairLine,
    reserved: dict[RackId, JobId],
) -> None:
    """Place (or block) a job some reservations keep from their nodes, or one that runs in a
    reservation, on its own capacity (step 8); a placement counts on every capacity of the
    cycle."""
    if isinstance(cap, Unplaceable):
        # The same reason with another story (it was waiting for the start; now the
        # reservation is over) is news: say it again.
        b = job.blocked
        if b is None or b.reason != cap.reason or b.explanation != cap.explanation:
            out.add(
                BlockJob,
                job=job.id,
                reason=cap.reason,
                allocatable_nodes=cap.allocatable_nodes,
                placeable_slices=cap.placeable_slices,
                explanation=cap.explanation,
                standing=line.standing(job),
            )
        return
    others = {r for r, j in reserved.items() if j != job.id}
    mine = [r for r, j in reserved.items() if j == job.id]
    sizes = job.spec.slice_sizes
    result = find_placement(cap, sizes, within=mine) if mine else None
    if not isinstance(result, Placement):
        view = cap.cached_view(others)
        seen = kept.verdicts.get((id(cap), sizes))
        if seen is not None and seen[0] is view:
            result = seen[1]
        else:
            result = find_placement(cap, sizes, exclude=others)
            if isinstance(result, Unplaceable):
                kept.verdicts[(id(cap), sizes)] = (cap.cached_view(others), result)
    inside = job.spec.reservation
    if isinstance(result, Placement):
        why = f"; in reservation {inside}" if inside else "; around reserved nodes"
        placed = Placement(result.slices, result.racks, result.explanation + why)
        _place(out, kept.capacity, None, job, placed, borrowing=False, extra=kept.all())
        line.placed(job)
        return
    if inside:
        result = replace(result, explanation=f"{result.explanation} (in reservation {inside})")
    _block(out, job, result, line.standing)


def _backfills(state: ClusterState, job: JobState, shadow: datetime | None) -> bool:
    """True when `job` ends before the head's start on the held racks (step 7)."""
    limit = job.spec.time_limit
    return (
        shadow is not None
        and limit is not None
        and state.at is not None
        and (state.at + limit <= shadow)
    )


def _shadow(
    state: ClusterState, capacity: Capacity, held: set[RackId], sizes: tuple[int, ...]
) -> datetime | None:
    """When the head could start on the held racks: the biggest slices on the roomiest racks,
    each rack ready once enough of its jobs end (by their time limits); None when one of the
    jobs it waits for has no limit, or the head would not fit the held racks at all."""
    assert state.index is not None and state.at is not None
    now = state.at
    racks = sorted(held, key=lambda r: -capacity.usable[r])
    if len(racks) < len(sizes):
        return None
    latest = now
    nodes = state.nodes
    for rack, size in zip(racks, sorted(sizes, reverse=True), strict=False):
        need = size - max(capacity.usable[rack], 0)
        if need <= 0:
            continue
        held_by: dict[str, int] = {}
        for n in state.index.rack(rack).nodes:
            holder = nodes[n].job
            if holder is not None:
                held_by[holder] = held_by.get(holder, 0) + 1
        ends: list[tuple[datetime, int]] = []
        for job_id, count in held_by.items():
            end = _end(state.jobs[job_id], now)
            if end is None:
                continue
            ends.append((end, count))
        ends.sort()
        freed, ready = 0, None
        for end, count in ends:
            freed += count
            if freed >= need:
                ready = end
                break
        if ready is None:
            return None  # the nodes it needs are held by jobs without a limit
        latest = max(latest, ready)
    return latest


def _end(job: JobState, now: datetime) -> datetime | None:
    """When a job holding nodes will have ended at the latest (its time limit), or None."""
    limit = job.spec.time_limit
    if limit is None:
        return None
    return (job.started_at or now) + limit


def _could_ever_fit(state: ClusterState, sizes: tuple[int, ...]) -> bool:
    """True when an empty cluster would take the job (else holding racks for it is waste).

    The answer depends on the racks' sizes, the spares kept and `sizes` alone: it is kept per
    topology (a registration builds a new index and its racks together) and spares setting."""
    index, keep = state.index, state.settings.spares_per_rack
    memo = _EVER_FIT
    if not memo or memo[0] is not index or memo[1] != keep:
        room = sorted((r.size - keep for r in state.racks.values()), reverse=True)
        memo[:] = [index, keep, room, {}]
    answers: dict[tuple[int, ...], bool] = memo[3]
    answer = answers.get(sizes)
    if answer is None:
        room = memo[2]
        slots = sum(max(0, r) // sizes[0] for r in room)
        answer = answers[sizes] = bool(room) and room[0] >= sizes[0] and slots >= len(sizes)
    return answer


_EVER_FIT: list[Any] = []
"""[index, spares kept, room per rack (largest first), sizes -> `_could_ever_fit`]."""


def _closest_racks(
    capacity: Capacity, sizes: tuple[int, ...], others: frozenset[RackId] | set[RackId]
) -> set[RackId]:
    """The racks that will fit the job soonest: the ones with the most usable nodes now,
    healthy racks before degraded ones (which take new slices only when no healthy one fits).

    The racks ranked by (degraded, most usable, rack order), the first `len(sizes)` taken.
    O(racks): when enough healthy racks have usable nodes, only those are ranked (any of them
    comes before every other rack); else every rack in service is."""
    order = capacity.index.rack_order
    degraded = capacity.degraded
    want = len(sizes)
    roomy = [
        (-u, order[r], r)
        for r, u in capacity.usable.items()
        if u > 0 and r not in others and r not in degraded
    ]  # usable > 0: in service (a failed rack's room stays far below zero)
    if len(roomy) >= want:
        return {r for _, _, r in heapq.nsmallest(want, roomy)}
    racks = capacity.state.racks
    ranked = heapq.nsmallest(
        want,
        (
            (r in degraded, -u, order[r], r)
            for r, u in capacity.usable.items()
            if r not in others and racks[r].in_service
        ),
    )
    return {r for _, _, _, r in ranked}


@dataclass(frozen=True)
class NaiveScheduler:
    """The baseline that ignores racks: first fit over free healthy nodes in id order.

    Slices are cut from consecutive nodes, so they may span racks; run it with
    `rack_local_slices: false`. It keeps spares and defrag reservations, and only ever blocks
    for `capacity`.
    """

    name: str = "naive"

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        """Place every queued job that fits, first fit, in queue order."""
        if state.index is None or not any(e.type in TRIGGERS for e in events):
            return []
        out = Proposals(self.name, state)
        capacity = Capacity(state)
        reserved = dict(state.reservations)
        for job in state.queued():
            order = capacity.index.racks
            pool: list[str] = []
            need = job.spec.nodes
            for rack in order:
                holder = reserved.get(rack.id)
                if holder is not None and holder != job.id:
                    continue
                k = min(capacity.usable[rack.id], need - len(pool))
                if k > 0:
                    pool.extend(capacity.nodes(rack.id, k))
                if len(pool) == need:
                    break
            if len(pool) < need:
                _block(
                    out,
                    job,
                    Unplaceable(
                        "capacity",
                        capacity.total,
                        0,
                        f"needs {need} nodes; {capacity.total} allocatable cluster-wide",
                    ),
                )
                continue
            slices, at = [], 0
            for size in job.spec.slice_sizes:
                slices.append(tuple(pool[at : at + size]))
                at += size
            racks = tuple(capacity.state.nodes[s[0]].rack for s in slices)
            placement = Placement(tuple(slices), racks, "first fit in node order (naive)")
            out.add(
                PlaceJob,
                job=job.id,
                slices=tuple(SliceAssignment(nodes=s) for s in slices),
                explanation=placement.explanation,
            )
            capacity.commit(placement)
        return list(out.commands)
