"""The capacity sample's sums over racks (usable nodes, fragmented nodes), patched for the racks
that changed since the last sample instead of recomputed over every rack.

A rack's share depends on its state (in service, size, free nodes), the simulator's count of
its failed nodes, and the settings (slice size, spares, rack-local slices). Between two
samples the fold logs which racks it changed (`projections._changes`) and the failed counts
are compared as item sets (C-level); only those racks are recomputed. Without a logged path
(a registration, more folds than the log keeps) or with other settings, every rack is.
Integer sums: the same totals whichever way they are reached (tests/sim/test_rack_sums.py).

Cost per sample: O(racks changed) plus a C-level comparison of the failed counts, where the
full sum is a Python loop over every rack (~4 ms at 1,024 racks).
"""

from __future__ import annotations

from collections.abc import Mapping

from immutables import Map

from rackplane.models import RackId
from rackplane.projections import ClusterState, _changes
from rackplane.projections.state import RackState

_Key = tuple[int, int, bool]


def rack_share(rack: RackState, down: int, key: _Key) -> tuple[int, int]:
    """One rack's (usable, fragmented) nodes for the capacity sample: usable is what the
    capacity model could give (healthy nodes less the spares, whole slices when slices are
    rack-local), fragmented the free room that is no whole slice."""
    if not rack.in_service:  # a degraded rack still runs work
        return 0, 0
    s, spares, local = key
    healthy = min(rack.size - down, rack.size - spares)
    room = len(rack.free) - spares
    if local:
        return s * (healthy // s), (room % s if room > 0 else 0)
    return max(0, healthy), 0


def rebuilt_sums(state: ClusterState, down: Mapping[RackId, int]) -> tuple[int, int]:
    """Usable and fragmented nodes over every rack: the reference the patched sums equal."""
    key = _key(state)
    usable = fragmented = 0
    for rack in state.racks.values():
        u, f = rack_share(rack, down.get(rack.id, 0), key)
        usable += u
        fragmented += f
    return usable, fragmented


def _key(state: ClusterState) -> _Key:
    st = state.settings
    return st.slice_size, st.spares_per_rack, st.rack_local_slices


class RackSums:
    """The sums of the last sample, and what they were taken from, to patch the next."""

    def __init__(self) -> None:
        self.racks: Map[RackId, RackState] | None = None
        self.down: dict[RackId, int] = {}
        self.key: _Key | None = None
        self.shares: dict[RackId, tuple[int, int]] = {}
        self.usable = 0
        self.fragmented = 0

    def sums(self, state: ClusterState, down: Mapping[RackId, int]) -> tuple[int, int]:
        """(usable, fragmented) nodes over every rack, as `rebuilt_sums` gives them."""
        key, racks, seen = _key(state), state.racks, self.racks
        path = None
        if seen is not None and key == self.key:
            path = _changes.since("racks", racks, lambda m: m is seen)
        if path is None:
            self._rebuild(state, down, key)
        else:
            changed = set(path[1])
            changed.update(r for r, _ in down.items() ^ self.down.items())
            shares = self.shares
            for r in changed:
                if r not in shares:  # not a rack of the topology
                    continue
                old = shares[r]
                new = shares[r] = rack_share(racks[r], down.get(r, 0), key)
                self.usable += new[0] - old[0]
                self.fragmented += new[1] - old[1]
        self.racks, self.down, self.key = racks, dict(down), key
        return self.usable, self.fragmented

    def _rebuild(self, state: ClusterState, down: Mapping[RackId, int], key: _Key) -> None:
        self.shares = {
            rack.id: rack_share(rack, down.get(rack.id, 0), key) for rack in state.racks.values()
        }
        self.usable = sum(u for u, _ in self.shares.values())
        self.fragmented = sum(f for _, f in self.shares.values())
