"""The Kubernetes adapter's rules (`rackplane.kube.plan`), without a server.

A small world: the controller and the production policies in the in-process engine, and the
API server's nodes and pods as JSON dicts. `World.settle()` runs the adapter's cycle to a fixed
point: plan, hand the orders to the engine, do the actions to the dicts (what the API server
would do to them), plan again. The real API server is in tests/k8s.

    rack r1: r1-n01 .. r1-n06        rack r2: r2-n01 .. r2-n06
    (one NVLink clique each, 4 GPUs per node, 1 spare per rack)
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackplane.engine import Engine
from rackplane.importers.k8s import k8s_topology
from rackplane.kube import (
    GATE,
    JOB_LABEL,
    Annotate,
    Bind,
    Evict,
    Plan,
    PodKey,
    Recreate,
    Ungate,
    View,
    plan,
)
from rackplane.kube._api import pin_ops
from rackplane.kube.gangs import GangError, gang_spec
from rackplane.kube.objects import (
    AFFINITY_ANNOTATION,
    BASE_NAME_ANNOTATION,
    GENERATION_ANNOTATION,
    NODE_ANNOTATION,
    PROBLEM_ANNOTATION,
    SLICE_ANNOTATION,
    SLICES_ANNOTATION,
    budget_view,
    group_view,
    node_view,
    pod_view,
    replacement,
    selects,
)
from rackplane.kube.plan import CORDON_REASON
from rackplane.models import (
    CommandRejected,
    CordonNode,
    DisruptionBudgetReported,
    Event,
    Health,
    JobKind,
    JobStarted,
    JobStatus,
    NodeSwapped,
    PolicySettings,
    PreemptJobs,
    QueueSpec,
    RegisterTopology,
    ReportDisruptionBudget,
    ReportNodeHealth,
    SliceDegraded,
    StartJob,
    SubmitJob,
    UncordonNode,
)
from rackplane.policies.presets import default_policies

CLUSTER = "c1"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ACTOR = "runtime:kube"


def k8s_node(name: str, clique: str, **status: Any) -> dict[str, Any]:
    ready = status.get("ready", "True")
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.clique": f"uuid.{clique}"}},
        "spec": {
            "unschedulable": status.get("unschedulable", False),
            "taints": status.get("taints", []),
        },
        "status": {
            "capacity": {"nvidia.com/gpu": "4"},
            "conditions": [
                {"type": "Ready", "status": ready, "lastTransitionTime": status.get("since", "t0")},
                *status.get("conditions", []),
            ],
        },
    }


def k8s_pod(
    name: str, job: str, nodes: int, *, gated: bool = False, ns: str = "team", **meta: str
) -> dict[str, Any]:
    annotations = {"rackplane.io/nodes": str(nodes), **meta}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer:1"}]}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    else:
        spec["schedulerName"] = "rackplane"
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {JOB_LABEL: job},
            "annotations": annotations,
            "resourceVersion": "1",
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


class World:
    """The engine (rackplane) and the API server's objects, and the adapter's cycle between."""

    def __init__(self, racks: int = 2, per_rack: int = 6, **policy: Any) -> None:
        self.nodes = {
            f"r{r}-n{i:02d}": k8s_node(f"r{r}-n{i:02d}", f"r{r}")
            for r in range(1, racks + 1)
            for i in range(1, per_rack + 1)
        }
        self.pods: dict[PodKey, dict[str, Any]] = {}
        self.engine = Engine(CLUSTER, clock=lambda: T0, policies=default_policies())
        self.events: list[Event] = []
        self.settings = PolicySettings(spares_per_rack=1, **policy)
        self.kube_cordoned: set[str] = set()
        self.groups: dict[Any, dict[str, Any]] = {}
        self.budgets: list[dict[str, Any]] = []
        self.refuse: set[PodKey] = set()
        """Pods whose eviction the API server refuses (a PodDisruptionBudget's 429)."""

    @property
    def state(self) -> Any:
        return self.engine.state

    def view(self) -> View:
        topology = k8s_topology(list(self.nodes.values()), cluster=CLUSTER).topology
        views = [pod_view(p) for p in self.pods.values()]
        return View(
            nodes={n: node_view(o) for n, o in self.nodes.items()},
            pods=[v for v in views if v is not None],
            topology=topology,
            kube_cordoned=frozenset(self.kube_cordoned),
            groups={v.key: v for v in map(group_view, self.groups.values())},
            budgets=[budget_view(b) for b in self.budgets],
        )

    def plan(self) -> Plan:
        return plan(self.state, self.view(), actor=ACTOR)

    def handle(self, command: Any) -> list[Event]:
        if isinstance(command, RegisterTopology) and command.settings is None:
            command = command.model_copy(update={"settings": self.settings})
        events = self.engine.handle(command)
        self.events.extend(events)
        for e in events:
            if type(e).__name__ == "NodeCordoned" and e.reason == CORDON_REASON:  # type: ignore[attr-defined]
                self.kube_cordoned.add(e.node)  # type: ignore[attr-defined]
        return events

    def settle(self, rounds: int = 20) -> list[Plan]:
        """Plan and carry out until a plan is empty (but for the evictions the API server
        refuses, which the adapter tries again); the plans made."""
        plans = []
        for _ in range(rounds):
            p = self.plan()
            if not p.orders and all(
                isinstance(a, Evict) and a.pod in self.refuse for a in p.actions
            ):
                return plans
            plans.append(p)
            for order in p.orders:
                self.handle(order.command)
            for action in p.actions:
                self.do(action)
        raise AssertionError(f"no fixed point in {rounds} rounds; last plan {plans[-1]}")

    def do(self, action: Any) -> None:
        match action:
            case Bind(pod=key, node=node, annotations=a):
                pod = self.pods[key]
                assert not pod["spec"].get("nodeName"), f"{key} bound twice"
                pod["spec"]["nodeName"] = node
                pod["metadata"]["annotations"].update(a)
            case Ungate(pod=key, node=node, annotations=a):
                pod = self.pods[key]
                pod["spec"]["affinity"] = {"pinned": node}
                pod["spec"]["schedulingGates"] = []
                pod["metadata"]["annotations"].update({**a, AFFINITY_ANNOTATION: "null"})
            case Evict(pod=key):
                if key not in self.refuse:
                    self.pods[key]["metadata"]["deletionTimestamp"] = "now"
            case Recreate(template=key, name=name, generation=g):
                new = replacement(self.pods[key], name, g)
                new["metadata"]["resourceVersion"] = "1"
                assert PodKey(key.namespace, name) not in self.pods, f"{name} made twice"
                self.pods[PodKey(key.namespace, name)] = new
            case Annotate(pod=key, annotations=a):
                annotations = self.pods[key]["metadata"]["annotations"]
                for k, v in a.items():
                    if v is None:
                        annotations.pop(k, None)
                    else:
                        annotations[k] = v

    def gang(self, job: str, nodes: int, *, gated: bool = False, **meta: str) -> list[PodKey]:
        keys = []
        for i in range(nodes):
            pod = k8s_pod(f"{job}-{i}", job, nodes, gated=gated, **meta)
            key = PodKey("team", pod["metadata"]["name"])
            self.pods[key] = pod
            keys.append(key)
        return keys

    def kubelet(self, phase: str = "Running", only: set[PodKey] | None = None) -> None:
        """What kwok does: bound pods run (or end), deleting pods go."""
        for key, pod in list(self.pods.items()):
            if pod["metadata"].get("deletionTimestamp"):
                del self.pods[key]
            elif pod["spec"].get("nodeName") and (only is None or key in only):
                pod.setdefault("status", {})["phase"] = phase

    def on(self, key: PodKey) -> str:
        return str(self.pods[key]["spec"].get("nodeName", ""))


def running_gang(world: World, job: str, nodes: int) -> list[PodKey]:
    """A gang of `nodes` pods in one slice, placed, bound and Running."""
    keys = world.gang(job, nodes, **{"rackplane.io/slice-size": str(nodes)})
    world.settle()
    world.kubelet("Running")
    world.settle()
    return keys


def job_nodes(world: World, job: str) -> list[str]:
    return [n for s in world.state.jobs[job].slices for n in s.nodes]


@pytest.fixture
def world() -> World:
    w = World()
    w.settle()
    return w


# -- topology and nodes -----------------------------------------------------------------------


def test_the_first_plan_registers_the_racks_kubernetes_shows() -> None:
    w = World()
    p = w.plan()
    assert [type(o.command) for o in p.orders] == [RegisterTopology]
    topology = p.orders[0].command.topology  # type: ignore[union-attr]
    assert [r.id for r in topology.racks] == ["uuid.r1", "uuid.r2"]
    w.settle()
    assert w.plan() == Plan((), ())


def test_a_new_node_is_a_re_registration_with_it(world: World) -> None:
    world.nodes["r2-n07"] = k8s_node("r2-n07", "r2")
    (order,) = world.plan().orders
    assert isinstance(order.command, RegisterTopology)
    world.settle()
    assert "r2-n07" in world.state.nodes


def test_a_node_not_ready_is_reported_failed_once_per_spell(world: World) -> None:
    world.nodes["r1-n02"] = k8s_node("r1-n02", "r1", ready="False", since="t1")
    (order,) = world.plan().orders
    c = order.command
    assert isinstance(c, ReportNodeHealth) and c.health is Health.FAILED
    assert c.cause.startswith("kube: Ready=False")
    again = world.plan().orders[0].command
    assert again.id == c.id  # the same spell: the controller dedupes a resend
    world.settle()
    assert world.state.nodes["r1-n02"].health is Health.FAILED
    world.nodes["r1-n02"] = k8s_node("r1-n02", "r1", ready="True", since="t2")
    (repair,) = world.plan().orders
    assert type(repair.command).__name__ == "RepairNode"
    world.settle()
    assert world.state.nodes["r1-n02"].health is Health.HEALTHY


@pytest.mark.parametrize(
    "trouble",
    [
        {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
        {"conditions": [{"type": "GpuXidError", "status": "True", "message": "XID 79"}]},
    ],
    ids=["a NoExecute taint", "a GPU condition"],
)
def test_a_no_execute_taint_or_a_gpu_condition_fails_the_node(
    world: World, trouble: dict[str, Any]
) -> None:
    world.nodes["r1-n03"] = k8s_node("r1-n03", "r1", **trouble)
    (order,) = world.plan().orders
    assert isinstance(order.command, ReportNodeHealth)
    assert order.command.node == "r1-n03"


def test_a_free_node_gone_from_the_api_server_leaves_the_topology(world: World) -> None:
    del world.nodes["r1-n04"]
    world.settle()
    assert "r1-n04" not in world.state.nodes


def test_a_node_gone_under_a_job_is_failed_and_swapped_before_it_leaves_the_topology(
    world: World,
) -> None:
    running_gang(world, "train", 4)
    gone = job_nodes(world, "team/train")[0]
    del world.nodes[gone]
    p = world.plan()
    assert [type(o.command) for o in p.orders] == [ReportNodeHealth]  # no registration yet
    assert "gone from the API server" in p.orders[0].command.cause  # type: ignore[union-attr]
    world.settle()
    assert gone not in job_nodes(world, "team/train")
    assert gone not in world.state.nodes  # re-registered once it held nothing


def test_kubectl_cordon_and_uncordon_reach_rackplane(world: World) -> None:
    world.nodes["r1-n01"]["spec"]["unschedulable"] = True
    (order,) = world.plan().orders
    assert isinstance(order.command, CordonNode) and order.command.reason == CORDON_REASON
    world.settle()
    assert world.state.nodes["r1-n01"].cordoned
    world.nodes["r1-n01"]["spec"]["unschedulable"] = False
    (order,) = world.plan().orders
    assert isinstance(order.command, UncordonNode)


def test_an_operators_cordon_in_rackplane_is_not_lifted_by_kubernetes(world: World) -> None:
    world.handle(
        CordonNode(id="op-1", cluster=CLUSTER, actor="operator:alice", node="r1-n01", reason="x")
    )
    assert world.state.nodes["r1-n01"].cordoned
    assert world.plan() == Plan((), ())


# -- gangs ------------------------------------------------------------------------------------


def test_a_gang_is_submitted_once_all_its_pods_exist(world: World) -> None:
    keys = world.gang("train", 8, **{"rackplane.io/slice-size": "4", "rackplane.io/priority": "5"})
    saved = world.pods.pop(keys[-1])
    assert world.plan() == Plan((), ())  # 7 of 8: nothing
    world.pods[keys[-1]] = saved
    (order,) = world.plan().orders
    c = order.command
    assert isinstance(c, SubmitJob)
    assert c.id == "kube:submit:team/train"
    assert (c.job.id, c.job.nodes, c.job.slice_size, c.job.priority) == ("team/train", 8, 4, 5)
    assert c.job.owner == "kube:team"


def test_a_placed_gang_is_bound_rack_local_one_pod_per_node(world: World) -> None:
    keys = world.gang("train", 8, **{"rackplane.io/slice-size": "4"})
    plans = world.settle()
    binds = [a for p in plans for a in p.actions if isinstance(a, Bind)]
    assert len(binds) == 8
    assert sorted(world.on(k) for k in keys) == sorted(job_nodes(world, "team/train"))
    for k in keys:
        node = world.on(k)
        annotations = world.pods[k]["metadata"]["annotations"]
        assert annotations[NODE_ANNOTATION] == node
        assert annotations[SLICES_ANNOTATION] == "4,4"
        slice_ = world.state.jobs["team/train"].slices[int(annotations[SLICE_ANNOTATION])]
        assert node in slice_.nodes and len({n.split("-")[0] for n in slice_.nodes}) == 1


def test_all_pods_running_starts_the_job_naming_its_pods_and_all_succeeded_completes_it(
    world: World,
) -> None:
    keys = world.gang("train", 4, **{"rackplane.io/slice-size": "4"})
    world.settle()
    world.kubelet("Running", only=set(keys[:3]))
    world.settle()
    assert world.state.jobs["team/train"].status is JobStatus.PLACED
    world.kubelet("Running")
    world.settle()
    assert world.state.jobs["team/train"].status is JobStatus.RUNNING
    (started,) = [e for e in world.events if isinstance(e, JobStarted)]
    assert sorted(started.pods) == sorted(str(k) for k in keys)
    world.kubelet("Succeeded")
    world.settle()
    assert world.state.finished["team/train"] is JobStatus.COMPLETED


def test_a_failed_pod_on_a_sound_node_fails_the_job(world: World) -> None:
    keys = running_gang(world, "train", 4)
    pod = world.pods[keys[1]]
    pod["status"] = {"phase": "Failed", "reason": "Error", "message": "exit code 1"}
    world.settle()
    assert world.state.finished["team/train"] is JobStatus.FAILED


def test_a_failed_node_under_a_gang_is_swapped_the_pod_made_again_on_the_spare(
    world: World,
) -> None:
    keys = running_gang(world, "train", 4)
    victim = keys[2]
    old = world.on(victim)
    world.nodes[old] = k8s_node(old, old.split("-")[0], ready="False", since="t1")
    plans = world.settle()
    (swap,) = [e for e in world.events if isinstance(e, NodeSwapped)]
    assert swap.old_node == old
    actions = [a for p in plans for a in p.actions]
    assert Evict(victim, actions[0].reason) in actions  # type: ignore[union-attr]
    (made,) = [a for a in actions if isinstance(a, Recreate)]
    assert made.template == victim and made.name == f"{victim.name}-r1"
    world.kubelet("Running")
    world.settle()
    new = PodKey("team", made.name)
    assert world.on(new) == swap.new_node
    assert world.pods[new]["metadata"]["annotations"][BASE_NAME_ANNOTATION] == victim.name
    assert world.state.jobs["team/train"].status is JobStatus.RUNNING


def k8s_budget(
    name: str, selector: dict[str, Any] | None, allowed: int, *, computed: bool = True
) -> dict[str, Any]:
    spec: dict[str, Any] = {"minAvailable": 1}
    if selector is not None:
        spec["selector"] = selector
    return {
        "metadata": {"name": name, "namespace": "team", "generation": 2},
        "spec": spec,
        "status": {"observedGeneration": 2 if computed else 1, "disruptionsAllowed": allowed},
    }


@pytest.mark.parametrize(
    ("selector", "picks"),
    [
        (None, False),  # policy/v1: a null selector selects no pod
        ({}, True),  # an empty one selects every pod of the namespace
        ({"matchLabels": {"app": "a"}}, True),
        ({"matchLabels": {"app": "b"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, False),
        ({"matchLabels": {"app": "a"}, "matchExpressions": [{"key": "t", "operator": "Exists"}]},
         False),
    ],
)  # fmt: skip
def test_a_label_selector_picks_as_the_api_server_does(selector: Any, picks: bool) -> None:
    assert selects(selector, {"app": "a"}) is picks


def test_a_budget_that_allows_fewer_evictions_than_the_gang_has_pods_protects_its_job(
    world: World,
) -> None:
    running_gang(world, "train", 4)
    selector = {"matchLabels": {JOB_LABEL: "train"}}
    world.budgets = [k8s_budget("enough", selector, 4), k8s_budget("elsewhere", {}, 0)]
    world.budgets[1]["metadata"]["namespace"] = "other"
    assert world.plan() == Plan((), ())  # 4 of 4 allowed; the other namespace's is not ours
    world.budgets.append(k8s_budget("tight", selector, 3))
    (order,) = world.plan().orders
    c = order.command
    assert isinstance(c, ReportDisruptionBudget) and c.job == "team/train" and not c.allows
    assert "PodDisruptionBudget team/tight (allows 3 eviction(s)" in c.budget
    world.settle()
    assert world.state.jobs["team/train"].protected_by == c.budget
    world.budgets.pop()  # the budget is deleted: the job may be disrupted again
    world.settle()
    assert world.state.jobs["team/train"].protected_by is None
    reports = [e for e in world.events if isinstance(e, DisruptionBudgetReported)]
    assert [e.allows for e in reports] == [False, True]


def test_a_budget_whose_status_is_not_computed_refuses_as_the_api_server_would(
    world: World,
) -> None:
    world.gang("train", 2, **{"rackplane.io/slice-size": "2"})
    world.budgets = [k8s_budget("new", {"matchExpressions": [
        {"key": JOB_LABEL, "operator": "In", "values": ["train", "x"]}
    ]}, 5, computed=False)]  # fmt: skip
    world.settle()
    protected = world.state.jobs["team/train"].protected_by
    assert protected is not None and "is not computed yet" in protected


def test_a_pod_is_not_bound_to_a_node_another_gangs_pod_has_not_left(world: World) -> None:
    a = world.gang("a", 4, **{"rackplane.io/slice-size": "4"})
    world.gang("c", 5, **{"rackplane.io/slice-size": "5"})
    world.settle()
    world.kubelet("Running")
    world.settle()
    rack_a = {world.on(k).split("-")[0] for k in a}
    b = world.gang("b", 5, **{"rackplane.io/slice-size": "5", "rackplane.io/priority": "9"})
    world.settle()
    assert world.state.jobs["team/b"].status is JobStatus.QUEUED  # no rack has 5 free
    world.refuse = set(a)  # a budget refuses a's evictions (the adapter's protection raced)
    world.handle(PreemptJobs(id="p1", cluster=CLUSTER, actor="policy:defrag", jobs=("team/a",)))
    assert {n.split("-")[0] for n in job_nodes(world, "team/b")} == rack_a
    world.settle()
    held = {world.on(k) for k in a}
    bound = {world.on(k) for k in b} - {""}
    assert len(bound) == 1 and not bound & held  # only the node nobody was on
    waiting = [k for k in b if not world.on(k)]
    problems = {world.pods[k]["metadata"]["annotations"].get(PROBLEM_ANNOTATION) for k in waiting}
    (problem,) = problems
    assert problem is not None and "left by team/a" in problem
    world.refuse.clear()  # the budget allows: a's pods go, b's take their nodes once gone
    world.settle()
    assert len({world.on(k) for k in b} - {""}) == 1  # terminating pods still hold the GPUs
    for _ in range(2):
        world.kubelet("Running")
        world.settle()
    assert sorted(world.on(k) for k in b) == sorted(job_nodes(world, "team/b"))
    assert all(PROBLEM_ANNOTATION not in world.pods[k]["metadata"]["annotations"] for k in b)
    assert world.state.jobs["team/b"].status is JobStatus.RUNNING


def test_a_preempted_gang_is_evicted_and_made_again_for_its_next_placement(world: World) -> None:
    keys = running_gang(world, "train", 4)
    world.handle(PreemptJobs(id="p1", cluster=CLUSTER, actor="policy:defrag", jobs=("team/train",)))
    job = world.state.jobs["team/train"]
    if job.status is JobStatus.QUEUED:  # not placed again at once: its pods go first
        p = world.plan()
        assert {a.pod for a in p.actions if isinstance(a, Evict)} == set(keys)
    world.settle()
    world.kubelet("Running")
    world.settle()
    live = [k for k, pod in world.pods.items() if not pod["metadata"].get("deletionTimestamp")]
    assert len(live) == 4
    assert sorted(world.on(k) for k in live) == sorted(job_nodes(world, "team/train"))


def test_an_interactive_gang_is_never_evicted_by_the_adapter_on_its_own(world: World) -> None:
    world.gang("notebook", 2, **{"rackplane.io/kind": "interactive"})
    world.settle()
    world.kubelet("Running")
    plans = world.settle()
    assert world.state.jobs["team/notebook"].spec.kind is JobKind.INTERACTIVE
    assert not [a for p in plans for a in p.actions if isinstance(a, Evict)]


def test_the_gate_mode_pins_and_ungates_instead_of_binding(world: World) -> None:
    keys = world.gang("serve", 2, gated=True)
    plans = world.settle()
    ungates = [a for p in plans for a in p.actions if isinstance(a, Ungate)]
    assert {u.pod for u in ungates} == set(keys)
    assert not [a for p in plans for a in p.actions if isinstance(a, Bind)]
    assert {u.node for u in ungates} == set(job_nodes(world, "team/serve"))


def test_a_gang_that_cannot_be_read_is_flagged_on_its_pods_and_not_submitted(
    world: World,
) -> None:
    keys = world.gang("bad", 2, **{"rackplane.io/slice-size": "many"})
    p = world.plan()
    assert not p.orders
    assert all(isinstance(a, Annotate) for a in p.actions)
    world.settle()
    problem = world.pods[keys[0]]["metadata"]["annotations"][PROBLEM_ANNOTATION]
    assert "slice-size" in problem and "whole number" in problem
    for k in keys:
        world.pods[k]["metadata"]["annotations"]["rackplane.io/slice-size"] = "2"
    world.settle()
    assert PROBLEM_ANNOTATION not in world.pods[keys[0]]["metadata"]["annotations"]
    assert "team/bad" in world.state.jobs


def test_a_plan_repeated_after_a_restart_asks_for_nothing_new(world: World) -> None:
    world.gang("train", 8, **{"rackplane.io/slice-size": "4"})
    world.settle()
    world.kubelet("Running")
    world.settle()
    assert world.plan() == Plan((), ())
    # The same pictures rebuilt from scratch (a restarted adapter) give the same empty plan.
    fresh = World()
    fresh.engine.state = world.state
    fresh.pods = copy.deepcopy(world.pods)
    assert plan(fresh.state, fresh.view(), actor=ACTOR) == Plan((), ())


@settings(max_examples=60, deadline=None)
@given(
    bound=st.sets(st.integers(0, 7)),
    extra=st.integers(0, 2),
)
def test_binds_go_to_distinct_free_nodes_of_the_job(bound: set[int], extra: int) -> None:
    """Whatever part of a gang is already bound, the plan never binds two pods to one node,
    nor a pod to a node that has one, nor to a node the job does not hold."""
    w = World()
    w.settle()
    keys = w.gang("train", 8, **{"rackplane.io/slice-size": "4"})
    w.handle(w.plan().orders[0].command)
    nodes = job_nodes(w, "team/train")
    for i in sorted(bound):
        w.pods[keys[i]]["spec"]["nodeName"] = nodes[i]
    binds = [a for a in w.plan().actions if isinstance(a, Bind)]
    targets = [b.node for b in binds]
    assert len(targets) == len(set(targets))
    assert set(targets) <= set(nodes) - {nodes[i] for i in bound}
    assert len(binds) == 8 - len(bound)


# -- the pieces -------------------------------------------------------------------------------


def test_a_replacement_drops_the_node_and_placement_but_keeps_the_spec() -> None:
    pod = k8s_pod("w-3", "train", 4)
    pod["spec"]["nodeName"] = "r1-n01"
    pod["metadata"]["annotations"].update({NODE_ANNOTATION: "r1-n01", SLICE_ANNOTATION: "0"})
    pod["metadata"]["uid"] = "u-1"
    new = replacement(pod, "w-3-r1", 1)
    assert "nodeName" not in new["spec"]
    assert new["spec"]["containers"] == pod["spec"]["containers"]
    assert new["metadata"]["name"] == "w-3-r1" and "uid" not in new["metadata"]
    a = new["metadata"]["annotations"]
    assert NODE_ANNOTATION not in a and SLICE_ANNOTATION not in a
    assert a[BASE_NAME_ANNOTATION] == "w-3" and a[GENERATION_ANNOTATION] == "1"
    assert a["rackplane.io/nodes"] == "4"


def test_a_gate_mode_replacement_is_gated_again_with_its_own_affinity() -> None:
    pod = k8s_pod("s-0", "serve", 2, gated=True)
    pod["spec"]["schedulingGates"] = []
    pod["spec"]["affinity"] = {"nodeAffinity": "pinned"}
    pod["metadata"]["annotations"][AFFINITY_ANNOTATION] = '{"podAntiAffinity": {}}'
    new = replacement(pod, "s-0-r1", 1)
    assert new["spec"]["affinity"] == {"podAntiAffinity": {}}
    assert new["spec"]["schedulingGates"] == [{"name": GATE}]


@pytest.mark.parametrize(
    ("affinity", "paths"),
    [
        (None, ["/spec/affinity"]),
        ({"podAffinity": {}}, ["/spec/affinity/nodeAffinity"]),
        (
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "a"}]},
                                      {"matchFields": [{"key": "b"}]}]}}},
            [
                "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
                "/nodeSelectorTerms/0/matchFields",
                "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
                "/nodeSelectorTerms/1/matchFields/-",
            ],
        ),
    ],
    ids=["no affinity", "other affinity", "required terms: each gains the node"],
)  # fmt: skip
def test_pinning_only_adds_to_a_pods_affinity(affinity: Any, paths: list[str]) -> None:
    ops = pin_ops({"affinity": affinity} if affinity else {}, "r1-n01")
    assert [o["path"] for o in ops] == paths
    assert all(o["op"] == "add" for o in ops)
    assert "r1-n01" in str(ops)


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({}, "rackplane.io/nodes is missing"),
        ({"rackplane.io/nodes": "x"}, "expected a whole number"),
        ({"rackplane.io/nodes": "4", "rackplane.io/kind": "batch"}, "kind"),
        ({"rackplane.io/nodes": "4", "rackplane.io/checkpoint-interval": "soon"}, "duration"),
        (
            {"rackplane.io/nodes": "4", "rackplane.io/slice-size": "2",
             "rackplane.io/min-nodes-per-slice": "3"},
            "cannot exceed slice_size",
        ),
    ],
    ids=["no size", "a size not a number", "an unknown kind", "a bad duration", "a bad shape"],
)  # fmt: skip
def test_a_gang_spec_that_cannot_be_read_says_why(meta: dict[str, str], message: str) -> None:
    pod = pod_view(
        {"metadata": {"name": "p", "namespace": "ns", "labels": {JOB_LABEL: "j"},
                      "annotations": meta}}
    )  # fmt: skip
    assert pod is not None
    with pytest.raises(GangError, match=message):
        gang_spec(pod)


def test_a_gang_spec_reads_labels_and_durations() -> None:
    pod = pod_view(
        {"metadata": {"name": "p", "namespace": "ns",
                      "labels": {JOB_LABEL: "j", "rackplane.io/nodes": "32"},
                      "annotations": {"rackplane.io/checkpoint-interval": "30m",
                                      "rackplane.io/kind": "inference"}}}
    )  # fmt: skip
    assert pod is not None
    spec = gang_spec(pod)
    assert (spec.id, spec.nodes, spec.kind) == ("ns/j", 32, JobKind.INFERENCE)
    assert spec.checkpoint_interval is not None and spec.checkpoint_interval.total_seconds() == 1800


def test_a_start_for_a_job_not_placed_is_rejected_not_applied(world: World) -> None:
    world.gang("train", 2)
    world.settle()
    start = StartJob(id="s-x", cluster=CLUSTER, actor=ACTOR, job="team/nope", pods=("team/a",))
    (event,) = world.handle(start)
    assert isinstance(event, CommandRejected)


def test_a_degraded_slice_loses_its_pod_and_the_others_learn_the_new_shape() -> None:
    """No spare left and no rack to move to: a job that may run on fewer nodes per slice
    goes on degraded; the pod on the lost node goes (not made again) and every pod of the
    slice carries the new shape."""
    w = World(racks=2, per_rack=5)
    w.settle()
    w.gang("train", 8, **{"rackplane.io/slice-size": "4", "rackplane.io/min-nodes-per-slice": "3"})
    w.settle()
    w.kubelet("Running")
    w.settle()
    slice0 = w.state.jobs["team/train"].slices[0]
    first, second = slice0.nodes[0], slice0.nodes[1]
    rack = first.split("-")[0]
    w.nodes[first] = k8s_node(first, rack, ready="False", since="t1")  # takes the spare
    w.settle()
    w.kubelet("Running")
    w.settle()
    w.nodes[second] = k8s_node(second, rack, ready="False", since="t1")  # nothing left
    w.settle()
    (degraded,) = [e for e in w.events if isinstance(e, SliceDegraded)]
    assert degraded.removed == (second,) and degraded.nodes_after == 3
    w.kubelet("Running")
    assert w.settle() == []
    live = {k: p for k, p in w.pods.items() if not p["metadata"].get("deletionTimestamp")}
    assert len(live) == 7  # the pod on the lost node is gone and not made again
    shapes = {p["metadata"]["annotations"][SLICES_ANNOTATION] for p in live.values()}
    assert shapes == {"3,4"}
    on_slice0 = [p for p in live.values() if p["metadata"]["annotations"][SLICE_ANNOTATION] == "0"]
    assert {p["metadata"]["annotations"]["rackplane.io/slice-nodes"] for p in on_slice0} == {"3"}
    assert len(on_slice0) == 3


# -- gangs of the Workload API: a PodGroup and pods that name it ---------------------------------


def pod_group(name: str, min_count: int | None, **annotations: str) -> dict[str, Any]:
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "team", "annotations": annotations},
        "spec": {"schedulingPolicy": policy},
    }


def group_pods(w: World, group: str, n: int, scheduler: str = "rackplane") -> list[PodKey]:
    keys = []
    for i in range(n):
        pod = k8s_pod(f"{group}-{i}", group, n)
        del pod["metadata"]["labels"][JOB_LABEL]
        del pod["metadata"]["annotations"]["rackplane.io/nodes"]
        pod["spec"]["schedulerName"] = scheduler
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
        key = PodKey("team", pod["metadata"]["name"])
        w.pods[key] = pod
        keys.append(key)
    return keys


def test_a_pod_groups_gang_takes_its_size_from_min_count_and_its_shape_from_the_group(
    world: World,
) -> None:
    world.groups[("team", "llm")] = pod_group("llm", 8, **{"rackplane.io/slice-size": "4"})
    keys = group_pods(world, "llm", 7)
    assert world.settle() == []  # 7 of 8: the gang waits
    keys += group_pods(world, "llm", 8)[7:]
    plans = world.settle()
    (submit,) = [o.command for p in plans for o in p.orders if isinstance(o.command, SubmitJob)]
    assert (submit.job.id, submit.job.nodes, submit.job.slice_size) == ("team/llm", 8, 4)
    nodes = {world.on(k) for k in keys}
    assert nodes == set(job_nodes(world, "team/llm")) and len(nodes) == 8


def test_pods_naming_a_pod_group_that_does_not_exist_wait_for_it(world: World) -> None:
    keys = group_pods(world, "late", 4)
    world.settle()
    problem = world.pods[keys[0]]["metadata"]["annotations"][PROBLEM_ANNOTATION]
    assert problem == (
        "PodGroup late (scheduling.k8s.io/v1beta1) does not exist (yet): the gang waits for it"
    )
    assert "team/late" not in world.state.jobs
    world.groups[("team", "late")] = pod_group("late", 4)
    world.settle()
    assert world.state.jobs["team/late"].spec.nodes == 4
    assert PROBLEM_ANNOTATION not in world.pods[keys[0]]["metadata"]["annotations"]


def test_a_basic_pod_group_needs_the_gang_size_said_and_the_label_wins_over_the_group(
    world: World,
) -> None:
    world.groups[("team", "b")] = pod_group("b", None)
    keys = group_pods(world, "b", 2)
    world.settle()
    problem = world.pods[keys[0]]["metadata"]["annotations"][PROBLEM_ANNOTATION]
    assert "give its PodGroup a gang minCount" in problem
    labelled = k8s_pod("x-0", "labelled", 1)
    labelled["spec"]["schedulingGroup"] = {"podGroupName": "b"}
    view = pod_view(labelled)
    assert view is not None and (view.job, view.group) == ("labelled", "")


def test_a_pod_of_another_scheduler_in_a_pod_group_is_not_rackplanes() -> None:
    w = World()
    (key,) = group_pods(w, "theirs", 1, scheduler="default-scheduler")
    assert pod_view(w.pods[key]) is None


# -- gangs of Volcano's, KAI Scheduler's and the coscheduling plugin's PodGroups (CRDs) -----------


def crd_group(api: str, name: str, min_member: int | None) -> dict[str, Any]:
    spec = {} if min_member is None else {"minMember": min_member}
    return {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "team", "annotations": {}},
        "spec": spec,
    }


def crd_pods(w: World, group: str, n: int, *, annotation: str = "", label: str = "") -> None:
    for i in range(n):
        pod = k8s_pod(f"{group}-{i}", group, n)
        del pod["metadata"]["labels"][JOB_LABEL]
        del pod["metadata"]["annotations"]["rackplane.io/nodes"]
        if annotation:
            pod["metadata"]["annotations"][annotation] = group
        if label:
            pod["metadata"]["labels"][label] = group
        w.pods[PodKey("team", pod["metadata"]["name"])] = pod


@pytest.mark.parametrize(
    ("api", "annotation", "label"),
    [
        ("scheduling.volcano.sh/v1beta1", "scheduling.k8s.io/group-name", ""),
        ("scheduling.volcano.sh/v1beta1", "scheduling.volcano.sh/group-name", ""),
        ("scheduling.run.ai/v2alpha2", "pod-group-name", ""),
        ("scheduling.x-k8s.io/v1alpha1", "", "scheduling.x-k8s.io/pod-group"),
    ],
    ids=["volcano", "volcano-own-key", "kai", "coscheduling"],
)
def test_a_crd_pod_groups_gang_is_sized_by_min_member(
    world: World, api: str, annotation: str, label: str
) -> None:
    world.groups[api] = crd_group(api, "llm", 4)
    crd_pods(world, "llm", 3, annotation=annotation, label=label)
    assert world.settle() == []  # 3 of 4
    crd_pods(world, "llm", 4, annotation=annotation, label=label)
    world.settle()
    job = world.state.jobs["team/llm"]
    assert job.spec.nodes == 4 and job.status is JobStatus.PLACED
    assert {world.on(PodKey("team", f"llm-{i}")) for i in range(4)} == set(
        job_nodes(world, "team/llm")
    )


def test_a_pod_naming_a_group_of_another_api_waits_for_a_group_of_its_own(world: World) -> None:
    world.groups["volcano"] = crd_group("scheduling.volcano.sh/v1beta1", "llm", 2)
    crd_pods(world, "llm", 2, annotation="pod-group-name")  # KAI's key: a KAI group
    world.settle()
    problem = world.pods[PodKey("team", "llm-0")]["metadata"]["annotations"][PROBLEM_ANNOTATION]
    assert "PodGroup llm (scheduling.run.ai/v2alpha2) does not exist" in problem
    world.groups["kai"] = crd_group("scheduling.run.ai/v2alpha2", "llm", None)
    world.settle()
    problem = world.pods[PodKey("team", "llm-0")]["metadata"]["annotations"][PROBLEM_ANNOTATION]
    assert "give its PodGroup a minMember" in problem


QUEUES = (QueueSpec(name="org"), QueueSpec(name="team", parent="org", nominal_nodes=4),
          QueueSpec(name="rl", parent="org", nominal_nodes=4))  # fmt: skip


@pytest.mark.parametrize(
    ("meta", "want"),
    [({"rackplane.io/queue": "rl"}, "rl"), ({}, "team")],
    ids=["named by annotation", "the namespace's queue"],
)
def test_a_gangs_queue_is_its_annotation_else_the_queue_named_after_its_namespace(
    meta: dict[str, str], want: str
) -> None:
    w = World(queues=QUEUES)
    w.settle()
    w.gang("train", 2, **meta)
    (order,) = w.plan().orders
    assert isinstance(order.command, SubmitJob) and order.command.job.queue == want


def test_a_namespace_with_no_queue_of_its_name_leaves_the_job_to_the_default_queue() -> None:
    queues = (QueueSpec(name="org"), QueueSpec(name="research", parent="org", nominal_nodes=4))
    w = World(queues=queues, default_queue="research")
    w.settle()
    w.gang("train", 2)  # namespace "team": no queue of that name
    (order,) = w.plan().orders
    assert isinstance(order.command, SubmitJob) and order.command.job.queue is None
    w.settle()
    assert w.state.jobs["team/train"].spec.queue == "research"


def test_a_gang_spec_takes_kueues_local_queue_label_as_its_queue() -> None:
    pod = pod_view(
        {"metadata": {"name": "p", "namespace": "ns",
                      "labels": {JOB_LABEL: "j", "rackplane.io/nodes": "2",
                                 "kueue.x-k8s.io/queue-name": "rl"}}}
    )  # fmt: skip
    assert pod is not None
    assert gang_spec(pod).queue == "rl"
