"""The Slurm adapter's rules (`rackplane.slurm.plan`), without a slurmctld.

A small world: the controller and the production policies in the in-process engine, and a
toy slurmctld (nodes and jobs as `SlurmNode`/`SlurmJob`) that does to them what Slurm does:
a released job whose required nodes are free starts on them, a node set DOWN requeues its
jobs. `World.settle()` runs the adapter's cycle to a fixed point. The real slurmctld is in
tests/slurm.

    rack rack01: r01n01 .. r01n06        rack rack02: r02n01 .. r02n06
    (a leaf switch each under one spine; 4 GPUs per node, 1 spare per rack)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rackplane.engine import Engine
from rackplane.importers.slurm import parse_slurm_tree
from rackplane.models import (
    CancelJob,
    Event,
    FailJob,
    Health,
    JobRuntimeReported,
    JobStatus,
    NodeCordoned,
    PolicySettings,
    PreemptJobs,
    QueueSpec,
    RegisterTopology,
    StartJob,
    SubmitJob,
)
from rackplane.policies.presets import default_policies
from rackplane.slurm.objects import SlurmJob, SlurmNode, SpecError, job_spec
from rackplane.slurm.plan import (
    DRAIN_PREFIX,
    Cancel,
    Drain,
    Hold,
    Place,
    Plan,
    Problem,
    Requeue,
    Resume,
    View,
    plan,
)

CLUSTER = "c1"
T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
ACTOR = "runtime:slurm"
TREE = """SwitchName=rack01 Level=0 LinkSpeed=1 Nodes=r01n[01-06]
SwitchName=rack02 Level=0 LinkSpeed=1 Nodes=r02n[01-06]
SwitchName=spine Level=1 LinkSpeed=1 Nodes=r01n[01-06],r02n[01-06] Switches=rack[01-02]
"""


def slurm_job(id_: int, nodes: int, comment: str = "", **fields: Any) -> SlurmJob:
    values: dict[str, Any] = {
        "id": str(id_),
        "state": "PENDING",
        "node_count": nodes,
        "reason": "JobHeldUser",
        "nodes": (),
        "required": (),
        "user": "alice",
        "comment": comment,
    }
    return SlurmJob(**(values | fields))


class World:
    """The engine (rackplane), a toy slurmctld, and the adapter's cycle between."""

    def __init__(self) -> None:
        self.topology = parse_slurm_tree(TREE, "tree", cluster=CLUSTER, domain_nodes=6).topology
        self.nodes = {
            n: SlurmNode(n, "IDLE", frozenset()) for r in self.topology.racks for n in r.nodes
        }
        self.jobs: dict[str, SlurmJob] = {}
        self.problems: dict[str, str] = {}
        self.now = T0
        self.engine = Engine(CLUSTER, clock=lambda: self.now, policies=default_policies())
        self.events: list[Event] = []
        self.settings = PolicySettings(spares_per_rack=1, slice_size=4)
        self.calls: list[Any] = []
        self.partition: str | None = None

    @property
    def state(self) -> Any:
        return self.engine.state

    def view(self) -> View:
        reported = frozenset(
            e.causation_id for e in self.events if isinstance(e, JobRuntimeReported)
        )
        cordons: dict[str, str] = {}
        for e in self.events:
            if isinstance(e, NodeCordoned):
                cordons[e.node] = e.reason
        return View(
            nodes=dict(self.nodes),
            jobs=list(self.jobs.values()),
            topology=self.topology,
            problems=dict(self.problems),
            reported=reported,
            cordons=cordons,
            partition=self.partition,
        )

    def plan(self) -> Plan:
        return plan(self.state, self.view(), actor=ACTOR)

    def handle(self, command: Any) -> list[Event]:
        if isinstance(command, RegisterTopology) and command.settings is None:
            command = command.model_copy(update={"settings": self.settings})
        events = self.engine.handle(command)
        self.events.extend(events)
        return events

    def settle(self, rounds: int = 20) -> list[Plan]:
        """Plan, carry out, let Slurm schedule, until a plan is empty; the plans made."""
        plans = []
        for _ in range(rounds):
            self.now += timedelta(seconds=1)
            self.schedule()
            p = self.plan()
            if not p.orders and not p.actions:
                return plans
            plans.append(p)
            for order in p.orders:
                self.handle(order.command)
            for action in p.actions:
                self.do(action)
        raise AssertionError(f"no fixed point in {rounds} rounds; last plan {plans[-1]}")

    def do(self, action: Any) -> None:
        self.calls.append(action)
        match action:
            case Place(job=jid, nodes=nodes, resize=resize, start=start, release=release):
                j = self.jobs[jid]
                assert j.pending, f"job {jid} placed while {j.state}"
                assert resize or j.node_count == len(nodes)
                fields: dict[str, Any] = {"required": nodes, "node_count": len(nodes)}
                if release:
                    fields["reason"] = "None"
                if start and j.reason == "BeginTime":
                    fields["reason"] = "None"
                self.jobs[jid] = j._replace(**fields)
            case Hold(job=jid):
                self.jobs[jid] = self.jobs[jid]._replace(reason="JobHeldUser")
            case Requeue(job=jid):
                self.jobs[jid] = self.jobs[jid]._replace(
                    state="PENDING", reason="JobHeldAdmin", nodes=()
                )
            case Cancel(job=jid):
                self.jobs[jid] = self.jobs[jid]._replace(state="CANCELLED", reason="None")
            case Drain(node=n, reason=reason):
                v = self.nodes[n]
                self.nodes[n] = v._replace(flags=v.flags | {"DRAIN"}, reason=reason)
            case Resume(node=n):
                v = self.nodes[n]
                self.nodes[n] = v._replace(flags=v.flags - {"DRAIN"}, reason="")
            case Problem(job=jid, text=text):
                self.problems[jid] = text

    def schedule(self) -> None:
        """What slurmctld does: a pending job, neither held nor waiting, with its required
        nodes up and free, runs there."""
        busy = {n for j in self.jobs.values() if j.active for n in j.nodes}
        for jid, j in list(self.jobs.items()):
            if not j.pending or j.reason in ("JobHeldUser", "JobHeldAdmin", "BeginTime"):
                continue
            if len(j.required) != j.node_count:
                continue
            if any(n in busy or self.nodes[n].problems for n in j.required):
                continue
            self.jobs[jid] = j._replace(
                state="RUNNING", nodes=j.required, reason="None", started=self.now
            )
            busy |= set(j.required)

    def sbatch(self, id_: int, nodes: int, comment: str = "rackplane: slice-size=4") -> None:
        self.jobs[str(id_)] = slurm_job(id_, nodes, comment)

    def down(self, node: str, reason: str = "bad gpu") -> None:
        """`scontrol update NodeName=... State=DOWN`: its jobs are requeued (BeginTime)."""
        self.nodes[node] = self.nodes[node]._replace(state="DOWN", reason=reason)
        for jid, j in list(self.jobs.items()):
            if j.active and node in j.nodes:
                self.jobs[jid] = j._replace(state="PENDING", reason="BeginTime", nodes=())

    def down_no_kill(self, node: str) -> None:
        """A node set DOWN under `--no-kill` jobs: they run on without it."""
        self.nodes[node] = self.nodes[node]._replace(state="DOWN", reason="bad gpu")
        for jid, j in list(self.jobs.items()):
            if j.active and node in j.nodes:
                nodes = tuple(n for n in j.nodes if n != node)
                self.jobs[jid] = j._replace(nodes=nodes, node_count=len(nodes))

    def end(self, id_: int, state: str, reason: str = "None") -> None:
        self.jobs[str(id_)] = self.jobs[str(id_)]._replace(state=state, reason=reason)


def placed_nodes(w: World, job: str) -> list[str]:
    return [n for s in w.state.jobs[job].slices for n in s.nodes]


@pytest.fixture
def world() -> World:
    w = World()
    w.settle()
    return w


# -- topology and nodes -----------------------------------------------------------------------


def test_the_first_plan_registers_the_racks_of_the_leaf_switches() -> None:
    w = World()
    p = w.plan()
    assert [type(o.command) for o in p.orders] == [RegisterTopology]
    w.settle()
    assert sorted(w.state.racks) == ["rack01", "rack02"]
    assert w.plan() == Plan((), ())


def test_a_node_set_down_is_reported_failed_with_slurms_reason_and_repaired_when_back(
    world: World,
) -> None:
    world.down("r01n03", "ECC errors")
    world.settle()
    node = world.state.nodes["r01n03"]
    assert node.health is Health.FAILED
    assert node.cause == "slurm: down: ECC errors"
    world.nodes["r01n03"] = SlurmNode("r01n03", "IDLE", frozenset())
    world.settle()
    assert world.state.nodes["r01n03"].health is Health.HEALTHY


def test_down_and_not_responding_is_failed_but_not_responding_alone_or_unknown_is_not(
    world: World,
) -> None:
    world.nodes["r01n01"] = SlurmNode("r01n01", "DOWN", frozenset({"NOT_RESPONDING"}), "gone")
    world.nodes["r01n02"] = SlurmNode("r01n02", "UNKNOWN", frozenset())
    world.nodes["r01n03"] = SlurmNode("r01n03", "IDLE", frozenset({"NOT_RESPONDING"}))
    world.settle()
    assert world.state.nodes["r01n01"].health is Health.FAILED
    assert world.state.nodes["r01n01"].cause == "slurm: down: not responding: gone"
    assert world.state.nodes["r01n02"].health is Health.HEALTHY
    assert world.state.nodes["r01n03"].health is Health.HEALTHY  # idle* after a RESUME


def test_a_drain_from_scontrol_is_a_cordon_and_its_resume_lifts_it(world: World) -> None:
    world.nodes["r02n02"] = SlurmNode("r02n02", "IDLE", frozenset({"DRAIN"}), "fan swap")
    world.settle()
    assert world.state.nodes["r02n02"].cordoned
    cordon = [e for e in world.events if isinstance(e, NodeCordoned)][-1]
    assert cordon.reason == "slurm: drain: fan swap"
    world.nodes["r02n02"] = SlurmNode("r02n02", "IDLE", frozenset())
    world.settle()
    assert not world.state.nodes["r02n02"].cordoned


def test_a_cordon_made_in_rackplane_drains_the_node_and_its_uncordon_resumes_it(
    world: World,
) -> None:
    from rackplane.models import CordonNode, UncordonNode

    world.handle(CordonNode(id="op-1", cluster=CLUSTER, actor="operator:a", node="r01n05"))
    world.settle()
    assert world.nodes["r01n05"].drained
    assert world.nodes["r01n05"].reason.startswith(DRAIN_PREFIX)
    assert world.state.nodes["r01n05"].cordoned  # not cordoned twice, not lifted
    world.handle(UncordonNode(id="op-2", cluster=CLUSTER, actor="operator:a", node="r01n05"))
    world.settle()
    assert not world.nodes["r01n05"].drained


# -- jobs -------------------------------------------------------------------------------------


def test_a_held_job_is_submitted_placed_rack_local_released_and_started(world: World) -> None:
    world.sbatch(11, 8)
    plans = world.settle()
    submitted = [o.command for p in plans for o in p.orders if isinstance(o.command, SubmitJob)]
    assert [c.job.id for c in submitted] == ["slurm/11"]
    assert submitted[0].job.owner == "slurm:alice"
    job = world.jobs["11"]
    assert job.state == "RUNNING"
    assert set(job.nodes) == set(placed_nodes(world, "slurm/11"))
    assert {world.state.nodes[n].rack for n in job.nodes} == {"rack01", "rack02"}
    assert world.state.jobs["slurm/11"].status is JobStatus.RUNNING
    places = [a for a in world.calls if isinstance(a, Place)]
    assert len(places) == 1 and places[0].release and not places[0].resize


def test_a_pending_job_not_held_is_held_before_it_is_submitted(world: World) -> None:
    world.jobs["12"] = slurm_job(12, 4, reason="Priority")
    p = world.plan()
    assert p.actions == (Hold("12"),) and p.orders == ()
    world.settle()
    assert world.jobs["12"].state == "RUNNING"


def test_a_comment_that_cannot_be_read_is_written_back_and_nothing_is_submitted(
    world: World,
) -> None:
    world.sbatch(13, 4, "rackplane: slice-size=four")
    world.settle()
    assert "slurm/13" not in world.state.jobs
    assert world.problems["13"] == "rackplane: slice-size: expected a whole number, got 'four'"


def test_a_node_down_under_a_running_job_is_swapped_and_the_job_restarts_on_the_spare(
    world: World,
) -> None:
    world.sbatch(14, 4)
    world.settle()
    victim = world.jobs["14"].nodes[0]
    world.down(victim)
    world.settle()
    job = world.jobs["14"]
    assert job.state == "RUNNING" and victim not in job.nodes
    assert set(job.nodes) == set(placed_nodes(world, "slurm/14"))
    assert world.state.jobs["slurm/14"].swaps == 1
    reports = [e for e in world.events if isinstance(e, JobRuntimeReported)]
    assert [(r.action, r.job) for r in reports] == [("restarted", "slurm/14")]
    assert set(reports[0].nodes) == set(job.nodes)
    places = [a for a in world.calls if isinstance(a, Place)]
    assert places[-1].start == "now+2" and not places[-1].release  # requeued, ran before
    assert places[0].start is None and places[0].release  # held, never ran: at its release


def test_a_preempted_job_is_requeued_held_and_placed_again(world: World) -> None:
    world.sbatch(15, 4)
    world.settle()
    world.handle(PreemptJobs(id="p-1", cluster=CLUSTER, actor="policy:defrag", jobs=("slurm/15",)))
    world.now += timedelta(seconds=1)  # the policies placed it again, maybe on the same nodes
    p = world.plan()
    assert [type(a) for a in p.actions] == [Requeue]
    world.settle()
    actions = [r.action for r in world.events if isinstance(r, JobRuntimeReported)]
    assert actions == ["requeued", "restarted"]
    assert world.jobs["15"].state == "RUNNING"


def test_completion_failure_and_scancel_reach_rackplane(world: World) -> None:
    for i in (16, 17, 18):
        world.sbatch(i, 2, "rackplane: slice-size=2")
    world.settle()
    world.end(16, "COMPLETED")
    world.end(17, "FAILED", "NonZeroExitCode")
    world.end(18, "CANCELLED")
    world.settle()
    assert world.state.finished["slurm/16"] is JobStatus.COMPLETED
    assert world.state.finished["slurm/17"] is JobStatus.FAILED
    assert world.state.finished["slurm/18"] is JobStatus.CANCELLED
    failed = [e for e in world.events if type(e).__name__ == "JobFailed"]
    assert failed[0].reason == "slurm: job 17 failed: NonZeroExitCode"  # type: ignore[attr-defined]


def test_a_job_cancelled_in_rackplane_is_cancelled_in_slurm(world: World) -> None:
    world.sbatch(19, 2, "rackplane: slice-size=2")
    world.settle()
    world.handle(CancelJob(id="c-1", cluster=CLUSTER, actor="operator:a", job="slurm/19"))
    world.settle()
    assert world.jobs["19"].state == "CANCELLED"


def test_a_job_gone_from_slurmctld_while_it_held_nodes_fails(world: World) -> None:
    world.sbatch(20, 2, "rackplane: slice-size=2")
    world.settle()
    del world.jobs["20"]
    unread = plan(world.state, world.view()._replace(complete=False), actor=ACTOR)
    assert unread == Plan((), ())  # an unreadable squeue line may be the job
    p = world.plan()
    assert [type(o.command) for o in p.orders] == [FailJob]
    world.settle()
    assert world.state.finished["slurm/20"] is JobStatus.FAILED


def test_the_plan_is_empty_once_everything_agrees_and_repeats_after_a_restart(
    world: World,
) -> None:
    world.sbatch(21, 8)
    world.settle()
    world.down(world.jobs["21"].nodes[2])
    world.settle()
    assert world.plan() == Plan((), ())
    # a restarted adapter has the same pictures: nothing to do, nothing sent twice
    assert plan(world.state, world.view(), actor=ACTOR) == Plan((), ())
    starts = [e for e in world.events if type(e).__name__ == "JobStarted"]
    assert len(starts) == 1


def test_a_start_is_sent_once_per_episode() -> None:
    w = World()
    w.settle()
    w.sbatch(22, 4)
    plans = w.settle()
    starts = [o for p in plans for o in p.orders if isinstance(o.command, StartJob)]
    assert [o.command.id for o in starts] == ["slurm:start:slurm/22:0.0.0"]


# -- the comment ------------------------------------------------------------------------------


def test_the_comment_gives_the_spec() -> None:
    j = slurm_job(
        30,
        32,
        "rackplane: slice-size=16, kind=interactive priority=5 checkpoint-interval=30m",
    )
    spec = job_spec(j)
    assert (spec.id, spec.nodes, spec.slice_size, spec.kind.value, spec.priority) == (
        "slurm/30",
        32,
        16,
        "interactive",
        5,
    )
    assert spec.checkpoint_interval is not None
    assert spec.checkpoint_interval.total_seconds() == 1800
    assert spec.owner == "slurm:alice"


@pytest.mark.parametrize(
    ("comment", "why"),
    [
        ("rackplane: slices=2", "comment key 'slices'"),
        ("rackplane: slice-size", "expected key=value"),
        ("rackplane: checkpoint-interval=soon", "positive duration"),
        ("rackplane: kind=batch", "kind"),
    ],
)
def test_a_bad_comment_is_refused_with_a_reason(comment: str, why: str) -> None:
    with pytest.raises(SpecError, match=why):
        job_spec(slurm_job(31, 4, comment))


def test_a_comment_not_for_rackplane_leaves_the_defaults() -> None:
    spec = job_spec(slurm_job(32, 4, "my experiment | lr=3e-4"))
    assert spec.slice_size is None and spec.priority == 0


def test_a_no_kill_job_runs_on_after_a_degrade_and_that_it_shrank_is_on_record(
    world: World,
) -> None:
    world.sbatch(23, 5, "rackplane: slice-size=5 min-nodes-per-slice=3")
    world.settle()
    first, second = world.jobs["23"].nodes[:2]
    world.down_no_kill(first)  # the rack's spare takes its place: requeued, restarted
    world.settle()
    assert world.state.jobs["slurm/23"].swaps == 1
    world.down_no_kill(second)  # no spare left: rackplane degrades the slice
    world.settle()
    job = world.jobs["23"]
    assert job.state == "RUNNING" and len(job.nodes) == 4
    assert set(job.nodes) == set(placed_nodes(world, "slurm/23"))
    reports = [(e.action, len(e.nodes)) for e in world.events if isinstance(e, JobRuntimeReported)]
    assert reports == [("requeued", 0), ("restarted", 5), ("shrank", 4)]
    assert world.plan() == Plan((), ())


@pytest.mark.parametrize(
    ("comment", "account", "want"),
    [
        ("rackplane: slice-size=4 queue=rl", "research", "rl"),
        ("rackplane: slice-size=4", "research", "research"),
        ("rackplane: slice-size=4", "nobody", "research"),  # no such queue: the default one
        ("rackplane: slice-size=4", "nobody", "gpu"),  # the managed partition's queue
    ],
    ids=["named in the comment", "the account's queue", "the default queue", "the partition's"],
)
def test_a_jobs_queue_is_its_comments_else_the_queue_named_after_its_account(
    comment: str, account: str, want: str
) -> None:
    w = World()
    leaves = (QueueSpec(name="research", nominal_nodes=8), QueueSpec(name="rl", nominal_nodes=4))
    if want == "gpu":
        leaves += (QueueSpec(name="gpu", nominal_nodes=4),)
        w.partition = "gpu"
    w.settings = PolicySettings(spares_per_rack=1, slice_size=4, default_queue="research",
                                queues=leaves)  # fmt: skip
    w.settle()
    w.jobs["21"] = slurm_job(21, 4, comment, account=account)
    w.settle()
    assert w.state.jobs["slurm/21"].spec.queue == want
