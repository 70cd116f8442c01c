"""Invariants of the cluster state, checked after every step of the property tests."""

from __future__ import annotations

from collections.abc import Sequence

from rackplane.models import Event, Health, JobBlocked, JobPlaced, SliceMigrated
from rackplane.policies.quotas import QueueBook
from rackplane.projections import ClusterState


def check_invariants(state: ClusterState, events: Sequence[Event] = ()) -> None:
    """Raise AssertionError when the state breaks a rule of the cluster."""
    holders: dict[str, tuple[str, int]] = {}
    for job in state.jobs.values():
        if not job.status.holds_nodes:
            assert job.slices == (), f"{job.id} is {job.status} but holds slices"
        for s in job.slices:
            # A slice never spans racks (the naive baseline switches this rule off).
            if state.settings.rack_local_slices:
                assert len(s.racks) == 1, f"{job.id} slice {s.index} spans {s.racks}"
            assert {state.nodes[n].rack for n in s.nodes} == set(s.racks)
            for n in s.nodes:
                # No node in two slices.
                assert n not in holders, f"{n} in {holders[n]} and {(job.id, s.index)}"
                holders[n] = (job.id, s.index)
    for node in state.nodes.values():
        if node.job is None:
            assert node.id not in holders, f"{node.id} held by {holders[node.id]} but free"
        else:
            assert holders.get(node.id) == (node.job, node.slice), f"{node.id} disagrees"
    for rack in state.racks.values():
        want = frozenset(
            n.id
            for n in state.nodes.values()
            if n.rack == rack.id and n.job is None and n.health is Health.HEALTHY and not n.cordoned
        )
        assert rack.free == want, f"free index of {rack.id} is stale"
    # What each queue holds is what its jobs hold; a placement never takes a queue past its
    # nominal + borrowing limit.
    held: dict[str, int] = {}
    for job in state.jobs.values():
        if job.spec.queue is not None and job.status.holds_nodes:
            held[job.spec.queue] = held.get(job.spec.queue, 0) + len(job.nodes)
    folded = {q: u.nodes for q, u in state.queue_usage.items() if u.nodes}
    assert folded == held, f"queue usage {folded} but the jobs hold {held}"
    book = QueueBook.of(state)
    for e in events:
        if book is not None and isinstance(e, JobPlaced):
            queue = state.jobs[e.job].spec.queue if e.job in state.jobs else None
            if queue is not None and book.leaf(queue):
                for x in book.path(queue):
                    limit = book.specs[x].borrowing_limit
                    if limit is not None:
                        assert book.held[x] <= book.nominal[x] + limit, f"{x} over its limit"
    # Spares are used only by swaps (or lent to evictable work): right after a placement or a
    # migration (one per command), every rack it took nodes from still has its reserve.
    for e in events:
        touched: set[str] = set()
        if isinstance(e, JobPlaced) and not e.borrowing:
            touched = {r for s in e.slices for r in s.racks}
        elif isinstance(e, SliceMigrated) and e.to_rack is not None:
            touched = {e.to_rack}
        for r in touched:
            left = len(state.racks[r].available)
            assert left >= state.settings.spares_per_rack, f"{e.type} left {r} with {left} free"


def check_blocked_reasons(state: ClusterState, events: Sequence[Event]) -> None:
    """A block's reason agrees with its numbers, and no queued job waits without one."""
    for e in events:
        if isinstance(e, JobBlocked):
            if e.reason == "capacity":
                assert e.allocatable_nodes < e.requested_nodes, e
            else:
                assert e.allocatable_nodes >= e.requested_nodes, e
                assert e.placeable_slices < len(e.slice_sizes), e
    for job in state.queued():
        assert job.blocked is not None, f"{job.id} waits in the queue with no reason given"
