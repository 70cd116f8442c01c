"""What the Kubernetes adapter does next: `plan(state, view) -> Plan`. Pure: no I/O, no clock.

Theory of operation: the adapter holds two pictures, the cluster state folded from rackplane's
log and the API server's nodes and pods. `plan` compares them and says what would make them
agree: commands for rackplane (what Kubernetes saw happen) and actions for the API server (what
rackplane decided). It is level-triggered: it reads only what holds now, never what changed,
so after a crash the same pictures give the same plan, and an action already done is not
planned again (a bound pod is bound; an evicted one is deleting).

The cycle, in steps:
    1. Topology: the racks Kubernetes shows (GPU nodes by NVLink clique), registered when
       rackplane has none or a different one, unless that would pull an allocated node out of
       its rack (the failure reports of step 2 free it first).
    2. Nodes: a node that is not Ready, carries a NoExecute taint or a GPU condition, or is
       gone from the API server is reported `failed`; one that recovers from a failure the
       adapter reported is repaired. `spec.unschedulable` becomes a cordon; an uncordon in
       Kubernetes lifts only a cordon that came from Kubernetes.
    3. Gangs rackplane does not know: submitted once all their pods exist.
    4. Gangs of jobs holding nodes: a pod on a node the job no longer holds (swap, migration,
       degrade) is evicted; an unplaced pod is bound (or, in the gate mode, pinned and
       ungated) to a node of the job that has no pod and no pod of another gang still on it
       (an eviction a PodDisruptionBudget refused, a pod still terminating: the binding
       waits, and the gang's problem says for what); a bare pod that had to go is made
       again; pods carry their slice's shape. All pods Running: `StartJob`; all Succeeded:
       `CompleteJob`; one Failed on a sound node: `FailJob`. When the PodDisruptionBudgets
       over the gang's placed pods allow fewer evictions than there are such pods (or their
       status is not computed yet: the API server then refuses every eviction), rackplane
       is told (`ReportDisruptionBudget`): no defrag picks the job as a victim, no operator
       preempts it, until the budgets allow it again.
    5. Gangs of jobs queued again (preempted) or cancelled: their placed pods are evicted
       (bare ones made again for the next placement, unless cancelled).

Commands carry ids made from what they answer (a job, a node and the spell of its
conditions), so a plan repeated after a restart is deduplicated by the controller; those with
no such anchor (cordons) carry the state's seq and are at worst ignored as already done.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from rackplane.kube.gangs import GangError, gang_spec, job_id
from rackplane.kube.objects import (
    NODE_ANNOTATION,
    PROBLEM_ANNOTATION,
    SLICE_ANNOTATION,
    SLICE_NODES_ANNOTATION,
    SLICES_ANNOTATION,
    BudgetView,
    GroupKey,
    GroupView,
    NodeView,
    PodKey,
    PodView,
    selects,
)
from rackplane.models import (
    Command,
    CompleteJob,
    CordonNode,
    FailJob,
    Health,
    JobStatus,
    RegisterTopology,
    RepairNode,
    ReportDisruptionBudget,
    ReportNodeHealth,
    StartJob,
    SubmitJob,
    Topology,
    UncordonNode,
)
from rackplane.projections import ClusterState, JobState
from rackplane.projections.registration import registration_due
from rackplane.projections.state import NodeState, leaf_named

_PROBLEMS, _UNSCHEDULABLE = (
    NodeView._fields.index("problems"),
    NodeView._fields.index("unschedulable"),
)
_HEALTH, _CORDONED = NodeState._fields.index("health"), NodeState._fields.index("cordoned")

CAUSE_PREFIX = "kube: "
"""Starts the cause of every health report the adapter sends: it repairs only those."""
CORDON_REASON = "kube: spec.unschedulable (kubectl cordon)"
"""The reason of the adapter's cordons: a `kubectl uncordon` lifts only these."""
TERMINAL = frozenset({"Succeeded", "Failed"})


class Bind(NamedTuple):
    """POST the pod's binding to `node`, with `annotations` set on the pod."""

    pod: PodKey
    node: str
    annotations: Mapping[str, str]


class Ungate(NamedTuple):
    """Gate mode: pin the pod to `node` (node affinity), set `annotations`, drop the gate."""

    pod: PodKey
    node: str
    annotations: Mapping[str, str]


class Evict(NamedTuple):
    """Evict the pod (the Eviction API: PodDisruptionBudgets have their say)."""

    pod: PodKey
    reason: str


class Recreate(NamedTuple):
    """Create a copy of bare pod `template` named `name` (`objects.replacement`)."""

    template: PodKey
    name: str
    generation: int
    backfill: bool = False
    """Not the replacement of a pod this plan evicts, but of one missing (gone while the
    adapter was down): the adapter does it only when nothing of the gang is in flight, so a
    creation not yet seen is not made twice."""


class Annotate(NamedTuple):
    """Merge `annotations` into the pod's (None removes one)."""

    pod: PodKey
    annotations: Mapping[str, str | None]


Action = Bind | Ungate | Evict | Recreate | Annotate


class Order(NamedTuple):
    """A command and what it is about: the adapter sends one command per subject at a time."""

    subject: str
    command: Command


class Plan(NamedTuple):
    """What to send to rackplane and what to do to the API server, in order."""

    orders: tuple[Order, ...]
    actions: tuple[Action, ...]


class View(NamedTuple):
    """The API server's side of the comparison."""

    nodes: Mapping[str, NodeView]
    pods: Sequence[PodView]
    topology: Topology | None
    """The GPU nodes of `nodes` as racks (`importers.k8s`, from the same node objects); None
    when they make no topology."""
    kube_cordoned: frozenset[str] = frozenset()
    """Nodes whose cordon in rackplane came from the adapter (`CORDON_REASON`)."""
    groups: Mapping[GroupKey, GroupView] = {}
    """The PodGroups (of every API in `objects.GROUP_APIS` the server serves)."""
    budgets: Sequence[BudgetView] = ()
    """The PodDisruptionBudgets."""


def plan(state: ClusterState, view: View, *, actor: str) -> Plan:
    """The commands and actions that make rackplane and the API server agree (steps above)."""
    p = _Planner(state, view, actor)
    p.topology()
    p.nodes()
    for (namespace, label), pods in sorted(_gangs(view.pods).items()):
        p.gang(job_id(namespace, label), pods)
    return Plan(tuple(p.orders), tuple(p.actions))


def _gangs(pods: Iterable[PodView]) -> dict[tuple[str, str], list[PodView]]:
    out: dict[tuple[str, str], list[PodView]] = defaultdict(list)
    for pod in pods:
        out[(pod.key.namespace, pod.job)].append(pod)
    for members in out.values():
        members.sort(key=lambda p: p.key.name)
    return out


def shape(job: JobState, node: str) -> dict[str, str]:
    """The annotations a pod of `job` on `node` carries: its node, slice and slice shape."""
    slices = ",".join(str(len(s.nodes)) for s in job.slices)
    for s in job.slices:
        if node in s.nodes:
            return {
                NODE_ANNOTATION: node,
                SLICE_ANNOTATION: str(s.index),
                SLICE_NODES_ANNOTATION: str(len(s.nodes)),
                SLICES_ANNOTATION: slices,
            }
    return {NODE_ANNOTATION: node, SLICES_ANNOTATION: slices}


class _Planner:
    def __init__(self, state: ClusterState, view: View, actor: str) -> None:
        self.s, self.v, self.actor = state, view, actor
        self.orders: list[Order] = []
        self.actions: list[Action] = []
        self.budgets: dict[str, list[BudgetView]] = defaultdict(list)
        for b in view.budgets:
            self.budgets[b.namespace].append(b)
        self.occupants: dict[str, set[str]] = defaultdict(set)
        """The gangs (job ids) with a pod on each node that is not done (terminating ones
        included: their containers may still hold the GPUs)."""
        for pod in view.pods:
            if pod.node and pod.phase not in TERMINAL:
                self.occupants[pod.node].add(job_id(pod.key.namespace, pod.job))

    def order(self, subject: str, kind: type[Command], id_: str, **fields: object) -> None:
        command = kind(id=id_, cluster=self.s.cluster, actor=self.actor, **fields)
        self.orders.append(Order(subject, command))

    # -- 1. topology ------------------------------------------------------------------------

    def topology(self) -> None:
        digest = registration_due(self.s, self.v.topology)
        if digest is not None:
            self.order(
                "topology", RegisterTopology, f"kube:register:{digest}", topology=self.v.topology
            )

    # -- 2. nodes ---------------------------------------------------------------------------

    def nodes(self) -> None:
        # Only a node with something to say can need a command: one Kubernetes shows with a
        # problem or unschedulable, one rackplane holds failed or cordoned, or one the API
        # server no longer has (none when the topology the nodes make is rackplane's: its
        # nodes are all listed). Found in cheap passes (by index: a named tuple's attribute
        # costs several times more, and at 73,728 nodes these passes are most of a plan),
        # then examined in name order.
        views, nodes = self.v.nodes, self.s.nodes
        suspects = {n for n, v in views.items() if v[_PROBLEMS] or v[_UNSCHEDULABLE]}
        failed = Health.FAILED
        suspects.update(n[0] for n in nodes.values() if n[_HEALTH] is failed or n[_CORDONED])
        index = self.s.index
        if index is None or self.v.topology is None or index.topology != self.v.topology:
            suspects.update(n for n in nodes if n not in views)
        for name in sorted(suspects):
            node = nodes.get(name)
            if node is None:
                continue  # not in rackplane's topology (yet): step 1's business
            v = views.get(name)
            problems = v.problems if v is not None else ("gone from the API server",)
            episode = v.episode if v is not None else "gone"
            if problems and node.health is not Health.FAILED:
                self.order(
                    f"health:{node.id}",
                    ReportNodeHealth,
                    f"kube:health:{node.id}:{episode}",
                    node=node.id,
                    health=Health.FAILED,
                    cause=_clip(CAUSE_PREFIX + "; ".join(problems)),
                )
            elif (
                not problems
                and node.health is Health.FAILED
                and node.cause.startswith(CAUSE_PREFIX)
            ):
                self.order(
                    f"health:{node.id}",
                    RepairNode,
                    f"kube:repair:{node.id}:{episode}",
                    node=node.id,
                    note="kube: the node is Ready again",
                )
            if v is None:
                continue
            if v.unschedulable and not node.cordoned:
                self.order(
                    f"cordon:{node.id}",
                    CordonNode,
                    f"kube:cordon:{node.id}:{self.s.seq}",
                    node=node.id,
                    reason=CORDON_REASON,
                )
            elif not v.unschedulable and node.cordoned and node.id in self.v.kube_cordoned:
                self.order(
                    f"cordon:{node.id}",
                    UncordonNode,
                    f"kube:uncordon:{node.id}:{self.s.seq}",
                    node=node.id,
                )

    # -- 3-5. gangs -------------------------------------------------------------------------

    def gang(self, jid: str, pods: list[PodView]) -> None:
        job = self.s.jobs.get(jid)
        live = [p for p in pods if not p.deleting]
        if job is None:
            if self.s.finished.get(jid) is JobStatus.CANCELLED:
                for p in live:
                    if p.phase not in TERMINAL:
                        self.actions.append(Evict(p.key, f"rackplane cancelled job {jid}"))
            elif jid not in self.s.finished:
                self.submit(jid, live)
            return
        if job.status.holds_nodes:
            self.placed(job, pods, live)
            self.budget(job, pods[0].key.namespace, live)
        elif job.status is JobStatus.QUEUED:
            gone = [p for p in live if p.node and p.phase not in TERMINAL]
            for p in gone:
                self.actions.append(Evict(p.key, f"job {jid} was preempted and queued again"))
            self.remake(pods, gone, len(gone))

    def submit(self, jid: str, live: list[PodView]) -> None:
        if not live:
            return
        strangers = [p for p in live if not p.ours]
        if strangers:
            return self.flag(
                live,
                f"{len(strangers)} pod(s) of the gang neither use schedulerName rackplane nor "
                "carry the rackplane.io/placement gate",
            )
        group = None
        if live[0].group:
            group = self.v.groups.get(live[0].group_key)
            if group is None:
                return self.flag(
                    live,
                    f"PodGroup {live[0].group} ({live[0].group_api}) does not exist (yet): "
                    "the gang waits for it",
                )
        try:
            spec = gang_spec(live[0], group)
        except GangError as err:
            return self.flag(live, str(err))
        if spec.queue is None and (queue := leaf_named(self.s, [live[0].key.namespace])):
            spec = spec.model_copy(update={"queue": queue})
        if len(live) > spec.nodes:
            return self.flag(
                live, f"the gang has {len(live)} pods; rackplane.io/nodes says {spec.nodes}"
            )
        self.flag(live, None)
        if len(live) == spec.nodes and not any(p.node for p in live):
            self.order(f"job:{jid}", SubmitJob, f"kube:submit:{jid}", job=spec)

    def placed(self, job: JobState, pods: list[PodView], live: list[PodView]) -> None:
        jid = job.spec.id
        assigned = [n for s in job.slices for n in s.nodes]
        holds = set(assigned)
        gone = [p for p in live if p.node and p.node not in holds and p.phase not in TERMINAL]
        for p in gone:
            self.actions.append(
                Evict(
                    p.key, f"node {p.node} no longer serves job {jid} (swap, migration or degrade)"
                )
            )
        kept = [p for p in live if p not in gone]
        on: dict[str, PodView] = {}
        for p in kept:
            if p.node in holds:
                on.setdefault(p.node, p)
        free = [n for n in assigned if n not in on]
        waiting = [p for p in kept if not p.node and p.ours and p.phase not in TERMINAL]
        held = [n for n in free if self.occupants.get(n, set()) - {jid}]
        if held:
            free = [n for n in free if n not in held]
            others = sorted({o for n in held for o in self.occupants[n] - {jid}})
            self.flag(
                waiting[len(free) :],
                f"waiting for {len(held)} node(s) of the job to be left by "
                f"{', '.join(others[:3])}{' ...' if len(others) > 3 else ''} "
                f"(first: {held[0]}): an eviction not yet done or refused",
            )
        else:
            self.flag(waiting[len(free) :], None)
        for pod, node in zip(waiting, free, strict=False):
            annotations = shape(job, node)
            if pod.gated:
                self.actions.append(Ungate(pod.key, node, annotations))
            else:
                self.actions.append(Bind(pod.key, node, annotations))
        self.remake(pods, gone, len(assigned) - len(kept))
        for node, pod in on.items():
            want: dict[str, str | None] = dict(shape(job, node))
            if PROBLEM_ANNOTATION in pod.annotations:  # it waited for its node: placed now
                want[PROBLEM_ANNOTATION] = None
            if any(pod.annotations.get(k) != v for k, v in want.items()):
                self.actions.append(Annotate(pod.key, want))
        self.lifecycle(job, assigned, on)

    def budget(self, job: JobState, namespace: str, live: list[PodView]) -> None:
        """Tell rackplane whether the gang's disruption budgets allow it to be disrupted."""
        placed = [p for p in live if p.node and p.phase not in TERMINAL]
        refusing = []
        for b in self.budgets.get(namespace, ()):
            covered = sum(1 for p in placed if selects(b.selector, p.labels))
            if covered and b.allowed < covered:
                why = f"allows {b.allowed} eviction(s)" if b.computed else "is not computed yet"
                refusing.append(f"{b.title} ({why}; the gang has {covered} pod(s) under it)")
        if bool(refusing) == (job.protected_by is not None):
            return
        self.order(
            f"budget:{job.id}",
            ReportDisruptionBudget,
            f"kube:budget:{job.id}:{'refuses' if refusing else 'allows'}:{self.s.seq}",
            job=job.id,
            allows=not refusing,
            budget=_clip("; ".join(refusing), 500),
        )

    def lifecycle(self, job: JobState, assigned: list[str], on: dict[str, PodView]) -> None:
        jid = job.spec.id
        bound = [on[n] for n in assigned if n in on and on[n].bound]
        episode = f"{job.preemptions}.{job.migrations}.{job.swaps}"
        complete = len(bound) == len(assigned)
        running = all(p.phase in ("Running", "Succeeded") for p in bound)
        if job.status is JobStatus.PLACED and complete and running:
            pods = tuple(str(p.key) for p in bound)
            self.order(f"job:{jid}", StartJob, f"kube:start:{jid}:{episode}", job=jid, pods=pods)
        if complete and all(p.phase == "Succeeded" for p in bound):
            self.order(f"job:{jid}", CompleteJob, f"kube:complete:{jid}", job=jid)
            return
        for p in bound:
            node = self.v.nodes.get(p.node)
            if p.phase == "Failed" and node is not None and not node.problems:
                reason = f"pod {p.key} failed" + (f": {p.reason}" if p.reason else "")
                self.order(
                    f"job:{jid}",
                    FailJob,
                    f"kube:fail:{jid}:{episode}",
                    job=jid,
                    reason=_clip(reason),
                )
                return

    def remake(self, pods: list[PodView], gone: list[PodView], deficit: int) -> None:
        """Make bare pods again, `deficit` of them (the job's nodes without a pod): each pod
        that goes gets one replacement, named after it (`<base>-r<generation + 1>`), as long
        as the job needs it (a degraded slice needs none); with none going, missing ones are
        backfilled from the gang's live pods."""
        if not pods or not all(p.bare for p in pods):
            return
        names = {p.key.name for p in pods}
        for t in gone[: max(deficit, 0)]:
            name = f"{t.base_name}-r{t.generation + 1}"
            if name not in names:  # made already (the pod's eviction waits on a budget)
                self.actions.append(Recreate(t.key, name, t.generation + 1))
        if gone or deficit <= 0:
            return
        templates = [p for p in pods if not p.deleting] or pods
        generation = max(p.generation for p in pods)
        for i in range(deficit):
            t = templates[i % len(templates)]
            generation += 1
            self.actions.append(Recreate(t.key, f"{t.base_name}-r{generation}", generation, True))

    def flag(self, pods: list[PodView], problem: str | None) -> None:
        """Write (or clear) the gang's problem on its pods."""
        for p in pods:
            if p.annotations.get(PROBLEM_ANNOTATION) != problem:
                self.actions.append(Annotate(p.key, {PROBLEM_ANNOTATION: problem}))


def _clip(text: str, limit: int = 1_000) -> str:
    """`text` on one line (control characters out), at most `limit` characters."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
