"""Steps 2-6 of placement on counts alone (`placement` module docstring): which rack takes
each slice, or why none does. Pure.

Two ways to the same answer:

- `choose_racks(index, usable, sizes)` reads a plain table of room per rack: O(racks) per
  job. Any caller may use it (defrag validates candidate plans with it); it is the
  reference the fast way is tested against.
- `choose_on_view(index, view, sizes)` reads a `View`, which indexes the same table by room
  (rack positions per room value, sorted) and counts slices per pod for each slice size it
  was asked. A view is patched for the racks that changed (`View.patched`) instead of being
  rebuilt, across scheduling cycles and within one, so a placement costs O(room values)
  when one rack takes the whole job and O(pods + the chosen pods' racks) otherwise, plus
  O(racks changed x sizes asked) to patch. Same tie-breaks: tightest room, then topology
  order (tests/policies/test_rack_choice.py checks both ways agree on random tables).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rackplane.models import BlockReason, PodId, RackId, TopologyIndex


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """Why a job does not fit now, with the numbers behind the verdict."""

    reason: BlockReason
    allocatable_nodes: int
    placeable_slices: int
    explanation: str


class View:
    """Usable nodes per rack (never negative) and what `choose_on_view` reads of it: the
    total, the largest room, per slice size how many slices fit in all and per pod, and the
    racks by room (each counted when first asked, then patched with the view).

    Args:
        usable: room per rack, in topology order; not changed afterwards.
        index: the topology the racks belong to.
    """

    __slots__ = ("_pods", "_rooms", "fits", "index", "largest", "total", "usable")

    def __init__(self, usable: dict[RackId, int], index: TopologyIndex) -> None:
        self.usable = usable
        self.index = index
        self.total = sum(usable.values())
        self.largest = max(usable.values(), default=0)
        self.fits: dict[int, int] = {}
        self._pods: dict[int, dict[PodId, int]] = {}
        self._rooms: dict[int, list[int]] | None = None

    def slices(self, size: int) -> int:
        """Slices of `size` nodes the racks fit, all together."""
        n = self.fits.get(size)
        if n is None:
            n = self.fits[size] = sum(u // size for u in self.usable.values() if u >= size)
        return n

    def pod_slices(self, size: int) -> dict[PodId, int]:
        """Slices of `size` nodes each pod fits (every pod of the index, 0 included)."""
        got = self._pods.get(size)
        if got is None:
            got = dict.fromkeys(self.index.pod_racks, 0)
            pod_of = self.index.pod_of
            for r, u in self.usable.items():
                if u >= size:
                    got[pod_of(r)] += u // size
            self._pods[size] = got
        return got

    def rooms(self) -> dict[int, list[int]]:
        """Per room value above 0, the positions (`rack_order`) of the racks with that room,
        ascending; no empty lists."""
        if self._rooms is None:
            order = self.index.rack_order
            rooms: dict[int, list[int]] = {}
            for r, u in self.usable.items():
                if u > 0:
                    rooms.setdefault(u, []).append(order[r])
            for positions in rooms.values():
                positions.sort()
            self._rooms = rooms
        return self._rooms

    def tightest(self, room: int) -> RackId | None:
        """The rack with the least room of at least `room`, first in topology order."""
        rooms = self.rooms()
        for v in range(room, self.largest + 1):
            positions = rooms.get(v)
            if positions:
                return self.index.racks[positions[0]].id
        return None

    def patched(self, table: Mapping[RackId, int], changed: Iterable[RackId]) -> View:
        """This view of an earlier table, for `table`, which differs at most at `changed`
        racks: the same numbers as `View` of `table`'s view, in O(changed x sizes asked)
        plus C-level copies of the per-rack and per-pod tables."""
        usable, fits = dict(self.usable), dict(self.fits)
        pods = {size: dict(p) for size, p in self._pods.items()}
        rooms = None if self._rooms is None else dict(self._rooms)
        copied: set[int] = set()
        order, pod_of = self.index.rack_order, self.index.pod_of
        total, largest, stale = self.total, self.largest, False
        for r in changed:
            old, new = usable[r], max(table[r], 0)
            if old == new:
                continue
            usable[r] = new
            total += new - old
            for size in fits:
                fits[size] += new // size - old // size
            for size, per_pod in pods.items():
                per_pod[pod_of(r)] += new // size - old // size
            if rooms is not None:
                _move(rooms, copied, order[r], old, new)
            if new > largest:
                largest = new
            elif old == largest:
                stale = True  # the largest may have shrunk: take the maximum again
        out = object.__new__(View)
        out.usable, out.index, out.fits, out._pods, out._rooms = (
            usable,
            self.index,
            fits,
            pods,
            rooms,
        )
        out.total = total
        if stale:
            # The rooms, when counted, hold every room above 0 as a key (no empty lists): the
            # largest is their maximum, a few keys, not a pass over every rack.
            largest = (
                max(rooms, default=0) if rooms is not None else max(usable.values(), default=0)
            )
        out.largest = largest
        return out

    def hopeless(self, sizes: Sequence[int]) -> Unplaceable | None:
        """The verdict `choose_racks` reaches for `sizes`, when the totals alone give it: too
        few nodes in all, or too few rack-shaped slices (the same numbers and words)."""
        need, s = sum(sizes), sizes[0]
        k = sum(1 for x in sizes if x == s)
        placeable = min(k, self.slices(s))
        if self.total < need:
            return _too_few(sizes, self.total, placeable)
        if placeable < k:
            return topology_block(sizes, self.total, placeable, self.largest)
        return None


def _move(rooms: dict[int, list[int]], copied: set[int], position: int, old: int, new: int) -> None:
    """Move a rack's position from room `old` to room `new` (copying each list once: the
    lists are shared with the view patched from)."""
    if old > 0:
        positions = rooms[old]
        if old not in copied:
            positions = rooms[old] = list(positions)
            copied.add(old)
        del positions[bisect_left(positions, position)]
        if not positions:
            del rooms[old]
            copied.discard(old)
    if new > 0:
        positions = rooms.get(new, [])
        if new not in copied:
            positions = rooms[new] = list(positions)
            copied.add(new)
        insort(positions, position)


def choose_racks(
    index: TopologyIndex, usable: dict[RackId, int], sizes: Sequence[int]
) -> list[RackId] | Unplaceable:
    """Steps 2-6 on counts alone: the rack of each slice, or why none. `usable` is never
    negative (see `Capacity.view`). Cheap enough to validate many candidate plans with."""
    need = sum(sizes)
    total = sum(usable.values())
    s = sizes[0]
    k = sum(1 for x in sizes if x == s)
    fits = {r: u // s for r, u in usable.items() if u >= s}
    placeable = min(k, sum(fits.values()))
    if total < need:
        return _too_few(sizes, total, placeable)
    chosen = None
    if sum(fits.values()) >= k:
        order = index.rack_order
        # One rack that takes every slice: the tightest.
        whole = [r for r, c in fits.items() if c >= k]
        if whole:
            chosen = [min(whole, key=lambda r: (usable[r], order[r]))] * k
        else:
            pod_fits: dict[PodId, int] = {}
            pod_of = index.pod_of
            for r, c in fits.items():
                p = pod_of(r)
                pod_fits[p] = pod_fits.get(p, 0) + c
            chosen = _in_pods(index, usable, pod_fits, s, k)
    return _with_rest(index, usable, sizes, chosen, total, placeable, None)


def choose_on_view(
    index: TopologyIndex, view: View, sizes: Sequence[int]
) -> list[RackId] | Unplaceable:
    """`choose_racks(index, view.usable, sizes)`, read from the view's indexes."""
    usable, total = view.usable, view.total
    s = sizes[0]
    k = sum(1 for x in sizes if x == s)
    placeable = min(k, view.slices(s))
    if total < sum(sizes):
        return _too_few(sizes, total, placeable)
    chosen = None
    if view.slices(s) >= k:
        best = view.tightest(s * k)  # u // s >= k exactly when u >= s * k
        if best is not None:
            chosen = [best] * k
        else:
            pod_fits = {p: c for p, c in view.pod_slices(s).items() if c > 0}
            chosen = _in_pods(index, usable, pod_fits, s, k)
    return _with_rest(index, usable, sizes, chosen, total, placeable, view.largest)


def _in_pods(
    index: TopologyIndex, usable: Mapping[RackId, int], pod_fits: dict[PodId, int], s: int, k: int
) -> list[RackId] | None:
    """Racks for k slices of size s no one rack holds (a rack repeated when it takes several):
    the best-fit pod, else pods spanning one superpod or more; racks by best fit inside."""
    order = index.rack_order
    pod_rank = {p: i for i, p in enumerate(index.pod_racks)}
    pods_fit = [p for p, c in pod_fits.items() if c >= k]
    if pods_fit:
        pods = [min(pods_fit, key=lambda p: (pod_fits[p], pod_rank[p]))]
    else:
        pods = _spanning_pods(index, pod_fits, pod_rank, k)
    chosen: list[RackId] = []
    for p in pods:
        racks = sorted(
            (r for r in index.pod_racks[p] if usable.get(r, 0) >= s),
            key=lambda r: (usable[r], order[r]),
        )
        for r in racks:
            take = min(usable[r] // s, k - len(chosen))
            chosen.extend([r] * take)
            if len(chosen) == k:
                return chosen
    return None  # unreachable: the pods above hold at least k slices


def _with_rest(
    index: TopologyIndex,
    usable: Mapping[RackId, int],
    sizes: Sequence[int],
    chosen: list[RackId] | None,
    total: int,
    placeable: int,
    largest: int | None,
) -> list[RackId] | Unplaceable:
    """The full slices' racks and the remainder's (step 6), or the topology verdict."""
    if largest is None:
        largest = max(usable.values(), default=0)
    if chosen is None:
        return topology_block(sizes, total, placeable, largest)
    s = sizes[0]
    rest = sizes[len(chosen) :]
    racks = list(chosen)
    if not rest:
        return racks
    left = dict(usable)
    for rack in chosen:
        left[rack] -= s
    for size in rest:
        target = _nearest_best_fit(index, left, size, anchor=racks[0])
        if target is None:
            return topology_block(sizes, total, placeable, largest)
        left[target] -= size
        racks.append(target)
    return racks


def _spanning_pods(
    index: TopologyIndex, pod_fits: dict[PodId, int], pod_rank: dict[PodId, int], k: int
) -> list[PodId]:
    """Pods for a job no single pod can hold: one superpod if it can, largest pods first."""
    superpod_of = index.superpod_of
    groups: dict[PodId | None, int] = {}
    for p, c in pod_fits.items():
        groups[superpod_of[p]] = groups.get(superpod_of[p], 0) + c
    fitting = [g for g, c in groups.items() if g is not None and c >= k]
    if fitting:
        group: PodId | None = min(fitting, key=lambda g: (groups[g], str(g)))
        candidates = [p for p in pod_fits if superpod_of[p] == group]
        return sorted(candidates, key=lambda p: (-pod_fits[p], pod_rank[p]))
    # Span superpods: the largest superpods first, largest pods first inside each.
    group_rank = {g: -c for g, c in groups.items()}
    return sorted(pod_fits, key=lambda p: (group_rank[superpod_of[p]], -pod_fits[p], pod_rank[p]))


def _nearest_best_fit(
    index: TopologyIndex, usable: dict[RackId, int], size: int, anchor: RackId | None
) -> RackId | None:
    order = index.rack_order
    candidates = [r for r, u in usable.items() if u >= size]
    if not candidates:
        return None
    if anchor is None:
        return min(candidates, key=lambda r: (usable[r], order[r]))
    return min(candidates, key=lambda r: (index.hops(anchor, r), usable[r], order[r]))


def _too_few(sizes: Sequence[int], total: int, placeable: int) -> Unplaceable:
    return Unplaceable(
        "capacity",
        total,
        placeable,
        f"needs {sum(sizes)} nodes ({shape(sizes)}); {total} allocatable cluster-wide",
    )


def topology_block(sizes: Sequence[int], total: int, placeable: int, largest: int) -> Unplaceable:
    """Enough nodes in total, not in rack-shaped pieces."""
    return Unplaceable(
        "topology",
        total,
        placeable,
        f"needs {shape(sizes)}, each inside one rack; {total} nodes allocatable "
        f"cluster-wide but only {placeable} of {len(sizes)} slices fit (largest rack room: "
        f"{largest})",
    )


def shape(sizes: Sequence[int]) -> str:
    """`2 slices of 18`, or `slices of 18+18+4`."""
    if len(set(sizes)) == 1:
        return f"{len(sizes)} slice{'s' if len(sizes) > 1 else ''} of {sizes[0]}"
    return "slices of " + "+".join(map(str, sizes))
