"""Topology-aware slice placement: `find_placement(capacity, sizes) -> Placement | Unplaceable`.

Algorithm overview (a job of k full slices of size s, plus at most one smaller remainder):

1. Capacity. Each rack offers `usable` nodes: healthy, uncordoned and free, less its spare
   reserve, less what racks reserved for other jobs hold, less what this cycle already gave.
   A failed rack offers none. A degraded rack (one NVSwitch tray lost) offers its nodes only
   when steps 2-6 find no place on the healthy racks alone: then they run again over every
   rack, and the explanation names the degraded racks used (or counted, for a block).
2. Verdict on totals. Fewer usable nodes than the job needs, cluster-wide: `capacity`.
3. Fit counts. A rack fits `usable // s` full slices; pods and superpods sum their racks.
4. Domain. The lowest level of the fabric where one domain fits all k slices wins: one rack,
   else one pod, else one superpod, else the cluster. Among candidate domains, best fit: the one
   with the fewest fitting slices that is still enough (ties: fewest usable nodes, then order).
5. Distribution. Inside the domain, pods are taken largest first (fewest pods, nearest in the
   fabric); inside a pod, racks by best fit: fewest usable nodes that still fit a slice, so
   partly used racks fill before empty ones are opened.
6. Remainder. The smaller last slice goes to the best-fit rack nearest (in IB hops) to the
   job's first slice.
7. Nodes. Each slice takes the first usable nodes of its rack in rack order (the last free
   nodes of a rack are the ones shown as its spares).

If step 4 or 6 finds nothing while step 2 passed, the verdict is `topology`: enough nodes in
total, not in rack-shaped pieces. Cost per job: steps 2-6 read the cycle's view, indexed by
room and patched for the racks changed since the last one (`_rack_choice`): O(room values)
when one rack takes the job, O(pods + the chosen pods' racks) otherwise; step 7 sorts the
chosen racks' free nodes. Rebuilding the view (no logged path) is O(racks).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from immutables import Map

from rackplane.models import Health, NodeId, RackHealth, RackId, TopologyIndex
from rackplane.policies._rack_choice import Unplaceable as Unplaceable
from rackplane.policies._rack_choice import View, choose_on_view, shape
from rackplane.policies._rack_choice import choose_racks as choose_racks
from rackplane.projections import _changes
from rackplane.projections.state import ClusterState, RackState


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each slice goes: its nodes and its rack, slice by slice."""

    slices: tuple[tuple[NodeId, ...], ...]
    racks: tuple[RackId, ...]
    explanation: str


class Capacity:
    """What each rack can give new work during one scheduling cycle.

    Built once per cycle from the state: the last cycle's table patched for the racks changed
    since (`_usable`; O(racks) only without a logged path); `commit` deducts a placement so
    later jobs of the same cycle see it. `exclude` hides racks (reserved for another job)
    from a query.

    Args:
        state: the cluster state the cycle starts from.
        keep_spares: leave each rack its `spares_per_rack` (False only for borrowing work).
    """

    def __init__(self, state: ClusterState, *, keep_spares: bool = True) -> None:
        assert state.index is not None, "no topology registered"
        self.state = state
        self.index: TopologyIndex = state.index
        self.spares = state.settings.spares_per_rack if keep_spares else 0
        self.taken: dict[RackId, set[NodeId]] = {}
        self.freed: dict[RackId, set[NodeId]] = {}
        self.withheld: set[NodeId] = set()
        """Nodes this capacity never gives (`withhold`)."""
        # Raw room per rack: free nodes less the reserve. It goes negative when a swap has
        # eaten into the reserve; keeping the sign makes releases and takes add up exactly.
        entry = _usable(state, self.index, self.spares)
        table, degraded = entry.table
        self.usable: dict[RackId, int] = dict(table)
        self.degraded: frozenset[RackId] = degraded
        """Degraded racks: used only when the healthy racks cannot take a job."""
        self._views: dict[frozenset[RackId], View] = {}
        """Views and their totals by `exclude`, while the usable counts stay as they are:
        a cycle asks the same question for job after job that does not fit."""
        self._entry: _Entry | None = entry
        """The state's table while `usable` is still that table (nothing taken, withheld,
        released or held yet): its view with no exclusion is shared across cycles."""
        self._base: View | None = None
        """The last view with no exclusion, right but for the `_dirty` racks: the next one
        is it patched for them, not a rebuild over every rack."""
        self._dirty: set[RackId] = set()

    def in_service(self) -> list[RackId]:
        """The racks not failed, in topology order, read from the room table (a failed rack's
        room stays far below zero whatever is taken or released), not from the racks map."""
        floor = _DOWN // 2
        return [r for r, u in self.usable.items() if u > floor]

    @property
    def total(self) -> int:
        """Usable nodes, cluster-wide."""
        return sum(u for u in self.usable.values() if u > 0)

    def nodes(self, rack: RackId, k: int) -> tuple[NodeId, ...]:
        """The first `k` usable nodes of a rack, in rack order."""
        taken = self.taken.get(rack, set())
        order = self.index.node_order
        pool = self.state.racks[rack].free | self.freed.get(rack, set())
        free = sorted((n for n in pool if n not in taken), key=order.__getitem__)
        assert len(free) - self.spares >= k, f"rack {rack} cannot give {k} nodes"
        return tuple(free[:k])

    def commit(self, placement: Placement) -> None:
        """Deduct a placement made in this cycle."""
        for nodes in placement.slices:
            self.take(nodes)

    def take(self, nodes: Iterable[NodeId]) -> None:
        """Deduct nodes given away in this cycle."""
        rack_of, taken, usable, dirty = self.state.nodes, self.taken, self.usable, self._dirty
        for n in nodes:  # locals: every node of every placement of a cycle passes here
            rack = rack_of[n].rack
            got = taken.get(rack)
            if got is None:
                got = taken[rack] = set()
            got.add(n)
            usable[rack] -= 1
            dirty.add(rack)
        self._changed()

    def withhold(self, nodes: Iterable[NodeId]) -> None:
        """Never give these nodes (reservations keep them from the work being placed): those
        usable now are deducted, and releasing them later does not bring them back."""
        rack_of = self.state.nodes
        for n in nodes:
            if n in self.withheld:
                continue
            self.withheld.add(n)
            rack = rack_of[n].rack
            taken = self.taken.setdefault(rack, set())
            if n not in taken and (
                n in self.state.racks[rack].free or n in self.freed.get(rack, ())
            ):
                taken.add(n)
                self.usable[rack] -= 1
                self._dirty.add(rack)
        self._changed()

    def without(self, nodes: Iterable[NodeId]) -> Capacity:
        """This capacity when `nodes` is empty, else a copy that withholds them."""
        nodes = [n for n in nodes if n not in self.withheld]
        if not nodes:
            return self
        other = self.copy()
        other.withhold(nodes)
        return other

    def release(self, nodes: Iterable[NodeId]) -> None:
        """Count nodes of a job about to be preempted as usable (healthy, uncordoned ones,
        not withheld)."""
        for n in nodes:
            node = self.state.nodes[n]
            if node.health is not Health.HEALTHY or node.cordoned or n in self.withheld:
                continue
            if not self.state.racks[node.rack].in_service:
                continue
            self.freed.setdefault(node.rack, set()).add(n)
            self.usable[node.rack] += 1
            self._dirty.add(node.rack)
        self._changed()

    def copy(self) -> Capacity:
        """An independent copy, to try a plan without touching this one."""
        other = object.__new__(Capacity)
        other.state = self.state
        other.index = self.index
        other.spares = self.spares
        other.degraded = self.degraded
        other.usable = dict(self.usable)
        other.taken = {r: set(ns) for r, ns in self.taken.items()}
        other.freed = {r: set(ns) for r, ns in self.freed.items()}
        other.withheld = set(self.withheld)
        other._views = {}
        other._entry = self._entry
        other._base = self._base
        other._dirty = set(self._dirty)
        return other

    def hold(self, racks: Iterable[RackId]) -> None:
        """Hide racks from every later query of this cycle (a head-of-line reservation)."""
        for r in racks:
            self.usable[r] = min(self.usable[r], 0)
            self._dirty.add(r)
        self._changed()

    def _changed(self) -> None:
        self._views.clear()
        self._entry = None

    def view(self, exclude: frozenset[RackId] | set[RackId] = frozenset()) -> dict[RackId, int]:
        """Usable nodes per rack (never negative), with `exclude` seen as full."""
        return {r: (0 if r in exclude or u < 0 else u) for r, u in self.usable.items()}

    def cached_view(self, exclude: frozenset[RackId] | set[RackId] = frozenset()) -> View:
        """`view(exclude)` with its totals, built once until the usable counts change. Its
        `usable` must not be changed. The view with no exclusion is the last one patched for
        the racks changed since; one with exclusions is it patched for the excluded racks
        (O(racks changed), not O(racks))."""
        key = frozenset(exclude)
        got = self._views.get(key)
        if got is not None:
            return got
        if key:
            whole = self.cached_view()
            hidden = [r for r in key if r in whole.usable]
            got = whole.patched(dict.fromkeys(hidden, 0), hidden)
        else:
            entry, base = self._entry, self._base
            if entry is not None:
                got = entry.view
                if got is None:
                    got = entry.view = View(self.view(), self.index)
            elif base is not None:
                got = base.patched(self.usable, self._dirty)
            else:
                got = View(self.view(), self.index)
            self._base, self._dirty = got, set()
        self._views[key] = got
        return got


_Table = tuple[dict[RackId, int], frozenset[RackId]]


class _Entry:
    """A usable-per-rack table, what it was built from, and its view with no exclusion (made
    when first asked, patched with the table)."""

    __slots__ = ("index", "racks", "spares", "table", "view")

    def __init__(
        self, racks: Map[RackId, RackState], index: TopologyIndex, spares: int, table: _Table
    ) -> None:
        self.racks, self.index, self.spares, self.table = racks, index, spares, table
        self.view: View | None = None


_LAST: list[_Entry] = []
"""The last usable-per-rack tables built, with what each was built from: the scheduler, the
defrag and the borrowing capacity of one cycle all start from the same state, and the next
cycle's table is this one patched for the racks the events since changed."""
_KEPT = 4  # the table with spares kept and the one without (borrowing), and one back each


def _usable(state: ClusterState, index: TopologyIndex, spares: int) -> _Entry:
    """Free nodes less `spares` per rack (a failed rack: very negative), in index order, and
    the degraded racks; the same again while the racks' map is the same immutable object.

    A table for an earlier racks map of the same fold history is patched for the racks changed
    since (`projections._changes`): O(racks changed) plus a C-level dict copy, where a
    rebuild is a Python loop over every rack (2 ms of a 1,024-rack cycle)."""
    racks = state.racks
    mine = [e for e in _LAST if e.index is index and e.spares == spares]
    for e in mine:
        if e.racks is racks:
            return e
    bases = {id(e.racks): e for e in mine}
    path = _changes.since("racks", racks, lambda m: id(m) in bases) if bases else None
    if path is None:
        entry = _Entry(racks, index, spares, _rebuilt(racks, index, spares))
    else:
        base = bases[id(path[0])]
        changed = path[1]
        table = _patched(racks, spares, base.table, changed)  # type: ignore[arg-type]
        entry = _Entry(racks, index, spares, table)
        if base.view is not None:
            entry.view = base.view.patched(table[0], changed)  # type: ignore[arg-type]
    _LAST.insert(0, entry)
    del _LAST[_KEPT:]
    return entry


def _rebuilt(racks: Map[RackId, RackState], index: TopologyIndex, spares: int) -> _Table:
    failed, degraded, down = RackHealth.FAILED, RackHealth.DEGRADED, _DOWN
    ids = [r.id for r in index.racks]
    states = list(map(racks.__getitem__, ids))
    usable = {
        rid: (down if rs.health is failed else len(rs.free) - spares)
        for rid, rs in zip(ids, states, strict=True)
    }
    return usable, frozenset(rs.id for rs in states if rs.health is degraded)


def _patched(
    racks: Map[RackId, RackState], spares: int, base: _Table, changed: Iterable[RackId]
) -> _Table:
    """`base` with the entries of `changed` racks recomputed from `racks` (same key order)."""
    usable, degraded = dict(base[0]), set(base[1])
    for rid in changed:
        rs = racks[rid]
        usable[rid] = _DOWN if rs.health is RackHealth.FAILED else len(rs.free) - spares
        if rs.health is RackHealth.DEGRADED:
            degraded.add(rid)
        else:
            degraded.discard(rid)
    return usable, frozenset(degraded)


_DOWN = -(10**9)
"""A failed rack's room: no placement or release ever brings it above zero."""


def find_placement(
    capacity: Capacity,
    sizes: Sequence[int],
    *,
    exclude: frozenset[RackId] | set[RackId] = frozenset(),
    within: Iterable[RackId] | None = None,
) -> Placement | Unplaceable:
    """Place slices of `sizes` nodes, each inside one rack, close together in the fabric.

    Args:
        capacity: this cycle's usable nodes per rack.
        sizes: nodes per slice: full slices first, at most one smaller remainder last.
        exclude: racks this job may not use (reserved for another job).
        within: when given, only these racks are considered (a reservation the job holds).

    Returns:
        A `Placement`, or an `Unplaceable` saying `capacity` or `topology` and why.
    """
    index = capacity.index
    view: View | None = None
    if within is not None:
        allowed = set(within)
        usable = {r: (u if r in allowed else 0) for r, u in capacity.view(exclude).items()}
        hopeless = None
    else:
        view = capacity.cached_view(exclude)
        usable = view.usable
        hopeless = view.hopeless(sizes)
    degraded = [r for r in capacity.degraded if usable.get(r, 0) > 0]
    if hopeless is not None:
        return _counted(hopeless, degraded)
    if degraded:
        if view is not None:
            healthy_view = view.patched(dict.fromkeys(degraded, 0), degraded)
            healthy = healthy_view.usable
            first = choose_on_view(index, healthy_view, sizes)
        else:
            healthy = dict(usable)
            for r in degraded:
                healthy[r] = 0
            first = choose_racks(index, healthy, sizes)
        if not isinstance(first, Unplaceable):
            slices = _pick_nodes(capacity, first, sizes)
            return Placement(slices, tuple(first), _explain(capacity, healthy, first, sizes))
    racks = (
        choose_on_view(index, view, sizes)
        if view is not None
        else choose_racks(index, usable, sizes)
    )
    if isinstance(racks, Unplaceable):
        return _counted(racks, degraded)
    slices = _pick_nodes(capacity, racks, sizes)
    why = _explain(capacity, usable, racks, sizes)
    used = sorted({r for r in racks if r in capacity.degraded})
    if used:
        why += (
            f"; on degraded rack{'s' if len(used) > 1 else ''} {', '.join(used)} (an NVSwitch "
            "tray lost, less NVLink bandwidth): the healthy racks cannot hold it"
        )
    return Placement(slices, tuple(racks), why)


def _counted(verdict: Unplaceable, degraded: Sequence[RackId]) -> Unplaceable:
    """The verdict, saying which degraded racks it counted (when any had room)."""
    if not degraded:
        return verdict
    note = f"; counted degraded racks {', '.join(sorted(degraded))}"
    return replace(verdict, explanation=verdict.explanation + note)


def _pick_nodes(
    capacity: Capacity, racks: Sequence[RackId], sizes: Sequence[int]
) -> tuple[tuple[NodeId, ...], ...]:
    # A rack that takes several slices hands out consecutive runs of its usable nodes.
    per_rack: dict[RackId, int] = {}
    for r, size in zip(racks, sizes, strict=True):
        per_rack[r] = per_rack.get(r, 0) + size
    pools = {r: list(capacity.nodes(r, n)) for r, n in per_rack.items()}
    out = []
    for r, size in zip(racks, sizes, strict=True):
        out.append(tuple(pools[r][:size]))
        del pools[r][:size]
    return tuple(out)


def _explain(
    capacity: Capacity, usable: dict[RackId, int], racks: Sequence[RackId], sizes: Sequence[int]
) -> str:
    index = capacity.index
    distinct = list(dict.fromkeys(racks))
    pods = list(dict.fromkeys(index.pod_of(r) for r in distinct))
    if len(distinct) == 1:
        r = distinct[0]
        room = usable[r]
        rack = capacity.state.racks[r]
        kind = "empty" if len(rack.free) == rack.size else "partly used"
        return (
            f"{shape(sizes)} on rack {r} (best fit: {room} allocatable nodes, {kind} rack), "
            f"pod {pods[0]}"
        )
    where = f"pod {pods[0]}" if len(pods) == 1 else f"{len(pods)} pods ({', '.join(pods)})"
    return f"{shape(sizes)} on {len(distinct)} racks in {where}, best fit by rack"
