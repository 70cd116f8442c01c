"""The test control plane itself (`scripts/k8s/control_plane.py`): a real kube-apiserver on
etcd, with kwok playing the kubelets. What the Kubernetes adapter (issue 17) will rest on:
fake GB200 nodes with their real labels become Ready, a pod for another scheduler stays
Pending until it is bound, and a bound pod runs.

Runs in `make test-k8s` (the plane started around pytest; `RACKPLANE_TEST_KUBECONFIG`).
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.k8s.conftest import Api, fake_node, ready

pytestmark = pytest.mark.k8s


def test_fake_gb200_nodes_become_ready_and_a_bound_pod_runs(api: Api) -> None:
    tag = uuid.uuid4().hex[:6]
    names = [f"gb-{tag}-n{i:02d}" for i in range(4)]
    for name in names:
        status, got = api.call("POST", "/api/v1/nodes", fake_node(name, f"cluster-{tag}.1"))
        assert status == 201, got
    for name in names:
        node = api.until(f"/api/v1/nodes/{name}", ready)
        assert node["metadata"]["labels"]["nvidia.com/gpu.clique"] == f"cluster-{tag}.1"
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"w-{tag}", "labels": {"rackplane.io/job": f"j-{tag}"}},
        "spec": {"schedulerName": "rackplane",
                 "containers": [{"name": "trainer", "image": "trainer:1"}]},
    }  # fmt: skip
    status, got = api.call("POST", "/api/v1/namespaces/default/pods", pod)
    assert status == 201, got
    time.sleep(1.0)
    status, pending = api.call("GET", f"/api/v1/namespaces/default/pods/w-{tag}")
    assert pending["status"]["phase"] == "Pending" and not pending["spec"].get("nodeName")
    binding = {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": f"w-{tag}"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": names[2]},
    }  # fmt: skip
    status, got = api.call("POST", f"/api/v1/namespaces/default/pods/w-{tag}/binding", binding)
    assert status == 201, got
    running = api.until(
        f"/api/v1/namespaces/default/pods/w-{tag}",
        lambda p: p.get("status", {}).get("phase") == "Running",
    )
    assert running["spec"]["nodeName"] == names[2]
    status, got = api.call("POST", f"/api/v1/namespaces/default/pods/w-{tag}/binding", binding)
    assert status == 409, got  # bound once: a second binding is refused


def test_kube_scheduler_binds_an_ungated_pod_to_the_node_its_affinity_names(api: Api) -> None:
    """The default scheduler holds a gated pod, and once the gate is lifted (with node affinity
    added in the same patch, as Kueue's TAS does) binds it to the named node: the smallest
    one, which it would not pick by itself (it spreads by least allocated)."""
    tag = uuid.uuid4().hex[:6]
    names = [f"gs-{tag}-n{i:02d}" for i in range(3)]
    wanted = names[1]
    path = f"/api/v1/namespaces/default/pods/g-{tag}"
    try:
        for name in names:
            node = fake_node(name, f"cluster-{tag}.1")
            if name == wanted:
                for resources in (node["status"]["allocatable"], node["status"]["capacity"]):
                    resources["cpu"] = "8"
            status, got = api.call("POST", "/api/v1/nodes", node)
            assert status == 201, got
        for name in names:
            api.until(f"/api/v1/nodes/{name}", ready)
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"g-{tag}"},
            "spec": {"schedulingGates": [{"name": "rackplane.io/placement"}],
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "trainer", "image": "trainer:1",
                                     "resources": {"requests": {"cpu": "4"}}}]},
        }  # fmt: skip
        status, got = api.call("POST", "/api/v1/namespaces/default/pods", pod)
        assert status == 201, got
        assert got["spec"]["schedulerName"] == "default-scheduler"
        time.sleep(1.0)
        status, gated = api.call("GET", path)
        assert status == 200, gated
        assert not gated["spec"].get("nodeName"), gated["spec"]
        assert any(
            c["type"] == "PodScheduled" and c.get("reason") == "SchedulingGated"
            for c in gated["status"].get("conditions", [])
        ), gated["status"]  # seen, and held, by kube-scheduler
        patch = [
            {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In",
                                      "values": [wanted]}]}]}}}},
            {"op": "replace", "path": "/spec/schedulingGates", "value": []},
        ]  # fmt: skip
        status, got = api.call("PATCH", path, patch, content_type="application/json-patch+json")
        assert status == 200, got
        running = api.until(path, lambda p: p.get("status", {}).get("phase") == "Running")
        assert running["spec"]["nodeName"] == wanted
    finally:
        api.call("DELETE", path, {"gracePeriodSeconds": 0})
        for name in names:
            api.call("DELETE", f"/api/v1/nodes/{name}")


def test_controllers_make_a_replica_sets_pods_and_a_budget_refuses_an_eviction(api: Api) -> None:
    """kube-controller-manager runs the ReplicaSet and disruption controllers: the pods of a
    ReplicaSet are made (owned by it), a PodDisruptionBudget over them gets its status, and an
    eviction it does not allow is refused with 429 (what the adapter reads as "refused")."""
    tag = uuid.uuid4().hex[:6]
    ns = f"cp-{tag}"
    api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    node = f"gb-{tag}-n00"
    api.ok("POST", "/api/v1/nodes", fake_node(node, f"cluster-{tag}.1"))
    api.until(f"/api/v1/nodes/{node}", ready)
    labels = {"app": f"a-{tag}"}
    api.ok("POST", f"/apis/apps/v1/namespaces/{ns}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"schedulerName": "rackplane", "nodeName": node,
                                       "terminationGracePeriodSeconds": 0,
                                       "containers": [{"name": "c", "image": "x:1"}]}}},
    })  # fmt: skip
    pods = api.until(
        f"/api/v1/namespaces/{ns}/pods",
        lambda got: (
            len(got["items"]) == 2
            and all(p["status"].get("phase") == "Running" for p in got["items"])
        ),
    )["items"]
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" for p in pods)
    api.ok("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "all"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": labels}},
    })  # fmt: skip
    budget = api.until(
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/all",
        lambda b: b.get("status", {}).get("observedGeneration") == b["metadata"]["generation"],
    )
    assert (budget["status"]["currentHealthy"], budget["status"]["disruptionsAllowed"]) == (2, 0)
    name = pods[0]["metadata"]["name"]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": ns}}  # fmt: skip
    status, got = api.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", eviction)
    assert status == 429, got
    assert "disruption budget" in got["message"]
    api.call("DELETE", f"/api/v1/namespaces/{ns}")
    api.call("DELETE", f"/api/v1/nodes/{node}")
