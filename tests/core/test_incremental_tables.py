"""Tables patched for what the fold changed (`projections._changes`) equal the same tables
rebuilt from scratch, after any sequence of commands: placement's usable nodes per rack
(with and without spares) and its view with no exclusion, the queued jobs in queue order,
the time limits' ends, the defrag's out-of-service nodes by rack and its victims, looked at
after random runs of steps (so a look patches across one event or many)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from rackplane.models import BlockJob, JobKind, JobStatus, NodeId, RackId, SubmitJob
from rackplane.policies import _checks, _defrag_victims, placement, time_limits
from rackplane.projections import ClusterState, _changes
from rackplane.projections.state import JobState, _holding_of
from tests.builders import cmd, job
from tests.core.test_properties import ClusterMachine


class PatchedTablesMachine(ClusterMachine):
    """The property machine's random commands, with jobs that have time limits, and looks
    at the patched tables between them."""

    @rule(nodes=st.integers(1, 8), size=st.integers(1, 6), minutes=st.integers(1, 30))
    def submit_limited(self, nodes: int, size: int, minutes: int) -> None:
        job_id = f"j{len(self.jobs)}"
        self.jobs.append(job_id)
        spec = job(
            job_id,
            nodes,
            slice_size=size,
            kind=JobKind.MANAGED,
            time_limit=timedelta(minutes=minutes),
        )
        self._send(cmd(SubmitJob, job=spec))

    @rule(data=st.data(), reason=st.sampled_from(["capacity", "topology", "quota"]))
    def block(self, data: st.DataObject, reason: str) -> None:
        """A queued job blocked (it stays queued, its record changes): read from the jobs
        map, not through the tables the looks patch."""
        queued = sorted(j.id for j in self.h.state.jobs.values() if j.status is JobStatus.QUEUED)
        if queued:
            job_id = data.draw(st.sampled_from(queued))
            self._send(
                cmd(BlockJob, job=job_id, reason=reason, allocatable_nodes=0, placeable_slices=0)
            )

    @rule()
    def look(self) -> None:
        state = self.h.state
        assert state.index is not None
        for spares in {state.settings.spares_per_rack, 0}:
            patched = placement._usable(state, state.index, spares).table
            rebuilt = placement._rebuilt(state.racks, state.index, spares)
            assert list(patched[0].items()) == list(rebuilt[0].items())  # order too
            assert patched[1] == rebuilt[1]
            # The view with no exclusion, shared across cycles, as one built anew.
            cap = placement.Capacity(state, keep_spares=bool(spares))
            view, fresh = cap.cached_view(), placement.View(cap.view(), state.index)
            _same_views(view, fresh)
            # Within a cycle: a placement and a held rack patch the view, not rebuild it.
            taken = next((r for r, u in cap.usable.items() if u > 0), None)
            if taken is not None:
                cap.take(placement._pick_nodes(cap, [taken], [1])[0])
                cap.hold([next(iter(cap.usable))])
                _same_views(cap.cached_view(), placement.View(cap.view(), state.index))
                hidden = frozenset(list(cap.usable)[1:3])
                _same_views(cap.cached_view(hidden), placement.View(cap.view(hidden), state.index))
        assert state.queued() == sorted(
            (j for j in state.jobs.values() if j.status is JobStatus.QUEUED),
            key=lambda j: j.queue_key,
        )
        # Jobs holding nodes by queue (reclaim's pools), patched, as grouped anew.
        grouped: dict[str | None, dict[str, JobState]] = {}
        for j in state.jobs.values():
            if j.status.holds_nodes:
                grouped.setdefault(j.spec.queue, {})[j.id] = j
        holding = {q: held for q, held in _holding_of(state.jobs).items() if held}
        assert holding == grouped
        ends = time_limits._ends(state)
        expected = {
            j.id: j.started_at + j.spec.time_limit
            for j in state.jobs.values()
            if j.status is JobStatus.RUNNING
            and j.spec.time_limit is not None
            and j.started_at is not None
        }
        assert ends.table == expected
        assert ends.earliest == min(expected.values(), default=None)
        # Out-of-service nodes by rack, patched from the last look's table (as a defrag plan
        # patches the last plan's).
        down = _defrag_victims.out_of_service(state)
        assert down == _defrag_victims._down_rebuilt(state)
        assert down == _out_of_service_by_definition(state)
        # The defrag's candidates and what they free, from pools patched since the last look,
        # as counted from a pool built anew.
        if state.at is not None:
            for priority in (0, 10):
                got = _defrag_victims.count_victims(state, "j0", priority, state.at, frozenset())
                patched = list(_defrag_victims._POOLS)
                _defrag_victims._POOLS.clear()
                fresh = _defrag_victims.count_victims(state, "j0", priority, state.at, frozenset())
                _defrag_victims._POOLS[:] = patched  # the next look patches these again
                assert sorted(j.id for j in got.pool) == sorted(j.id for j in fresh.pool)
                assert (got.by_id, got.lost, got.cost, got.demand) == (
                    fresh.by_id,
                    fresh.lost,
                    fresh.cost,
                    fresh.demand,
                )
                assert (got.freed_in, got.in_rack, got.freed_total) == (
                    fresh.freed_in,
                    fresh.in_rack,
                    fresh.freed_total,
                )
        keep = state.settings.spares_per_rack
        sizes = [r.size for r in state.racks.values()]
        assert _checks.rack_sizes(state, keep) == (
            max(sizes),
            max(s - keep for s in sizes),
            sum(max(0, s - keep) for s in sizes),
        )

    def teardown(self) -> None:
        if hasattr(self, "h"):
            self.look()
        super().teardown()


def _same_views(view: placement.View, fresh: placement.View) -> None:
    """A patched view says what one built anew says: per rack, totals, slices in all and
    per pod, racks by room. Asking the patched view first fills its caches for the next
    patch to carry."""
    assert list(view.usable.items()) == list(fresh.usable.items())  # order too
    assert (view.total, view.largest) == (fresh.total, fresh.largest)
    assert [view.slices(k) for k in range(1, 7)] == [fresh.slices(k) for k in range(1, 7)]
    assert [view.pod_slices(k) for k in range(1, 7)] == [fresh.pod_slices(k) for k in range(1, 7)]
    assert view.rooms() == fresh.rooms()


def _out_of_service_by_definition(state: ClusterState) -> dict[RackId, tuple[NodeId, ...]]:
    assert state.index is not None
    table = {}
    for rack in state.index.racks:
        per = tuple(n for n in rack.nodes if not state.nodes[n].in_service)
        if per:
            table[rack.id] = per
    return table


PatchedTablesMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=60, deadline=None
)
TestPatchedTables = PatchedTablesMachine.TestCase


def test_a_map_the_fold_did_not_make_has_no_path() -> None:
    """A map with no logged history (a registration, a snapshot) is rebuilt, not patched."""
    assert _changes.since("racks", object(), lambda m: False) is None


def test_a_rack_health_change_alone_is_patched() -> None:
    """A rack that fails, degrades and recovers with no job on it changes no node: the fold
    logs it by its health, and the patched table follows."""
    from rackplane.models import RackHealth, ReportRackHealth
    from tests.builders import Harness, register
    from tests.core.test_properties import RACKS

    h = Harness().given(register(*RACKS, spares_per_rack=1))
    assert h.state.index is not None
    placement._usable(h.state, h.state.index, 1)  # the table the next ones patch
    seen = []
    for health in (RackHealth.FAILED, RackHealth.HEALTHY, RackHealth.DEGRADED, RackHealth.HEALTHY):
        h.when(cmd(ReportRackHealth, rack="r01", health=health))
        s = h.state
        assert s.index is not None
        seen.append(placement._usable(s, s.index, 1).table)
        assert seen[-1] == placement._rebuilt(s.racks, s.index, 1)
    assert [t[0]["r01"] for t in seen] == [-(10**9), 5, 5, 5]
    assert [sorted(t[1]) for t in seen] == [[], [], ["r01"], []]
