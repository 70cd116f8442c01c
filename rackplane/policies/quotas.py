"""Queue quotas and fair share: what a queue holds, what it may take, who goes first.

The rules (the tree is `rackplane/models/queues.py`):

1. Usage. A queue holds the nodes of its jobs that hold nodes; a parent, its children's
   sum. Its history is the exponentially decayed average of that (`QueueUsage`, folded by
   `evolve`), with the half-life of `fair_share_half_life`.
2. Fair share. share = ((1 - h) x held now + h x decayed average) / (weight x nominal),
   with h = `fair_share_history` (a queue of nominal 0 counts as nominal 1). There is one
   resource (nodes), so this is also the queue's dominant share. Queues are compared top down:
   orgs by their shares, then teams inside the org by theirs; lowest first, then by name.
3. Admission. A job of n nodes in leaf q may be placed only while every queue x on q's path
   stays within nominal(x) + borrowing_limit(x) (`over_limit`). It is *guaranteed* when q's
   holding after it is within q's nominal, else *borrowing*. A borrowing job may use only
   what other queues lend: the free nodes less what the others keep back under their lending
   limits (`kept_back`).
4. Standing of running work. In each leaf, jobs in order of placement: those whose running
   total stays within the nominal are guaranteed, the rest are borrowing (`borrowing_jobs`).
   Reclaim takes only borrowing jobs, and only while their queue is above its nominal.

Jobs without a queue (submitted before queues were set) are outside the quota rules.
Cost: building a `QueueBook` is O(queues + jobs of the state); a share, an admission or a
`limit_room` is O(depth) (the last two cached until a placement); `kept_back` is O(queues),
recomputed after each placement of a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from rackplane.models import JobKind, PolicySettings, QueueSpec
from rackplane.projections.state import ClusterState, JobState, _holding_of

EPSILON_NOMINAL = 1
"""The nominal a queue of nominal 0 is divided by in its share."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a queue takes no more work now (a `quota` block)."""

    explanation: str


@dataclass(slots=True)
class QueueBook:
    """The queues of one cluster at one time: holdings, shares, admission (module docstring).

    Built once per scheduling cycle; `commit` adds a placement made in the cycle."""

    settings: PolicySettings
    specs: dict[str, QueueSpec]
    parent: dict[str, str | None]
    children: dict[str | None, list[str]]
    """Queue -> its children; None -> the top-level queues."""
    nominal: dict[str, int]
    held: dict[str, int]
    average: dict[str, float]
    _kept: dict[str, int] | None = field(default=None)
    _keys: dict[str, tuple[tuple[float, str], ...]] = field(default_factory=dict)
    _kept_for: dict[str, int] = field(default_factory=dict)
    _rooms: dict[str, int | None] = field(default_factory=dict)
    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Queue -> the queue and its ancestors, leaf first (`path`)."""

    @classmethod
    def of(cls, state: ClusterState, at: datetime | None = None) -> QueueBook | None:
        """The book of `state` at `at` (default: the state's own time); None without queues."""
        settings = state.settings
        if not settings.queues:
            return None
        specs, parent, children, nominal, paths = _shape(settings)
        when = at or state.at
        half_life = settings.fair_share_half_life
        held = dict.fromkeys(specs, 0)
        average = dict.fromkeys(specs, 0.0)
        for name, usage in state.queue_usage.items():
            path = paths.get(name)
            if path is None:
                continue
            avg = usage.average if when is None else usage.average_at(when, half_life)
            for x in path:
                held[x] += usage.nodes
                average[x] += avg
        return cls(settings, specs, parent, children, nominal, held, average, paths=paths)

    def leaf(self, queue: str | None) -> bool:
        """True for a queue that may hold jobs (known, with no children)."""
        return queue is not None and queue in self.specs and queue not in self.children

    def path(self, queue: str) -> Sequence[str]:
        """The queue and its ancestors, leaf first."""
        path = self.paths.get(queue)
        return path if path is not None else _path(self.parent, queue)

    def share(self, queue: str) -> float:
        """The queue's fair share (rule 2)."""
        h = self.settings.fair_share_history
        usage = (1 - h) * self.held[queue] + h * self.average[queue]
        return usage / (self.specs[queue].weight * max(self.nominal[queue], EPSILON_NOMINAL))

    def rank_key(self, queue: str) -> tuple[tuple[float, str], ...]:
        """Sort key of a leaf among the others: the shares of its path, top down."""
        key = self._keys.get(queue)
        if key is None:
            key = self._keys[queue] = tuple((self.share(x), x) for x in reversed(self.path(queue)))
        return key

    def kind_allowed(self, queue: str, kind: JobKind) -> bool:
        """True when the queue may run jobs of `kind`."""
        return kind in self.specs[queue].kinds

    def over_limit(self, queue: str, nodes: int) -> Refusal | None:
        """Why `nodes` more would take a queue on the path past nominal + borrowing limit."""
        for x in self.path(queue):
            limit = self.specs[x].borrowing_limit
            if limit is not None and self.held[x] + nodes > self.nominal[x] + limit:
                return Refusal(
                    f"queue {x} would hold {self.held[x] + nodes} nodes: over its nominal "
                    f"{self.nominal[x]} + borrowing limit {limit}"
                )
        return None

    def limit_room(self, queue: str) -> int | None:
        """The most nodes `over_limit` lets the leaf take now (may be negative); None when no
        queue on its path has a borrowing limit. A job of more nodes is refused."""
        if queue in self._rooms:
            return self._rooms[queue]
        room: int | None = None
        for x in self.path(queue):
            limit = self.specs[x].borrowing_limit
            if limit is not None:
                left = self.nominal[x] + limit - self.held[x]
                room = left if room is None else min(room, left)
        self._rooms[queue] = room
        return room

    def guaranteed(self, queue: str, nodes: int) -> bool:
        """True when `nodes` more keep the leaf within its nominal (rule 3)."""
        return self.held[queue] + nodes <= self.nominal[queue]

    def kept_back(self, queue: str) -> int:
        """Free nodes the other queues keep for themselves under their lending limits: what a
        borrowing job of `queue` may not use (rule 3)."""
        kept = self._kept
        if kept is None:
            kept = self._kept = {}
            self._kept_for.clear()
            for name in _bottom_up(self.children):
                own = 0
                limit = self.specs[name].lending_limit
                if limit is not None:
                    own = max(0, self.nominal[name] - self.held[name] - limit)
                kids = sum(kept[k] for k in self.children.get(name, ()))
                kept[name] = max(own, kids)
        total = self._kept_for.get(queue)
        if total is None:
            total = 0
            for x in self.path(queue):
                siblings = self.children.get(self.parent[x], ())
                total += sum(kept[s] for s in siblings if s != x)
            self._kept_for[queue] = total
        return total

    def admit(self, queue: str, nodes: int, free: Callable[[], int]) -> Refusal | None:
        """Why a job of `nodes` nodes in `queue` may not be placed now for quota, or None.
        `free`: the nodes placement could use, cluster-wide (asked only when needed)."""
        over = self.over_limit(queue, nodes)
        if over is not None:
            return over
        if self.guaranteed(queue, nodes):
            return None
        kept = self.kept_back(queue)
        if kept and nodes > (room := free()) - kept:
            return Refusal(
                f"queue {queue} would borrow: of {room} free nodes, {kept} are kept by other "
                f"queues under their lending limits, leaving {max(0, room - kept)} for "
                f"{nodes}"
            )
        return None

    def refuses(self, queue: str, nodes: int, free: Callable[[], int]) -> bool:
        """`admit(...) is not None` without its explanation (nor the cost of writing one);
        `free` is asked exactly when `admit` would ask it."""
        room = self.limit_room(queue)
        if room is not None and nodes > room:
            return True
        if self.guaranteed(queue, nodes):
            return False
        kept = self.kept_back(queue)
        return bool(kept) and nodes > free() - kept

    def commit(self, queue: str, nodes: int) -> None:
        """Count a placement made in this cycle."""
        for x in self.path(queue):
            self.held[x] += nodes
        self._kept = None
        self._keys.clear()
        self._rooms.clear()

    def over_nominal(self, queue: str) -> int:
        """Nodes the queue holds above its nominal (0 when within it)."""
        return max(0, self.held[queue] - self.nominal[queue])


def borrowing_jobs(book: QueueBook, jobs: Iterable[JobState]) -> dict[str, list[JobState]]:
    """Per leaf queue, its jobs holding nodes beyond its nominal (rule 4), newest first."""
    by_queue: dict[str, list[JobState]] = {}
    for j in jobs:
        if j.status.holds_nodes and book.leaf(j.spec.queue):
            by_queue.setdefault(j.spec.queue or "", []).append(j)
    out: dict[str, list[JobState]] = {}
    for queue, held in by_queue.items():
        held.sort(key=_admitted)
        total, limit = 0, book.nominal[queue]
        over: list[JobState] = []
        for j in held:
            total += len(j.nodes)
            if total > limit:
                over.append(j)
        if over:
            out[queue] = over[::-1]
    return out


def _admitted(job: JobState) -> tuple[datetime, int]:
    assert job.placed_at is not None
    return (job.placed_at, job.order)


_Shape = tuple[
    dict[str, QueueSpec],
    dict[str, str | None],
    dict[str | None, list[str]],
    dict[str, int],
    dict[str, tuple[str, ...]],
]
_SHAPE: list[tuple[PolicySettings, _Shape]] = []
"""The last settings' queue tree: specs, parents, children, nominals and each queue's path
(leaf first). A book is built per scheduling cycle and per reclaim look, and the tree changes
only with the settings; books share these dicts and never change them."""


def _shape(settings: PolicySettings) -> _Shape:
    """The queue tree of `settings` (the same objects while the settings are)."""
    if _SHAPE and _SHAPE[0][0] is settings:
        return _SHAPE[0][1]
    specs = {q.name: q for q in settings.queues}
    parent = {q.name: q.parent for q in settings.queues}
    children: dict[str | None, list[str]] = {}
    for q in settings.queues:
        children.setdefault(q.parent, []).append(q.name)
    nominal: dict[str, int] = {}
    for name in _bottom_up(children):
        kids = children.get(name)
        nominal[name] = sum(nominal[k] for k in kids) if kids else specs[name].nominal_nodes
    paths = {name: tuple(_path(parent, name)) for name in specs}
    shape = (specs, parent, children, nominal, paths)
    _SHAPE[:] = [(settings, shape)]
    return shape


def _path(parent: dict[str, str | None], queue: str) -> list[str]:
    out = [queue]
    up = parent[queue]
    while up is not None:
        out.append(up)
        up = parent[up]
    return out


def _bottom_up(children: dict[str | None, list[str]]) -> list[str]:
    """Every queue, children before their parents."""
    order: list[str] = []

    def visit(name: str) -> None:
        for k in children.get(name, ()):
            visit(k)
        order.append(name)

    for top in children.get(None, ()):
        visit(top)
    return order


def reclaimable(state: ClusterState, job: JobState, cause: str) -> str | None:
    """Why `job` may not be preempted for `cause` (`reclaim`: it must run on quota its queue
    borrowed; `priority`: its queue must let its jobs preempt each other), or None."""
    book = QueueBook.of(state)
    queue = job.spec.queue
    if book is None or queue is None or not book.leaf(queue):
        return f"job {job.id} is in no queue: there is no quota to {cause} it for"
    if cause == "priority":
        if book.specs[queue].preempt_lower_priority:
            return None
        return f"queue {queue} does not let its jobs preempt each other by priority"
    over = borrowing_jobs(book, _holding_of(state.jobs).get(queue, {}).values())
    if job in over.get(queue, ()):
        return None
    return (
        f"job {job.id} runs within queue {queue}'s nominal quota ({book.held[queue]} of "
        f"{book.nominal[queue]} nodes held): it is guaranteed, not borrowing"
    )


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue as an operator reads it (`rackplane queues`, the console)."""

    queue: str
    parent: str | None
    depth: int
    nominal_nodes: int
    borrowing_limit: int | None
    lending_limit: int | None
    weight: float
    held_nodes: int
    borrowed_nodes: int
    """Nodes held above the nominal."""
    held_gpus: int
    running_jobs: int
    waiting_jobs: int
    waiting_nodes: int
    blocked_jobs: int
    share: float


def queue_rows(state: ClusterState) -> list[QueueRow]:
    """Every queue, parents before their children (tree order), with what it holds and what
    waits in it; empty without queues."""
    book = QueueBook.of(state)
    if book is None:
        return []
    running = dict.fromkeys(book.specs, 0)
    gpus = dict.fromkeys(book.specs, 0)
    waiting = dict.fromkeys(book.specs, 0)
    waiting_nodes = dict.fromkeys(book.specs, 0)
    blocked = dict.fromkeys(book.specs, 0)
    racks, nodes = state.racks, state.nodes
    for job in state.jobs.values():
        queue = job.spec.queue
        if queue is None or queue not in book.specs:
            continue
        for x in book.path(queue):
            if job.status.holds_nodes:
                running[x] += 1
                gpus[x] += sum(racks[nodes[n].rack].gpus_per_node for n in job.nodes)
            else:
                waiting[x] += 1
                waiting_nodes[x] += job.spec.nodes
                blocked[x] += job.blocked is not None
    out: list[QueueRow] = []

    def visit(name: str, depth: int) -> None:
        spec = book.specs[name]
        out.append(
            QueueRow(
                queue=name,
                parent=spec.parent,
                depth=depth,
                nominal_nodes=book.nominal[name],
                borrowing_limit=spec.borrowing_limit,
                lending_limit=spec.lending_limit,
                weight=spec.weight,
                held_nodes=book.held[name],
                borrowed_nodes=book.over_nominal(name),
                held_gpus=gpus[name],
                running_jobs=running[name],
                waiting_jobs=waiting[name],
                waiting_nodes=waiting_nodes[name],
                blocked_jobs=blocked[name],
                share=book.share(name),
            )
        )
        for child in book.children.get(name, ()):
            visit(child, depth + 1)

    for top in book.children.get(None, ()):
        visit(top, 0)
    return out
