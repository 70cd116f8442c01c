"""`rackplane slurm` on a real slurmctld (issue 18): the stories, end to end.

The cluster of `make test-slurm`: 3 racks x 18 nodes (a leaf switch each under a spine,
topology/tree), `gpu:4` each, partition `gpu`. rackplane keeps 2 spares per rack (its default),
so 16 nodes of a rack take work. One worker for the module; each story its own cluster id and
its own `rackplane slurm` process, on the same Slurm nodes (the `slurm` fixture cancels every
job and resumes every node after a story).

A story's jobs are `sbatch --hold --exclusive -N n --comment "rackplane: ..."`; each waits
for a file `done-<job id>` in the cluster's jobs directory, so a story ends a job when it
wants (`finish`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rackplane.models import (
    DefragPlanned,
    Event,
    JobBlocked,
    JobCompleted,
    JobPlaced,
    JobPreempted,
    JobRuntimeReported,
    JobStarted,
    JobStatus,
    JobSubmitted,
    NodeCordoned,
    NodeFailed,
    NodeSwapped,
    NodeUncordoned,
    SliceDegraded,
)
from rackplane.projections import ClusterState
from tests.adapter_process import AdapterProcess
from tests.conftest import BrokerUnderTest
from tests.slurm.conftest import RACKS, Slurm
from tests.streams.conftest import Pipeline, start_pipeline

pytestmark = pytest.mark.slurm

RACK_OF = {n: rack for rack, nodes in RACKS.items() for n in nodes}
WAIT = "while [ ! -e done-$SLURM_JOB_ID ]; do sleep 0.5; done"


@pytest.fixture(scope="module")
def pipeline(
    broker: BrokerUnderTest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    p = start_pipeline(broker, tmp_path_factory.mktemp("worker"))
    try:
        yield p
    finally:
        p.worker.stop()


class Story:
    """One story: a cluster id on the shared worker and its `rackplane slurm` process."""

    def __init__(self, slurm: Slurm, pipeline: Pipeline, tmp: Path) -> None:
        self.slurm, self.pipeline, self.tmp = slurm, pipeline, tmp
        self.cluster = f"s-{uuid.uuid4().hex[:6]}"
        self.adapter = AdapterProcess(tmp)

    def start_adapter(self) -> None:
        config = self.pipeline.config
        self.adapter.start(
            "slurm", "--cluster", self.cluster, "--partition", "gpu",
            "--bin", str(self.slurm.bin_dir), "--interval", "0.5",
            "--broker", config.broker, "--prefix", config.prefix, "--log-level", "info",
        )  # fmt: skip

    def kill_adapter(self) -> None:
        self.adapter.kill()

    def stop(self) -> None:
        self.adapter.stop()

    def adapter_log(self) -> str:
        return self.adapter.log()

    # -- Slurm --------------------------------------------------------------------------------

    def submit(self, nodes: int, comment: str, *more: str) -> int:
        return self.slurm.sbatch(
            "--hold", "--exclusive", "-N", str(nodes), "--comment", comment, *more, "--wrap", WAIT
        )

    def finish(self, job: int) -> None:
        (self.slurm.work_dir / "jobs" / f"done-{job}").touch()

    def running_on(self, job: int, timeout: float = 60.0) -> set[str]:
        """The nodes Slurm runs `job` on, once it runs."""
        deadline = time.monotonic() + timeout
        while True:
            j = self.slurm.job(job)
            if j.state == "RUNNING" and j.nodes:
                return set(self.slurm.hostnames(j.nodes))
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job} never ran: {j}\nadapter log:\n{self.adapter_log()}"
                )
            time.sleep(0.2)

    # -- rackplane ------------------------------------------------------------------------------

    async def events(
        self, until: Callable[[list[Event]], bool], timeout: float = 90.0
    ) -> list[Event]:
        try:
            return await self.pipeline.events(self.cluster, until, timeout)
        except AssertionError as err:
            raise AssertionError(f"{err}\nadapter log:\n{self.adapter_log()}") from None

    async def state(
        self, until: Callable[[ClusterState], bool], timeout: float = 90.0
    ) -> ClusterState:
        """The cluster's state folded from the log, once `until` holds of it."""
        try:
            return await self.pipeline.state(self.cluster, until, timeout)
        except AssertionError as err:
            raise AssertionError(f"{err}\nadapter log:\n{self.adapter_log()}") from None


@pytest.fixture
def story(slurm: Slurm, pipeline: Pipeline, tmp_path: Path) -> Iterator[Story]:
    s = Story(slurm, pipeline, tmp_path)
    s.start_adapter()
    try:
        yield s
    finally:
        s.stop()


def job_of(n: int) -> str:
    return f"slurm/{n}"


def nodes_of(state: ClusterState, job: str) -> list[str]:
    return [n for s in state.jobs[job].slices for n in s.nodes]


def swaps(state: ClusterState, job: str) -> int:
    found = state.jobs.get(job)
    return found.swaps if found is not None else -1


def status(state: ClusterState, job: str) -> JobStatus | None:
    found = state.jobs.get(job)
    return found.status if found is not None else state.finished.get(job)


def running(job: str) -> Callable[[ClusterState], bool]:
    return lambda s: status(s, job) is JobStatus.RUNNING


def of_type(cls: type) -> Callable[[list[Event]], list[Event]]:
    return lambda events: [e for e in events if isinstance(e, cls)]


# -- the stories --------------------------------------------------------------------------------


async def test_a_32_node_job_runs_rack_local_in_two_slices_on_the_nodes_rackplane_chose(
    story: Story,
) -> None:
    job = story.submit(32, "rackplane: slice-size=16 priority=5 checkpoint-interval=30m")
    state = await story.state(running(job_of(job)))
    placed = state.jobs[job_of(job)]
    assert [len(s.nodes) for s in placed.slices] == [16, 16]
    assert all(len({RACK_OF[n] for n in s.nodes}) == 1 for s in placed.slices)
    assert len({RACK_OF[n] for s in placed.slices for n in s.nodes}) == 2
    assert story.running_on(job) == set(nodes_of(state, job_of(job)))
    assert placed.spec.owner == "slurm:root" and placed.spec.priority == 5
    story.finish(job)
    events = await story.events(lambda es: bool(of_type(JobCompleted)(es)))
    assert len(of_type(JobSubmitted)(events)) == 1 and len(of_type(JobPlaced)(events)) == 1
    assert len(of_type(JobStarted)(events)) == 1


async def test_a_node_set_down_under_a_job_is_replaced_by_its_racks_spare(story: Story) -> None:
    job = story.submit(32, "rackplane: slice-size=16")
    state = await story.state(running(job_of(job)))
    before = story.running_on(job)
    victim = nodes_of(state, job_of(job))[3]
    rack = RACK_OF[victim]
    story.slurm.cmd(
        "scontrol", "update", f"NodeName={victim}", "State=DOWN", "Reason=gpu fell off the bus"
    )
    downed = time.monotonic()
    events = await story.events(
        lambda es: any(isinstance(e, JobRuntimeReported) and e.action == "restarted" for e in es)
    )
    failed = [e for e in of_type(NodeFailed)(events) if e.node == victim]  # type: ignore[attr-defined]
    assert failed and failed[0].cause == "slurm: down: gpu fell off the bus"  # type: ignore[attr-defined]
    (swap,) = of_type(NodeSwapped)(events)
    assert swap.old_node == victim and RACK_OF[swap.new_node] == rack  # type: ignore[attr-defined]
    after = story.running_on(job)
    took = time.monotonic() - downed
    assert after == (before - {victim}) | {swap.new_node}  # type: ignore[attr-defined]
    state = await story.state(lambda s: running(job_of(job))(s) and swaps(s, job_of(job)) > 0)
    assert after == set(nodes_of(state, job_of(job)))
    (report,) = [e for e in of_type(JobRuntimeReported)(events) if e.action == "restarted"]  # type: ignore[attr-defined]
    assert set(report.nodes) == after  # type: ignore[attr-defined]
    print(f"\nnode DOWN -> job running again on the spare: {took:.1f} s")


async def test_a_drain_from_scontrol_reaches_rackplane_and_its_resume_lifts_the_cordon(
    story: Story,
) -> None:
    await story.state(lambda s: s.registered)
    story.slurm.cmd("scontrol", "update", "NodeName=r02n05", "State=DRAIN", "Reason=fan swap")
    events = await story.events(lambda es: bool(of_type(NodeCordoned)(es)))
    (cordon,) = of_type(NodeCordoned)(events)
    assert (cordon.node, cordon.reason) == ("r02n05", "slurm: drain: fan swap")  # type: ignore[attr-defined]
    story.slurm.cmd("scontrol", "update", "NodeName=r02n05", "State=RESUME")
    await story.events(lambda es: bool(of_type(NodeUncordoned)(es)))


async def test_a_16_node_job_blocked_by_fragmentation_gets_auto_defrag(story: Story) -> None:
    # 6 jobs of 8 nodes fill the 3 racks (16 each), two per rack; the last is the only
    # managed one (the others interactive: never preempted without consent).
    jobs = [
        story.submit(8, f"rackplane: slice-size=8 kind={'managed' if i == 5 else 'interactive'}")
        for i in range(6)
    ]
    state = await story.state(
        lambda s: all(status(s, job_of(j)) is JobStatus.RUNNING for j in jobs)
    )
    rack_of_job = {j: {RACK_OF[n] for n in nodes_of(state, job_of(j))} for j in jobs}
    assert all(len(r) == 1 for r in rack_of_job.values())
    by_rack: dict[str, list[int]] = {}
    for j, (rack,) in ((j, tuple(r)) for j, r in rack_of_job.items()):
        by_rack.setdefault(rack, []).append(j)
    assert sorted(len(js) for js in by_rack.values()) == [2, 2, 2]
    victim = jobs[5]
    (vrack,) = rack_of_job[victim]
    ends = [min(j for j in js if j != victim) for js in by_rack.values()]
    for j in ends:
        story.finish(j)
    await story.state(lambda s: all(status(s, job_of(j)) is JobStatus.COMPLETED for j in ends))

    big = story.submit(16, "rackplane: slice-size=16")
    events = await story.events(
        lambda es: (
            bool(of_type(DefragPlanned)(es))
            and any(isinstance(e, JobRuntimeReported) and e.action == "restarted" for e in es)
        ),
        150,
    )
    assert any(isinstance(e, JobBlocked) and e.job == job_of(big) for e in events)
    (plan,) = of_type(DefragPlanned)(events)
    assert plan.job == job_of(big) and plan.victims == (job_of(victim),)  # type: ignore[attr-defined]
    assert [e.job for e in of_type(JobPreempted)(events)] == [job_of(victim)]  # type: ignore[attr-defined]
    assert {RACK_OF[n] for n in story.running_on(big)} == {vrack}
    moved = story.running_on(victim)
    assert {RACK_OF[n] for n in moved} != {vrack}
    actions = [
        (e.job, e.action)
        for e in of_type(JobRuntimeReported)(events)  # type: ignore[attr-defined]
    ]
    assert actions == [(job_of(victim), "requeued"), (job_of(victim), "restarted")]
    for j in jobs:
        if j not in ends and j != victim:  # the interactive jobs run where they ran
            assert story.slurm.job(j).state == "RUNNING"
    everything = [story.running_on(j) for j in [big, *jobs] if j not in ends]
    assert sum(len(n) for n in everything) == len(set().union(*everything))  # no node twice


async def test_the_adapter_killed_mid_story_resumes_without_placing_anything_twice(
    story: Story,
) -> None:
    job = story.submit(16, "rackplane: slice-size=16")
    await story.events(lambda es: bool(of_type(JobPlaced)(es)))
    story.kill_adapter()  # placed in rackplane; maybe not yet released in Slurm
    story.start_adapter()
    state = await story.state(running(job_of(job)))
    assert story.running_on(job) == set(nodes_of(state, job_of(job)))
    story.kill_adapter()  # running: a node goes down while nobody watches
    victim = nodes_of(state, job_of(job))[0]
    story.slurm.cmd("scontrol", "update", f"NodeName={victim}", "State=DOWN", "Reason=psu")
    await asyncio.sleep(1)
    story.start_adapter()
    events = await story.events(
        lambda es: any(isinstance(e, JobRuntimeReported) and e.action == "restarted" for e in es)
    )
    assert len(of_type(JobSubmitted)(events)) == 1
    assert len(of_type(JobPlaced)(events)) == 1
    assert len(of_type(JobStarted)(events)) == 1
    assert len(of_type(NodeSwapped)(events)) == 1
    state = await story.state(lambda s: running(job_of(job))(s) and swaps(s, job_of(job)) > 0)
    assert victim not in story.running_on(job)
    assert story.running_on(job) == set(nodes_of(state, job_of(job)))


async def test_a_job_held_by_the_submit_plugin_is_placed_and_a_bad_comment_is_said_back(
    story: Story,
) -> None:
    # deploy/slurm/job_submit.lua holds every job of the partition: no --hold needed
    job = story.slurm.sbatch(
        "--exclusive", "-N", "4", "--comment", "rackplane: slice-size=4", "--wrap", WAIT
    )
    bad = story.slurm.sbatch(
        "--exclusive", "-N", "4", "--comment", "rackplane: slice-size=four", "--wrap", WAIT
    )
    state = await story.state(running(job_of(job)))
    assert story.running_on(job) == set(nodes_of(state, job_of(job)))
    shown = story.slurm.until(
        f"job {bad}'s AdminComment",
        lambda: story.slurm.cmd("scontrol", "show", "job", str(bad)),
        lambda text: "AdminComment=rackplane: slice-size" in text,
        30.0,
    )
    assert "AdminComment=rackplane: slice-size: expected a whole number, got 'four'" in shown
    assert story.slurm.job(bad).state == "PENDING"  # held: Slurm did not start it either
    assert job_of(bad) not in state.jobs


async def test_a_no_kill_job_shrinks_in_place_when_its_rack_has_no_spare_left(
    story: Story,
) -> None:
    job = story.submit(16, "rackplane: slice-size=16 min-nodes-per-slice=14", "--no-kill")
    state = await story.state(running(job_of(job)))
    rack = RACK_OF[nodes_of(state, job_of(job))[0]]
    downed = [min(story.running_on(job))]  # not the batch host: losing it ends the job

    def reports(action: str) -> Callable[[list[Event]], list[Event]]:
        return lambda es: [
            e for e in es if isinstance(e, JobRuntimeReported) and e.action == action
        ]

    for k in (1, 2):  # the rack's two spares take the first two nodes' places
        victim = next(n for n in nodes_of(state, job_of(job)) if n not in downed)
        downed.append(victim)
        story.slurm.cmd("scontrol", "update", f"NodeName={victim}", "State=DOWN", "Reason=xid")
        await story.events(lambda es, k=k: len(reports("restarted")(es)) == k)
        state = await story.state(lambda s, k=k: swaps(s, job_of(job)) == k)
    victim = next(n for n in nodes_of(state, job_of(job)) if n not in downed)
    story.slurm.cmd("scontrol", "update", f"NodeName={victim}", "State=DOWN", "Reason=xid")
    events = await story.events(lambda es: bool(reports("shrank")(es)))
    assert any(isinstance(e, SliceDegraded) for e in events)
    (shrank,) = reports("shrank")(events)
    state = await story.state(
        lambda s: job_of(job) in s.jobs and len(nodes_of(s, job_of(job))) == 15
    )
    assert story.slurm.job(job).state == "RUNNING"
    assert story.running_on(job) == set(nodes_of(state, job_of(job))) == set(shrank.nodes)  # type: ignore[attr-defined]
    assert {RACK_OF[n] for n in shrank.nodes} == {rack}  # type: ignore[attr-defined]
