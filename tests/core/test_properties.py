"""Property tests: invariants hold after any sequence of commands; replay is deterministic.

The cluster (spares_per_rack=1):

    pod p1:  r01 [n01 .. n06]   r02 [n01 .. n06]
    pod p2:  r03 [n01 .. n06]
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from rackplane.models import (
    CancelJob,
    Command,
    CommandIgnored,
    CommandPosition,
    CommandRejected,
    CompleteJob,
    CordonNode,
    DegradeSlice,
    FailJob,
    Health,
    JobKind,
    MigrateSlice,
    PlaceJob,
    PreemptJobs,
    RackHealth,
    RepairNode,
    ReportNodeHealth,
    ReportRackHealth,
    SliceAssignment,
    StartJob,
    SubmitJob,
    SwapNode,
    UncordonNode,
)
from rackplane.policies import decide
from rackplane.projections import ClusterState, EventGap, evolve, fold, initial_state
from rackplane.projections.state import SeenCommands
from tests.builders import CLUSTER, Harness, cmd, job, rack, register
from tests.invariants import check_invariants

RACKS = (rack("r01", 6, pod="p1"), rack("r02", 6, pod="p1"), rack("r03", 6, pod="p2"))
NODES = [n for r in RACKS for n in r.nodes]


def _sensible_nodes(state: ClusterState, size: int, offset: int) -> tuple[str, ...] | None:
    """Nodes of one rack that placement may use (above the spares), or None."""
    racks = list(state.racks.values())
    keep = state.settings.spares_per_rack
    for i in range(len(racks)):
        r = racks[(i + offset) % len(racks)]
        free = sorted(r.available)
        if len(free) - size >= keep:
            return tuple(free[:size])
    return None


class ClusterMachine(RuleBasedStateMachine):
    """Random operators, runtimes and policies hammering one controller."""

    @initialize()
    def register_cluster(self) -> None:
        self.h = Harness().given(register(*RACKS, spares_per_rack=1))
        self.sent: list[tuple[Command, CommandPosition]] = []
        self.jobs: list[str] = []
        self.offsets = [100, 0]  # next offset of commands partitions 0 and 1

    def _send(self, command: Command) -> None:
        before = self.h.state
        partition = len(self.sent) % 2  # the cluster's commands moved partition once, say
        position = CommandPosition(partition, self.offsets[partition])
        self.offsets[partition] += 1 + len(self.sent) % 3  # other clusters' commands between
        events = self.h.when(command, position)
        self.sent.append((command, position))
        assert {(e.command_partition, e.command_offset) for e in events} == {position}
        # Every new command leaves at least one event; a refusal or a no-op leaves exactly one
        # and changes nothing else.
        assert events
        if isinstance(events[0], CommandRejected | CommandIgnored):
            assert len(events) == 1
            assert (self.h.state.nodes, self.h.state.jobs, self.h.state.racks) == (
                before.nodes,
                before.jobs,
                before.racks,
            )
        check_invariants(self.h.state, events)

    def _job(self, data: st.DataObject) -> str:
        """Mostly a live job (so commands have something to act on), sometimes any job."""
        live = sorted(self.h.state.jobs)
        pool = live if live and data.draw(st.integers(0, 9)) else self.jobs
        return data.draw(st.sampled_from(pool)) if pool else "nope"

    @rule(
        nodes=st.integers(1, 10),
        size=st.integers(1, 6),
        kind=st.sampled_from(list(JobKind)),
        degradable=st.booleans(),
    )
    def submit(self, nodes: int, size: int, kind: JobKind, degradable: bool) -> None:
        job_id = f"j{len(self.jobs)}"
        self.jobs.append(job_id)
        floor = max(1, size - 2) if degradable else None
        spec = job(
            job_id,
            nodes,
            slice_size=size,
            kind=kind,
            min_nodes_per_slice=floor,
            checkpoint_interval=timedelta(minutes=20),
        )
        self._send(cmd(SubmitJob, job=spec))

    @rule(data=st.data())
    def place_sensibly(self, data: st.DataObject) -> None:
        state = self.h.state
        queued = [j.id for j in state.queued()]
        if not queued:
            return
        job_id = data.draw(st.sampled_from(queued))
        slices = []
        taken: set[str] = set()
        for i, size in enumerate(state.jobs[job_id].spec.slice_sizes):
            trimmed = replace(
                state,
                racks=state.racks.update(
                    {k: r._replace(free=r.free - taken) for k, r in state.racks.items()}
                ),
            )
            chosen = _sensible_nodes(trimmed, size, offset=i)
            if chosen is None:
                return
            taken.update(chosen)
            slices.append(SliceAssignment(nodes=chosen))
        self._send(cmd(PlaceJob, job=job_id, slices=tuple(slices)))

    @rule(nodes=st.integers(1, 8), size=st.integers(2, 5), data=st.data())
    def submit_and_place(self, nodes: int, size: int, data: st.DataObject) -> None:
        self.submit(nodes, size, JobKind.MANAGED, data.draw(st.booleans()))
        self.place_sensibly(data)

    @rule(data=st.data())
    def place_anywhere(self, data: st.DataObject) -> None:
        job_id = self._job(data)
        spec = self.h.state.jobs[job_id].spec if job_id in self.h.state.jobs else None
        sizes = spec.slice_sizes if spec else (1,)
        picked = data.draw(st.permutations(NODES))
        slices, at = [], 0
        for size in sizes:
            slices.append(SliceAssignment(nodes=tuple(picked[at : at + size]) or (NODES[0],)))
            at += size
        self._send(cmd(PlaceJob, job=job_id, slices=tuple(slices)))

    @rule(data=st.data(), which=st.sampled_from([StartJob, CompleteJob, FailJob, CancelJob]))
    def lifecycle(self, data: st.DataObject, which: type[Any]) -> None:
        self._send(cmd(which, job=self._job(data)))

    @rule(node=st.sampled_from(NODES), what=st.integers(0, 5))
    def node_event(self, node: str, what: int) -> None:
        """Health reports, repairs and cordons, as GPU Manager and operators send them."""
        health = [Health.FAILED, Health.DEGRADED, Health.HEALTHY][what % 3]
        options: list[Command] = [
            cmd(ReportNodeHealth, node=node, health=health, cause="test"),
            cmd(ReportNodeHealth, node=node, health=health, cause="test"),
            cmd(RepairNode, node=node),
            cmd(RepairNode, node=node),
            cmd(CordonNode, node=node),
            cmd(UncordonNode, node=node),
        ]
        self._send(options[what])

    @rule(
        r=st.sampled_from(RACKS),
        health=st.sampled_from([RackHealth.FAILED, RackHealth.DEGRADED] + [RackHealth.HEALTHY] * 3),
    )
    def rack_health(self, r: Any, health: RackHealth) -> None:
        self._send(cmd(ReportRackHealth, rack=r.id, health=health))

    @rule(data=st.data())
    def swap(self, data: st.DataObject) -> None:
        job_id = self._job(data)
        j = self.h.state.jobs.get(job_id)
        if j is None or not j.slices:
            return
        s = data.draw(st.sampled_from(j.slices))
        old = data.draw(st.sampled_from(s.nodes))
        same_rack = sorted(self.h.state.racks[s.racks[0]].available)
        pool = same_rack if same_rack and data.draw(st.integers(0, 4)) else NODES
        new = data.draw(st.sampled_from(pool))
        self._send(cmd(SwapNode, job=job_id, slice=s.index, old_node=old, new_node=new))

    @rule(data=st.data())
    def migrate(self, data: st.DataObject) -> None:
        job_id = self._job(data)
        j = self.h.state.jobs.get(job_id)
        if j is None or not j.slices:
            return
        s = data.draw(st.sampled_from(j.slices))
        target = _sensible_nodes(self.h.state, s.size, data.draw(st.integers(0, 2)))
        if target is not None:
            self._send(cmd(MigrateSlice, job=job_id, slice=s.index, nodes=target))

    @rule(data=st.data())
    def degrade(self, data: st.DataObject) -> None:
        job_id = self._job(data)
        j = self.h.state.jobs.get(job_id)
        if j is None or not j.slices:
            return
        s = data.draw(st.sampled_from(j.slices))
        k = data.draw(st.integers(1, len(s.nodes)))
        self._send(cmd(DegradeSlice, job=job_id, slice=s.index, remove=s.nodes[:k]))

    @rule(data=st.data(), consent=st.booleans())
    def preempt(self, data: st.DataObject, consent: bool) -> None:
        if not self.jobs:
            return
        victims = [self._job(data) for _ in range(data.draw(st.integers(1, 3)))]
        self._send(cmd(PreemptJobs, jobs=tuple(victims), allow_interactive=consent))

    @rule(data=st.data())
    def redeliver(self, data: st.DataObject) -> None:
        if self.sent:
            again, position = data.draw(st.sampled_from(self.sent))
            assert decide(self.h.state, again, now=self.h.now) == []
            # However old: with its id long gone from the window, its position still tells.
            forgot = replace(self.h.state, seen=SeenCommands())
            assert decide(forgot, again, now=self.h.now, position=position) == []

    @invariant()
    def seq_is_gapless(self) -> None:
        if hasattr(self, "h"):
            assert [e.seq for e in self.h.log] == list(range(1, len(self.h.log) + 1))

    def teardown(self) -> None:
        if hasattr(self, "h"):
            # Replaying the log rebuilds the same state, and replaying it twice changes nothing.
            once = fold(initial_state(CLUSTER), self.h.log)
            assert once == self.h.state
            assert fold(once, self.h.log) == once
            # `fold` takes runs of events with one builder: any split gives the same state,
            # and equals `evolve` event by event.
            k = len(self.h.log) // 3
            head = fold(initial_state(CLUSTER), self.h.log[:k])
            assert fold(head, self.h.log[k:]) == once
            by_one = initial_state(CLUSTER)
            for e in self.h.log:
                by_one = evolve(by_one, e)
            assert by_one == once
            # The same with a window of three command ids: the generations of ids seen turn
            # over inside runs of events too.
            small = replace(initial_state(CLUSTER), seen=SeenCommands(window=3))
            by_one = small
            for e in self.h.log:
                by_one = evolve(by_one, e)
            assert fold(small, self.h.log) == by_one
            assert fold(fold(small, self.h.log[:k]), self.h.log[k:]) == by_one


ClusterMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=50, deadline=None)
TestClusterInvariants = ClusterMachine.TestCase


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=8))
def test_replaying_the_same_events_twice_gives_the_same_state(sizes: list[int]) -> None:
    h = Harness().given(register(*RACKS, spares_per_rack=0))
    for i, size in enumerate(sizes):
        h.when(cmd(SubmitJob, job=job(f"j{i}", size, slice_size=6)))
        free = sorted(h.state.racks[RACKS[i % 3].id].available)[:size]
        if len(free) == size:
            h.when(cmd(PlaceJob, job=f"j{i}", slices=(SliceAssignment(nodes=tuple(free)),)))
    a = fold(initial_state(CLUSTER), h.log)
    b = fold(initial_state(CLUSTER), h.log)
    assert a == b == h.state
    assert fold(a, h.log) == a


def test_an_event_that_skips_a_seq_is_refused() -> None:
    h = Harness().given(register(*RACKS))
    h.when(cmd(SubmitJob, job=job("j1", 2)))
    import pytest

    with pytest.raises(EventGap):
        evolve(initial_state(CLUSTER), h.log[1])
