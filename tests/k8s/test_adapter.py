"""`rackplane kube` on a real kube-apiserver (kwok nodes), a real worker and the embedded broker.

Each story has racks of fake GB200 nodes of its own (18 per rack, one NVLink clique each), a
namespace, a cluster id and its own adapter process, which registers the racks it finds. The
stories are the issue's: a 128-node gang lands rack-local in 16-node slices; a node turned
NotReady under it is swapped for its rack's spare; a third failure in a rack migrates only that
slice; Auto Defrag evicts a managed victim (never an interactive one) to free a rack for a
blocked 16-node job; `kubectl cordon` reaches rackplane; the adapter killed mid-gang resumes
without a double binding. And two more, with kube-controller-manager's controllers: a
ReplicaSet's pod lost with its node is made again by the ReplicaSet (not by rackplane) and
bound to the spare; a batch Job's gang runs and completes; a gang whose PodDisruptionBudget
allows no eviction is passed over by Auto Defrag until the budget goes. And gangs of the
PodGroups of the Workload API, Volcano, KAI Scheduler and the coscheduling plugin (their CRDs
installed by the `api` fixture).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rackplane.models import (
    CommandRejected,
    DefragPlanned,
    DisruptionBudgetReported,
    Event,
    JobBlocked,
    JobPreempted,
    JobStarted,
    JobStatus,
    NodeCordoned,
    NodeSwapped,
    NodeUncordoned,
    SliceMigrated,
)
from rackplane.projections import ClusterState
from tests.k8s.conftest import Story

pytestmark = pytest.mark.k8s

DEPLOY = Path(__file__).parents[2] / "deploy" / "k8s" / "base"

Pods = list[dict[str, Any]]
StoryFactory = Callable[..., Story]


def bound(n: int) -> Callable[[Pods], bool]:
    """`n` live pods, each bound and Running."""

    def check(pods: Pods) -> bool:
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return len(live) == n and all(
            p["spec"].get("nodeName") and p["status"].get("phase") == "Running" for p in live
        )

    return check


def live(pods: Pods) -> Pods:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def node_of(pods: Pods) -> dict[str, str]:
    """Where each live pod is bound (pods not bound yet left out)."""
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in live(pods)
        if p["spec"].get("nodeName")
    }


def of_type(kind: type[Event]) -> Callable[[list[Event]], list[Any]]:
    return lambda events: [e for e in events if isinstance(e, kind)]


def status(s: ClusterState, job: str) -> JobStatus | None:
    held = s.jobs.get(job)
    return held.status if held is not None else s.finished.get(job)


def no_node_twice(pods: Pods) -> None:
    """No node holds two pods that have not finished."""
    counts = Counter(
        p["spec"]["nodeName"]
        for p in live(pods)
        if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
    )
    assert max(counts.values(), default=0) == 1, counts.most_common(3)


async def a_running_gang(story: Story, job: str, nodes: int, **meta: str) -> Pods:
    story.gang(job, nodes, **{"rackplane.io/slice-size": "16", **meta})
    return story.until_pods(job, bound(nodes), timeout=120)


async def test_a_128_node_gang_lands_rack_local_in_16_node_slices(
    story_factory: StoryFactory,
) -> None:
    story = story_factory(racks=8)
    pods = await a_running_gang(story, "train", 128)
    no_node_twice(pods)
    by_slice: dict[str, set[str]] = {}
    for p in pods:
        annotations = p["metadata"]["annotations"]
        assert annotations["rackplane.io/node"] == p["spec"]["nodeName"]
        assert annotations["rackplane.io/slices"] == ",".join(["16"] * 8)
        by_slice.setdefault(annotations["rackplane.io/slice"], set()).add(
            story.rack_of[p["spec"]["nodeName"]]
        )
    assert len(by_slice) == 8 and all(len(racks) == 1 for racks in by_slice.values())
    events = await story.events(lambda es: bool(of_type(JobStarted)(es)))
    (started,) = of_type(JobStarted)(events)
    assert started.job == f"{story.namespace}/train" and len(started.pods) == 128
    assert sorted(started.pods) == sorted(
        f"{story.namespace}/{p['metadata']['name']}" for p in pods
    )
    state = await story.state(lambda s: status(s, started.job) is JobStatus.RUNNING)
    assert sorted(n for s in state.jobs[started.job].slices for n in s.nodes) == sorted(
        p["spec"]["nodeName"] for p in pods
    )


async def test_failures_under_a_gang_swap_spares_then_migrate_only_the_slice(
    story_factory: StoryFactory,
) -> None:
    story = story_factory(racks=8)
    job = f"{story.namespace}/train"
    before = node_of(await a_running_gang(story, "train", 64))
    state = await story.state(lambda s: status(s, job) is JobStatus.RUNNING)
    slice0 = state.jobs[job].slices[0]
    rack = slice0.racks[0]
    spares = set(story.racks[rack]) - set(slice0.nodes)
    assert len(spares) == 2

    # 1 and 2: each failure takes one of the rack's two spares; the pod is made again there.
    for k, failed in enumerate(slice0.nodes[:2], start=1):
        story.not_ready(failed)
        events = await story.events(lambda es, k=k: len(of_type(NodeSwapped)(es)) == k)
        swap = of_type(NodeSwapped)(events)[-1]
        assert swap.old_node == failed and swap.new_node in spares
        victim = next(name for name, node in before.items() if node == failed)
        pods = story.until_pods(
            "train",
            lambda ps, victim=victim, new=swap.new_node: (
                victim not in node_of(ps) and new in node_of(ps).values() and bound(64)(ps)
            ),
        )
        now = node_of(pods)
        made = next(name for name, node in now.items() if node == swap.new_node)
        assert made.startswith(victim + "-r"), made
        assert victim not in [p["metadata"]["name"] for p in story.pods("train")]  # gone

    # 3: no spare left: the slice moves to another rack; the other slices stay where they are.
    third = slice0.nodes[2]
    story.not_ready(third)
    events = await story.events(lambda es: bool(of_type(SliceMigrated)(es)))
    (moved,) = of_type(SliceMigrated)(events)
    assert moved.slice == 0 and moved.from_racks == (rack,) and moved.to_rack != rack
    pods = story.until_pods(
        "train",
        lambda ps: bound(64)(ps) and set(node_of(ps).values()) >= set(moved.new_nodes),
    )
    no_node_twice(pods)
    now = node_of(pods)
    others = {n for s in state.jobs[job].slices[1:] for n in s.nodes}
    assert {name: node for name, node in now.items() if node in others} == {
        name: node for name, node in before.items() if node in others
    }  # the other 48 pods untouched: same names, same nodes


async def test_defrag_evicts_a_managed_victim_never_an_interactive_one_and_binds_the_job(
    story_factory: StoryFactory,
) -> None:
    story = story_factory(racks=4)
    # Fill the 4 racks with 8 gangs of 8 nodes (16 allocatable per rack: 2 per rack), then
    # finish one per rack: 8 nodes free in each rack, no rack with 16.
    for g in range(8):
        kind = "managed" if g == 7 else "interactive"
        story.gang(f"g{g}", 8, **{"rackplane.io/slice-size": "8", "rackplane.io/kind": kind})
    for g in range(8):
        story.until_pods(f"g{g}", bound(8))
    rack_of_gang = {
        g: {story.rack_of[n] for n in node_of(story.pods(f"g{g}")).values()} for g in range(8)
    }
    assert all(len(racks) == 1 for racks in rack_of_gang.values())
    # In each rack finish one gang: in the managed gang's rack its interactive partner.
    (mrack,) = rack_of_gang[7]
    by_rack: dict[str, list[int]] = {}
    for g, (rack,) in ((g, tuple(r)) for g, r in rack_of_gang.items()):
        by_rack.setdefault(rack, []).append(g)
    assert sorted(len(gs) for gs in by_rack.values()) == [2, 2, 2, 2]
    ends = [min(g for g in gs if g != 7) for gs in by_rack.values()]
    for g in ends:
        for p in story.pods(f"g{g}"):
            story.set_phase(p["metadata"]["name"], "Succeeded")
    finished = {f"{story.namespace}/g{g}" for g in ends}
    await story.state(lambda s: all(status(s, j) is JobStatus.COMPLETED for j in finished))
    interactive_pods = {
        p["metadata"]["name"]
        for g in range(7)
        if f"{story.namespace}/g{g}" not in finished
        for p in story.pods(f"g{g}")
    }

    big = f"{story.namespace}/big"
    story.gang("big", 16, **{"rackplane.io/slice-size": "16"})
    events = await story.events(
        lambda es: bool(of_type(DefragPlanned)(es)) and bool(of_type(JobPreempted)(es)), 120
    )
    assert any(isinstance(e, JobBlocked) and e.job == big for e in events)
    (plan,) = of_type(DefragPlanned)(events)
    assert plan.job == big and plan.victims == (f"{story.namespace}/g7",)
    big_pods = story.until_pods("big", bound(16), timeout=120)
    assert {story.rack_of[n] for n in node_of(big_pods).values()} == {mrack}
    moved = story.until_pods("g7", bound(8), timeout=120)  # the victim, bound elsewhere
    assert {story.rack_of[n] for n in node_of(moved).values()} != {mrack}
    left = {p["metadata"]["name"] for g in range(7) for p in live(story.pods(f"g{g}"))}
    assert interactive_pods <= left  # no interactive pod was evicted
    no_node_twice([p for g in range(8) for p in story.pods(f"g{g}")] + big_pods)


async def test_kubectl_cordon_and_uncordon_reach_rackplane(story_factory: StoryFactory) -> None:
    story = story_factory(racks=1)
    node = story.racks[next(iter(story.racks))][3]
    await story.state(lambda s: node in s.nodes)
    story.cordon(node)
    state = await story.state(lambda s: s.nodes[node].cordoned)
    assert state.nodes[node].cordoned
    story.cordon(node, on=False)
    events = await story.events(lambda es: bool(of_type(NodeUncordoned)(es)))
    (cordoned,) = of_type(NodeCordoned)(events)
    assert cordoned.node == node and cordoned.actor == "runtime:kube"


async def test_in_the_gate_mode_kube_scheduler_binds_each_pod_where_rackplane_pinned_it(
    story_factory: StoryFactory,
) -> None:
    story = story_factory(racks=2)
    story.gang("serve", 16, gated=True, **{"rackplane.io/kind": "inference"})
    pods = story.until_pods("serve", bound(16))
    no_node_twice(pods)
    for p in pods:
        assert p["spec"]["schedulerName"] == "default-scheduler"  # kube-scheduler bound it
        assert not p["spec"].get("schedulingGates")
        assert p["spec"]["nodeName"] == p["metadata"]["annotations"]["rackplane.io/node"]
        assert p["metadata"]["annotations"]["rackplane.io/affinity-before"] == "null"
    job = f"{story.namespace}/serve"
    state = await story.state(lambda s: status(s, job) is JobStatus.RUNNING)
    assert sorted(n for s in state.jobs[job].slices for n in s.nodes) == sorted(
        node_of(pods).values()
    )
    assert len({story.rack_of[n] for n in node_of(pods).values()}) == 1


async def test_the_adapter_killed_mid_gang_resumes_without_a_double_binding(
    story_factory: StoryFactory,
) -> None:
    story = story_factory(racks=8)
    story.gang("train", 128, **{"rackplane.io/slice-size": "16"})
    story.until_pods("train", lambda ps: sum(bool(p["spec"].get("nodeName")) for p in ps) >= 16)
    story.kill_adapter()
    half = sum(bool(p["spec"].get("nodeName")) for p in story.pods("train"))
    story.start_adapter()
    pods = story.until_pods("train", bound(128), timeout=120)
    no_node_twice(pods)
    assert len(pods) == 128  # none made again, none lost
    job = f"{story.namespace}/train"
    state: ClusterState = await story.state(lambda s: status(s, job) is JobStatus.RUNNING)
    assert sorted(n for s in state.jobs[job].slices for n in s.nodes) == sorted(
        node_of(pods).values()
    )
    events = await story.events(lambda es: bool(of_type(JobStarted)(es)))
    assert [e.type for e in events].count("JobSubmitted") == 1
    assert not of_type(CommandRejected)(events)
    assert half > 0  # it was killed with part of the gang bound


async def test_a_pod_groups_gang_of_the_workload_api_is_bound_rack_local(
    story_factory: StoryFactory,
) -> None:
    """Kubernetes 1.37's Workload API (beta, gated): a PodGroup with a gang `minCount`, and
    pods that name it in `spec.schedulingGroup`, with no `rackplane.io/job` label."""
    story = story_factory(racks=2)
    ns, api = story.namespace, story.api
    group_path = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"
    api.ok("POST", group_path, {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "llm", "annotations": {"rackplane.io/slice-size": "16"}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 16}}},
    })  # fmt: skip
    for i in range(16):
        api.ok("POST", f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"llm-{i}", "labels": {"test.rackplane.io/group": "llm"}},
            "spec": {"schedulerName": "rackplane", "schedulingGroup": {"podGroupName": "llm"},
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "trainer", "image": "trainer:1"}]},
        })  # fmt: skip
    job = f"{ns}/llm"
    state = await story.state(lambda s: status(s, job) is JobStatus.RUNNING)
    placed = state.jobs[job]
    assert placed.spec.nodes == 16 and [len(s.nodes) for s in placed.slices] == [16]
    got = api.ok("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=test.rackplane.io/group")
    nodes = node_of(got["items"])
    assert len(nodes) == 16 and set(nodes.values()) == set(placed.slices[0].nodes)
    assert {story.rack_of[n] for n in nodes.values()} == {story.rack_of[placed.slices[0].nodes[0]]}
    assert all(p["status"].get("phase") == "Running" for p in got["items"])


async def test_a_replica_sets_pod_lost_with_its_node_is_made_by_it_and_bound_to_the_spare(
    story_factory: StoryFactory,
) -> None:
    story = story_factory(racks=1)
    story.replica_set("rs", 16, **{"rackplane.io/slice-size": "16"})
    pods = story.until_pods("rs", bound(16), timeout=120)
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" for p in pods)
    job = f"{story.namespace}/rs"
    await story.state(lambda s: status(s, job) is JobStatus.RUNNING)
    before = node_of(pods)
    victim, old = sorted(before.items())[3]
    story.not_ready(old)
    (swap,) = of_type(NodeSwapped)(await story.events(lambda es: bool(of_type(NodeSwapped)(es))))
    assert swap.old_node == old and swap.job == job
    after = story.until_pods(
        "rs", lambda ps: bound(16)(ps) and swap.new_node in node_of(ps).values(), timeout=120
    )
    now = node_of(after)
    (made,) = set(now) - set(before)
    assert now[made] == swap.new_node
    new_pod = next(p for p in after if p["metadata"]["name"] == made)
    assert new_pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"  # not rackplane's
    assert "rackplane.io/base-name" not in new_pod["metadata"].get("annotations", {})
    assert {n: p for n, p in now.items() if n != made} == {
        n: p for n, p in before.items() if n != victim
    }  # the other 15 pods untouched
    assert "made pod" not in story.adapter_log()
    no_node_twice(after)


async def test_defrag_passes_over_a_gang_whose_disruption_budget_allows_no_eviction(
    story_factory: StoryFactory,
) -> None:
    story = story_factory(racks=2)
    # 4 gangs of 8 fill the 2 racks (16 allocatable each); one per rack finishes: each rack
    # keeps one gang and 8 free nodes, and a 16-node job fits in neither.
    for g in range(4):
        story.gang(f"g{g}", 8, **{"rackplane.io/slice-size": "8"})
    rack_of_gang = {}
    for g in range(4):
        nodes = node_of(story.until_pods(f"g{g}", bound(8)))
        (rack_of_gang[g],) = {story.rack_of[n] for n in nodes.values()}
    by_rack: dict[str, list[int]] = {}
    for g, rack in rack_of_gang.items():
        by_rack.setdefault(rack, []).append(g)
    assert sorted(len(gs) for gs in by_rack.values()) == [2, 2]
    (first, second), (third, fourth) = by_rack.values()
    for g in (first, third):
        for p in story.pods(f"g{g}"):
            story.set_phase(p["metadata"]["name"], "Succeeded")
    keep = {f"{story.namespace}/g{g}": g for g in (second, fourth)}
    for g in keep.values():
        story.budget(f"g{g}", 8)  # minAvailable 8 of 8: no eviction allowed
    await story.state(
        lambda s: all(status(s, f"{story.namespace}/g{g}") is JobStatus.COMPLETED
                      for g in (first, third))
        and all(s.jobs[j].protected_by for j in keep)
    )  # fmt: skip

    big = f"{story.namespace}/big"
    story.gang("big", 16, **{"rackplane.io/slice-size": "16"})
    await story.events(lambda es: any(isinstance(e, JobBlocked) and e.job == big for e in es))
    await asyncio.sleep(3.0)  # a defrag would have been planned by now
    events = await story.events(lambda es: True)
    assert not of_type(DefragPlanned)(events) and not of_type(JobPreempted)(events)
    kept = {p["metadata"]["name"] for g in keep.values() for p in live(story.pods(f"g{g}"))}
    assert len(kept) == 16

    story.drop_budget(f"g{fourth}")  # that gang may be disrupted again
    events = await story.events(lambda es: bool(of_type(DefragPlanned)(es)), 120)
    (plan,) = of_type(DefragPlanned)(events)
    assert plan.job == big and plan.victims == (f"{story.namespace}/g{fourth}",)
    allowed = [e for e in of_type(DisruptionBudgetReported)(events) if e.allows]
    assert [e.job for e in allowed] == [f"{story.namespace}/g{fourth}"]
    assert events.index(allowed[0]) < events.index(plan)
    big_pods = story.until_pods("big", bound(16), timeout=120)
    assert {story.rack_of[n] for n in node_of(big_pods).values()} == {rack_of_gang[fourth]}
    moved = story.until_pods(f"g{fourth}", bound(8), timeout=120)
    assert {story.rack_of[n] for n in node_of(moved).values()} == {rack_of_gang[second]}
    assert {p["metadata"]["name"] for p in live(story.pods(f"g{second}"))} <= kept  # untouched
    no_node_twice([p for g in keep.values() for p in story.pods(f"g{g}")] + big_pods)


async def test_gangs_of_volcano_kai_and_coscheduling_pod_groups_are_bound_rack_local(
    story_factory: StoryFactory,
) -> None:
    story = story_factory(racks=3)
    ns, api = story.namespace, story.api
    ways = {  # group API -> how its pods name their group
        "scheduling.volcano.sh/v1beta1": ("annotations", "scheduling.k8s.io/group-name"),
        "scheduling.run.ai/v2alpha2": ("annotations", "pod-group-name"),
        "scheduling.x-k8s.io/v1alpha1": ("labels", "scheduling.x-k8s.io/pod-group"),
    }
    for i, (version, (where, key)) in enumerate(ways.items()):
        name = f"pg{i}"
        api.ok("POST", f"/apis/{version}/namespaces/{ns}/podgroups", {
            "apiVersion": version, "kind": "PodGroup",
            "metadata": {"name": name, "annotations": {"rackplane.io/slice-size": "16"}},
            "spec": {"minMember": 16},
        })  # fmt: skip
        for p in range(16):
            meta: dict[str, Any] = {"name": f"{name}-{p}", "labels": {"test.rackplane.io/pg": name},
                                    "annotations": {}}  # fmt: skip
            meta[where][key] = name
            api.ok("POST", f"/api/v1/namespaces/{ns}/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {"schedulerName": "rackplane", "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "trainer", "image": "trainer:1"}]},
            })  # fmt: skip
    jobs = [f"{ns}/pg{i}" for i in range(3)]
    state = await story.state(lambda s: all(status(s, j) is JobStatus.RUNNING for j in jobs), 120)
    racks = set()
    for i, job in enumerate(jobs):
        placed = state.jobs[job]
        assert placed.spec.nodes == 16 and [len(s.nodes) for s in placed.slices] == [16]
        got = api.ok(
            "GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=test.rackplane.io/pg%3Dpg{i}"
        )
        nodes = node_of(got["items"])
        assert len(nodes) == 16 and set(nodes.values()) == set(placed.slices[0].nodes)
        (rack,) = {story.rack_of[n] for n in nodes.values()}
        racks.add(rack)
    assert len(racks) == 3


async def test_a_batch_jobs_gang_runs_and_completes(story_factory: StoryFactory) -> None:
    """kube-controller-manager's Job controller makes the pods; kwok ends a Job's pods as soon
    as they run (its pod-complete stage)."""
    story = story_factory(racks=1)
    labels = {"rackplane.io/job": "batch"}
    story.api.ok("POST", f"/apis/batch/v1/namespaces/{story.namespace}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch"},
        "spec": {"parallelism": 8, "completions": 8, "completionMode": "Indexed",
                 "backoffLimit": 100,
                 "template": {"metadata": {"labels": labels, "annotations": {
                                  "rackplane.io/nodes": "8", "rackplane.io/slice-size": "8"}},
                              "spec": {"schedulerName": "rackplane", "restartPolicy": "Never",
                                       "terminationGracePeriodSeconds": 0,
                                       "containers": [{"name": "step", "image": "step:1"}]}}},
    })  # fmt: skip
    job = f"{story.namespace}/batch"
    state = await story.state(lambda s: status(s, job) is JobStatus.COMPLETED, 120)
    assert job not in state.jobs
    events = await story.events(lambda es: bool(of_type(JobStarted)(es)))
    (started,) = [e for e in of_type(JobStarted)(events) if e.job == job]
    assert len(started.pods) == 8
    pods = story.pods("batch")
    assert len(pods) == 8 and all(p["status"]["phase"] == "Succeeded" for p in pods)
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "Job" for p in pods)
    assert len({story.rack_of[p["spec"]["nodeName"]] for p in pods}) == 1


def deployed_rules() -> list[dict[str, Any]]:
    """The adapter's ClusterRole as deploy/k8s/base ships it."""
    docs = yaml.safe_load_all((DEPLOY / "kube-rbac.yaml").read_text())
    (role,) = [d for d in docs if d and d["kind"] == "ClusterRole"]
    return list(role["rules"])


async def test_the_adapter_does_its_work_with_the_deployed_rbac_and_nothing_more(
    story_factory: StoryFactory,
) -> None:
    """As the ServiceAccount of deploy/k8s/base, with its ClusterRole: a gang is bound and
    runs, a node's failure is swapped, and the API server refused nothing."""
    story = story_factory(racks=1)
    story.kill_adapter()
    story.start_adapter(story.as_service_account(deployed_rules()))
    pods = await a_running_gang(story, "train", 16)
    job = f"{story.namespace}/train"
    await story.state(lambda s: status(s, job) is JobStatus.RUNNING)
    old = node_of(pods)[sorted(node_of(pods))[0]]
    story.not_ready(old)
    (swap,) = of_type(NodeSwapped)(await story.events(lambda es: bool(of_type(NodeSwapped)(es))))
    story.until_pods("train", lambda ps: bound(16)(ps) and swap.new_node in node_of(ps).values())
    log = story.adapter_log()
    assert "403" not in log and "forbidden" not in log.lower(), log[-3000:]


async def test_without_the_right_to_read_budgets_the_adapter_says_so_and_goes_on(
    story_factory: StoryFactory,
) -> None:
    story = story_factory(racks=1)
    story.kill_adapter()
    rules = [r for r in deployed_rules() if "poddisruptionbudgets" not in r["resources"]]
    story.start_adapter(story.as_service_account(rules))
    await a_running_gang(story, "train", 16)
    assert "may not read budgets" in story.adapter_log()
