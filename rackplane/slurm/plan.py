"""What the Slurm adapter does next: `plan(state, view) -> Plan`. Pure: no I/O, no clock.

Theory of operation: the adapter holds two pictures, the cluster state folded from rackplane's
log and slurmctld's nodes and jobs (of the partition rackplane manages). `plan` compares them
and says what would make them agree: commands for rackplane (what Slurm saw happen) and
actions for slurmctld (what rackplane decided). Level-triggered like the Kubernetes adapter's
plan: after a crash the same pictures give the same plan, and what is done is not planned
again (a released job runs; a requeued one is pending).

Slurm runs a job on exactly the nodes rackplane chose: a job of the partition is held at
submission (`sbatch --hold`, or the `job_submit.lua` of the docs), rackplane places it, the
adapter sets its `ReqNodeList` to exactly the placed nodes and releases it. Slurm cannot add
a node to a running job, so whatever moves a running job's nodes (a swap, a migration, a
preemption) requeues it held and places it again; what Slurm did is then on record
(`ReportJobRuntime`: requeued, restarted, shrank).

The cycle, in steps:
    1. Topology: the racks slurmctld shows, registered when rackplane has none or a different
       one, unless an allocated node would leave its rack.
    2. Nodes: DOWN, FAIL or not responding is reported `failed` (cause `slurm: ...`, with
       Slurm's reason); a node that recovers from a failure the adapter reported is repaired.
       A drain in Slurm becomes a cordon (reason `slurm: drain: ...`); the drain's end lifts
       only the cordons that came from Slurm. A cordon made in rackplane drains the node in
       Slurm (reason `rackplane: ...`), and its uncordon resumes it.
    3. Jobs rackplane does not know: a held job is submitted; a pending job not held is held
       first (Slurm must not start it by itself).
    4. Jobs rackplane placed: a pending job gets exactly the placed nodes and is released
       (started at once if Slurm requeued it); a running job on other nodes than rackplane's
       (its nodes moved) is requeued held, to be placed again; on the placed nodes it starts
       (`StartJob`), or, after a move, it restarted (`ReportJobRuntime`). A degraded job that
       runs on fewer nodes (`--no-kill`: Slurm dropped the failed ones) shrank. Completed:
       `CompleteJob`; failed, timed out, node-failed: `FailJob`; cancelled in Slurm:
       `CancelJob`.
    5. Jobs rackplane queued again (preempted) that run are requeued held; jobs rackplane
       ended (cancelled by an operator) that still run or pend are cancelled in Slurm.

Commands carry ids made from what they answer (a job and its episode of moves), so a plan
repeated after a restart is deduplicated by the controller; those with no such anchor (node
reports, cordons) carry the state's seq.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from rackplane.models import (
    CancelJob,
    Command,
    CompleteJob,
    CordonNode,
    FailJob,
    Health,
    JobStatus,
    RegisterTopology,
    RepairNode,
    ReportJobRuntime,
    ReportNodeHealth,
    RuntimeAction,
    StartJob,
    SubmitJob,
    Topology,
    UncordonNode,
)
from rackplane.models._text import printable
from rackplane.projections import ClusterState, JobState
from rackplane.projections.registration import registration_due
from rackplane.projections.state import leaf_named
from rackplane.slurm.objects import FAILED, SlurmJob, SlurmNode, SpecError, job_spec

CAUSE_PREFIX = "slurm: "
"""Starts the cause of every health report and the reason of every cordon the adapter sends."""
DRAIN_PREFIX = "rackplane: "
"""Starts the reason of every drain the adapter makes in Slurm."""
RESTART_AT = "now+2"
"""The `StartTime` of a job placed again after it ran (see `_Planner._start`)."""


class Place(NamedTuple):
    """`scontrol update JobId=<job> ReqNodeList=<nodes> [NumNodes=n] [StartTime=<start>]`,
    then (batched) `scontrol release` when `release`."""

    job: str
    nodes: tuple[str, ...]
    resize: bool
    start: str | None
    """`now` (Slurm requeued it: it would wait ~2 min), `now+2` (it ran before), None."""
    release: bool


class Hold(NamedTuple):
    """`scontrol hold <job>` (batched): Slurm must not start it by itself."""

    job: str


class Requeue(NamedTuple):
    """`scontrol requeuehold <job>` (batched): its nodes moved, or rackplane queued it again."""

    job: str
    why: str


class Cancel(NamedTuple):
    """`scancel <job>` (batched): rackplane ended it."""

    job: str
    why: str


class Drain(NamedTuple):
    """`scontrol update NodeName=<node> State=DRAIN Reason=<reason>` (grouped by reason)."""

    node: str
    reason: str


class Resume(NamedTuple):
    """`scontrol update NodeName=<node> State=RESUME` (batched)."""

    node: str


class Problem(NamedTuple):
    """`scontrol update JobId=<job> AdminComment=<text>`: why rackplane does not take it."""

    job: str
    text: str


Action = Place | Hold | Requeue | Cancel | Drain | Resume | Problem


class Order(NamedTuple):
    """A command and what it is about: the adapter sends one command per subject at a time."""

    subject: str
    command: Command


class Plan(NamedTuple):
    """What to send to rackplane and what to do to slurmctld."""

    orders: tuple[Order, ...]
    actions: tuple[Action, ...]


class View(NamedTuple):
    """slurmctld's side of the comparison."""

    nodes: Mapping[str, SlurmNode]
    jobs: Sequence[SlurmJob]
    """The jobs of the partition rackplane manages, as squeue shows them."""
    topology: Topology | None
    problems: Mapping[str, str] = {}
    """AdminComment already written per Slurm job id (what `Problem` would write)."""
    reported: frozenset[str] = frozenset()
    """Ids of the `ReportJobRuntime` commands the log already answered."""
    cordons: Mapping[str, str] = {}
    """The reason of each node's cordon in rackplane (from the log's `NodeCordoned`)."""
    complete: bool = True
    """Every job squeue printed was read: a job missing from `jobs` is gone from slurmctld."""
    partition: str | None = None
    """The partition rackplane manages (a queue of its name takes the jobs no other names)."""


def plan(state: ClusterState, view: View, *, actor: str) -> Plan:
    """The commands and actions that make rackplane and slurmctld agree (steps above)."""
    p = _Planner(state, view, actor)
    p.topology()
    p.nodes()
    seen: set[str] = set()
    for job in sorted(view.jobs, key=lambda j: _numeric(j.id)):
        seen.add(job.job)
        p.job(job)
    for jid, job_state in sorted(state.jobs.items()):
        if not view.complete:
            break  # an unreadable line may be the job: not gone
        if jid.startswith("slurm/") and jid not in seen and job_state.status.holds_nodes:
            p.order(
                f"job:{jid}",
                FailJob,
                f"slurm:gone:{jid}:{_episode(job_state)}",
                job=jid,
                reason=f"{CAUSE_PREFIX}the job is gone from slurmctld (its end was not seen)",
            )
    return Plan(tuple(p.orders), tuple(p.actions))


def _numeric(slurm_id: str) -> tuple[int, str]:
    return (int(slurm_id), "") if slurm_id.isdigit() else (0, slurm_id)


def _episode(job: JobState) -> str:
    return f"{job.preemptions}.{job.migrations}.{job.swaps}"


class _Planner:
    def __init__(self, state: ClusterState, view: View, actor: str) -> None:
        self.s, self.v, self.actor = state, view, actor
        self.orders: list[Order] = []
        self.actions: list[Action] = []

    def order(self, subject: str, kind: type[Command], id_: str, **fields: object) -> None:
        command = kind(id=id_, cluster=self.s.cluster, actor=self.actor, **fields)
        self.orders.append(Order(subject, command))

    # -- 1. topology ------------------------------------------------------------------------

    def topology(self) -> None:
        digest = registration_due(self.s, self.v.topology)
        if digest is not None:
            self.order(
                "topology", RegisterTopology, f"slurm:register:{digest}", topology=self.v.topology
            )

    # -- 2. nodes ---------------------------------------------------------------------------

    def nodes(self) -> None:
        drains: list[Drain] = []
        for node in self.s.nodes.values():
            v = self.v.nodes.get(node.id)
            problems = v.problems if v is not None else ("gone from slurmctld",)
            if problems and node.health is not Health.FAILED:
                self.order(
                    f"health:{node.id}",
                    ReportNodeHealth,
                    f"slurm:health:{node.id}:{self.s.seq}",
                    node=node.id,
                    health=Health.FAILED,
                    cause=_clip(CAUSE_PREFIX + ": ".join(problems)),
                )
            elif (
                not problems
                and node.health is Health.FAILED
                and node.cause.startswith(CAUSE_PREFIX)
            ):
                self.order(
                    f"health:{node.id}",
                    RepairNode,
                    f"slurm:repair:{node.id}:{self.s.seq}",
                    node=node.id,
                    note=f"{CAUSE_PREFIX}the node is {v.state.lower() if v else 'back'} again",
                )
            if v is None:
                continue
            ours = v.reason.startswith(DRAIN_PREFIX)
            cordon = self.v.cordons.get(node.id, "")
            from_slurm = node.cordoned and cordon.startswith(CAUSE_PREFIX)
            if v.drained and not ours and not node.cordoned:
                self.order(
                    f"cordon:{node.id}",
                    CordonNode,
                    f"slurm:cordon:{node.id}:{self.s.seq}",
                    node=node.id,
                    reason=_clip(f"{CAUSE_PREFIX}drain: {v.reason or 'no reason given'}"),
                )
            elif not v.drained and from_slurm:
                self.order(
                    f"cordon:{node.id}",
                    UncordonNode,
                    f"slurm:uncordon:{node.id}:{self.s.seq}",
                    node=node.id,
                )
            elif node.cordoned and not from_slurm and not v.drained:
                reason = cordon or "cordoned in rackplane"
                drains.append(Drain(node.id, _clip(DRAIN_PREFIX + reason, 200)))
            elif not node.cordoned and v.drained and ours:
                self.actions.append(Resume(node.id))
        self.actions.extend(drains)

    # -- 3-5. jobs --------------------------------------------------------------------------

    def job(self, j: SlurmJob) -> None:
        jid = j.job
        job = self.s.jobs.get(jid)
        if job is None:
            final = self.s.finished.get(jid)
            if final is not None:
                if j.pending or j.active:
                    self.actions.append(Cancel(j.id, f"rackplane: job {jid} is {final.value}"))
                return
            self.unknown(j)
        elif job.status.holds_nodes:
            self.placed(j, job)
        elif j.active:  # preempted: queued again
            self.actions.append(Requeue(j.id, f"rackplane queued job {jid} again (preempted)"))
            self.report(
                jid,
                "requeued",
                _episode(job),
                (),
                f"{CAUSE_PREFIX}job {j.id} requeued and held (preempted by rackplane)",
            )
        elif j.pending and not j.held:
            self.actions.append(Hold(j.id))
        elif not j.pending and not j.active:
            self.ended(j, job)

    def unknown(self, j: SlurmJob) -> None:
        if j.state in FAILED or j.state in ("COMPLETED", "CANCELLED"):
            return
        if j.active:
            self.problem(j, "started by Slurm itself: submit with --hold so rackplane places it")
            return
        if not j.held:
            self.actions.append(Hold(j.id))
            return
        try:
            spec = job_spec(j)
        except SpecError as err:
            self.problem(j, str(err))
            return
        if spec.queue is None and (queue := leaf_named(self.s, [j.account, self.v.partition])):
            spec = spec.model_copy(update={"queue": queue})
        self.problem(j, None)
        self.order(f"job:{j.job}", SubmitJob, f"slurm:submit:{j.job}", job=spec)

    def placed(self, j: SlurmJob, job: JobState) -> None:
        jid = job.spec.id
        assigned = tuple(n for s in job.slices for n in s.nodes)
        episode = _episode(job)
        if j.pending:
            if set(j.required) != set(assigned) or j.node_count != len(assigned):
                self.actions.append(
                    Place(
                        j.id,
                        assigned,
                        resize=j.node_count != len(assigned),
                        start=self._start(j, job),
                        release=j.held,
                    )
                )
            elif j.held:
                self.actions.append(Place(j.id, assigned, False, self._start(j, job), True))
            elif j.reason == "BeginTime":  # requeued: Slurm waits ~2 min unless told
                self.actions.append(Place(j.id, assigned, False, self._start(j, job), False))
            return
        if j.active:
            running = set(j.nodes)
            if running == set(assigned):
                if job.status is JobStatus.PLACED and self._stale(j, job):
                    self.actions.append(
                        Requeue(j.id, f"rackplane preempted job {jid}; this run is from before")
                    )
                    self.report(
                        jid,
                        "requeued",
                        episode,
                        (),
                        f"{CAUSE_PREFIX}job {j.id} requeued and held (preempted by rackplane)",
                    )
                elif job.status is JobStatus.PLACED:
                    self.order(f"job:{jid}", StartJob, f"slurm:start:{jid}:{episode}", job=jid)
                else:
                    if episode != "0.0.0":
                        self.report(
                            jid,
                            "restarted",
                            episode,
                            assigned,
                            f"{CAUSE_PREFIX}job {j.id} runs again on {len(assigned)} nodes "
                            "(requeued: its nodes moved)",
                        )
                    if len(assigned) < job.spec.nodes:
                        self.shrank(j, job, assigned)
                return
            failed = {n for n in running - set(assigned) if self._failed(n)}
            if set(assigned) < running and failed == running - set(assigned):
                self.shrank(j, job, assigned)
                return
            if running < set(assigned) and all(self._down(n) for n in set(assigned) - running):
                return  # `--no-kill`: Slurm dropped failed nodes; rackplane decides first
            self.actions.append(
                Requeue(j.id, f"rackplane moved job {jid} to other nodes (swap or migration)")
            )
            self.report(
                jid,
                "requeued",
                episode,
                (),
                f"{CAUSE_PREFIX}job {j.id} requeued and held: rackplane moved it to other nodes",
            )
            return
        self.ended(j, job)

    def ended(self, j: SlurmJob, job: JobState) -> None:
        jid = job.spec.id
        if j.state == "COMPLETED":
            if job.status.holds_nodes:
                self.order(f"job:{jid}", CompleteJob, f"slurm:complete:{jid}", job=jid)
        elif j.state == "CANCELLED":
            self.order(
                f"job:{jid}",
                CancelJob,
                f"slurm:cancel:{jid}",
                job=jid,
                reason=f"{CAUSE_PREFIX}job {j.id} was cancelled in Slurm (scancel)",
            )
        elif j.state in FAILED and job.status.holds_nodes:
            reason = f"{CAUSE_PREFIX}job {j.id} {j.state.lower()}" + (
                f": {j.reason}" if j.reason and j.reason != "None" else ""
            )
            self.order(
                f"job:{jid}",
                FailJob,
                f"slurm:fail:{jid}:{_episode(job)}",
                job=jid,
                reason=_clip(reason),
            )

    def shrank(self, j: SlurmJob, job: JobState, assigned: tuple[str, ...]) -> None:
        """A degraded job runs on fewer nodes: with `--no-kill` Slurm took the failed nodes
        out of its allocation and it runs on (requeued and restarted on fewer, without)."""
        self.report(
            job.spec.id,
            "shrank",
            str(len(assigned)),
            assigned,
            f"{CAUSE_PREFIX}job {j.id} runs on {len(assigned)} of its {job.spec.nodes} nodes "
            "(degraded)",
        )

    def report(
        self, jid: str, action: RuntimeAction, anchor: str, nodes: tuple[str, ...], detail: str
    ) -> None:
        """`ReportJobRuntime`, once per (job, action, anchor: an episode of moves, a size)."""
        id_ = f"slurm:{action}:{jid}:{anchor}"
        if id_ in self.v.reported:
            return
        self.order(
            f"job:{jid}:{action}",
            ReportJobRuntime,
            id_,
            job=jid,
            action=action,
            nodes=nodes,
            detail=_clip(detail),
        )

    def problem(self, j: SlurmJob, text: str | None) -> None:
        want = "" if text is None else _clip(f"rackplane: {text}", 500)
        if self.v.problems.get(j.id, "") != want:
            self.actions.append(Problem(j.id, want))

    @staticmethod
    def _start(j: SlurmJob, job: JobState) -> str | None:
        """The `StartTime` a placement sets. A job that ran before starts 2 s from now at the
        soonest: slurmctld kills a restart whose credential is not newer, in whole seconds,
        than its kill of the last run ("Job credential revoked": 2 of 5 restarts in the
        side-by-side bench failed so with `now`). One that never ran and is not held (Slurm
        may hold it back with a begin time) starts now; a held one at its release."""
        if job.started_at is not None or _episode(job) != "0.0.0":
            return RESTART_AT
        return None if j.held else "now"

    @staticmethod
    def _stale(j: SlurmJob, job: JobState) -> bool:
        """A run that started before rackplane's last placement of a preempted job: rackplane
        preempted it and placed it again on the same nodes before the adapter requeued it."""
        return (
            job.preemptions > 0
            and j.started is not None
            and job.placed_at is not None
            and j.started < job.placed_at
        )

    def _down(self, node: str) -> bool:
        v = self.v.nodes.get(node)
        return v is None or bool(v.problems) or self._failed(node)

    def _failed(self, node: str) -> bool:
        n = self.s.nodes.get(node)
        return n is not None and n.health is Health.FAILED


def _clip(text: str, limit: int = 1_000) -> str:
    """`text` on one line, valid free text of at most `limit` characters."""
    return printable(" ".join(text.split()), limit)
