"""The Kubernetes tier's pieces: the API server of `make test-k8s`, fake GB200 nodes, and a
story's world (its own nodes, namespace, cluster id and `rackplane kube` process).

Runs in `make test-k8s` (the plane started around pytest; `RACKPLANE_TEST_KUBECONFIG`).
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rackplane.models import Event
from rackplane.projections import ClusterState
from tests.adapter_process import AdapterProcess
from tests.conftest import BrokerUnderTest
from tests.streams.conftest import Pipeline, start_pipeline

RUN_LABEL = "test.rackplane.io/run"


class Api:
    """Just enough of the Kubernetes REST API, from the plane's kubeconfig."""

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        config = json.loads(Path(kubeconfig).read_text())
        cluster = config["clusters"][0]["cluster"]
        self.server = cluster["server"]
        self.token = config["users"][0]["user"]["token"]
        self.context = ssl.create_default_context(cafile=cluster["certificate-authority"])

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.server + path, data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, got = self.call(method, path, body, **kw)
        assert 200 <= status < 300, f"{method} {path}: {status} {got}"
        return got

    def until(self, path: str, ok: Callable[[Any], bool], timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            status, got = self.call("GET", path)
            if status == 200 and ok(got):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} never got there; last: {status} {str(got)[:2000]}")
            time.sleep(0.2)


CRD_GROUPS = (
    ("scheduling.volcano.sh", "v1beta1"),
    ("scheduling.run.ai", "v2alpha2"),
    ("scheduling.x-k8s.io", "v1alpha1"),
)
"""The PodGroup CRDs of Volcano, KAI Scheduler and the coscheduling plugin (scheduler-plugins),
each at the group and version its project serves, with a schema of our own that keeps only
what rackplane reads (`spec.minMember`; the rest preserved as given)."""


def pod_group_crd(group: str, version: str) -> dict[str, Any]:
    loose = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{group}"},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup",
                      "listKind": "PodGroupList"},
            "versions": [{
                "name": version, "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {**loose, "properties": {
                        "minMember": {"type": "integer", "minimum": 1}}},
                    "status": loose,
                }}},
            }],
        },
    }  # fmt: skip


@pytest.fixture(scope="session")
def api() -> Api:
    """The plane's API server, with the PodGroup CRDs installed (before any adapter starts:
    an adapter asks at its start which PodGroups the server serves)."""
    kubeconfig = os.environ.get("RACKPLANE_TEST_KUBECONFIG")
    if not kubeconfig:
        pytest.fail("RACKPLANE_TEST_KUBECONFIG is not set: run through `make test-k8s`")
    api = Api(kubeconfig)
    for group, version in CRD_GROUPS:
        status, got = api.call(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            pod_group_crd(group, version),
        )  # fmt: skip
        assert status in (201, 409), got
        api.until(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.{group}",
            lambda crd: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions") or ()
            ),
        )
        api.until(f"/apis/{group}/{version}", lambda found: bool(found.get("resources")))
    return api


def fake_node(name: str, clique: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A GB200 node as the GPU operator labels it, played by kwok."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok",
                       "nvidia.com/gpu.clique": clique, "nvidia.com/gpu.count": "4",
                       "nvidia.com/gpu.product": "NVIDIA-GB200", **(labels or {})},
        },
        "status": {"allocatable": {"cpu": "144", "memory": "800Gi", "pods": "110",
                                   "nvidia.com/gpu": "4"},
                   "capacity": {"cpu": "144", "memory": "800Gi", "pods": "110",
                                "nvidia.com/gpu": "4"}},
    }  # fmt: skip


def ready(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


class Story:
    """One story's world: racks of fake nodes of its own, a namespace, a cluster id on the
    shared worker, and the adapter (`rackplane kube`) as a process of its own."""

    def __init__(self, api: Api, pipeline: Pipeline, tmp: Path, racks: int, per_rack: int) -> None:
        self.api, self.pipeline, self.tmp = api, pipeline, tmp
        self.tag = uuid.uuid4().hex[:6]
        self.cluster = f"k-{self.tag}"
        self.namespace = f"ns-{self.tag}"
        self.racks = {
            f"{self.tag}.r{r}": [f"n-{self.tag}-r{r}-{i:02d}" for i in range(per_rack)]
            for r in range(racks)
        }
        self.rack_of = {n: rack for rack, nodes in self.racks.items() for n in nodes}
        self.adapter = AdapterProcess(tmp)
        self.cleanup: list[str] = []
        """Cluster-wide objects the story made (paths), deleted at its end."""

    # -- set-up ---------------------------------------------------------------------------

    def create(self) -> None:
        """The namespace and the nodes, all Ready."""
        self.api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": self.namespace}})
        bodies = [
            fake_node(n, clique, {RUN_LABEL: self.tag})
            for clique, nodes in self.racks.items()
            for n in nodes
        ]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda b: self.api.ok("POST", "/api/v1/nodes", b), bodies))
        selector = urllib.parse.quote(f"{RUN_LABEL}={self.tag}")
        self.api.until(
            f"/api/v1/nodes?labelSelector={selector}",
            lambda got: len(got["items"]) == len(bodies) and all(ready(n) for n in got["items"]),
        )

    def start_adapter(self, kubeconfig: str | None = None) -> None:
        config = self.pipeline.config
        self.adapter.start(
            "kube", "--cluster", self.cluster, "--kubeconfig", kubeconfig or self.api.kubeconfig,
            "--namespace", self.namespace, "--node-selector", f"{RUN_LABEL}={self.tag}",
            "--broker", config.broker, "--prefix", config.prefix, "--log-level", "info",
        )  # fmt: skip

    def kill_adapter(self) -> None:
        self.adapter.kill()

    def as_service_account(self, rules: list[dict[str, Any]]) -> str:
        """A kubeconfig of a ServiceAccount of the story's namespace allowed `rules` (a
        ClusterRole of the story's own, bound to it) and nothing else; its path."""
        name, ns = "rackplane-kube", self.namespace
        self.api.ok(
            "POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": name}}
        )
        role = f"rackplane-kube-{self.tag}"
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        self.api.ok("POST", f"{rbac}/clusterroles", {"metadata": {"name": role}, "rules": rules})
        self.api.ok("POST", f"{rbac}/clusterrolebindings", {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        })  # fmt: skip
        self.cleanup.append(f"{rbac}/clusterroles/{role}")
        self.cleanup.append(f"{rbac}/clusterrolebindings/{role}")
        got = self.api.ok(
            "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 3600}},
        )  # fmt: skip
        config = json.loads(Path(self.api.kubeconfig).read_text())
        config["users"] = [{"name": "admin", "user": {"token": got["status"]["token"]}}]
        path = self.tmp / f"sa-{self.tag}.kubeconfig"
        path.write_text(json.dumps(config))
        return str(path)

    def stop(self) -> None:
        self.adapter.stop()
        for path in self.cleanup:
            self.api.call("DELETE", path)
        self.api.call("DELETE", f"/api/v1/namespaces/{self.namespace}")
        selector = urllib.parse.quote(f"{RUN_LABEL}={self.tag}")
        self.api.call("DELETE", f"/api/v1/nodes?labelSelector={selector}")

    def adapter_log(self) -> str:
        return self.adapter.log()

    # -- pods -----------------------------------------------------------------------------

    def gang(self, job: str, nodes: int, *, gated: bool = False, **meta: str) -> list[str]:
        """Bare pods of one gang, `schedulerName: rackplane` (or, `gated`, the default
        scheduler behind the `rackplane.io/placement` gate); their names."""
        names = [f"{job}-{i}" for i in range(nodes)]
        placed_by: dict[str, Any] = (
            {"schedulingGates": [{"name": "rackplane.io/placement"}]}
            if gated
            else {"schedulerName": "rackplane"}
        )
        bodies = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": {"rackplane.io/job": job},
                    "annotations": {"rackplane.io/nodes": str(nodes), **meta},
                },
                "spec": {
                    **placed_by,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "trainer", "image": "trainer:1"}],
                },
            }
            for name in names
        ]
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda b: self.api.ok("POST", path, b), bodies))
        return names

    def replica_set(self, job: str, nodes: int, **meta: str) -> None:
        """A ReplicaSet of one gang's pods (`schedulerName: rackplane`): kube-controller-manager
        makes them, and makes a new one for each that goes."""
        labels = {"rackplane.io/job": job}
        self.api.ok("POST", f"/apis/apps/v1/namespaces/{self.namespace}/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": job},
            "spec": {"replicas": nodes, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels, "annotations": {
                                      "rackplane.io/nodes": str(nodes), **meta}},
                                  "spec": {"schedulerName": "rackplane",
                                           "terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "trainer",
                                                           "image": "trainer:1"}]}}},
        })  # fmt: skip

    def budget(self, job: str, min_available: int) -> None:
        """A PodDisruptionBudget over the gang's pods."""
        self.api.ok("POST", f"/apis/policy/v1/namespaces/{self.namespace}/poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": f"{job}-budget"},
            "spec": {"minAvailable": min_available,
                     "selector": {"matchLabels": {"rackplane.io/job": job}}},
        })  # fmt: skip

    def drop_budget(self, job: str) -> None:
        self.api.ok(
            "DELETE",
            f"/apis/policy/v1/namespaces/{self.namespace}/poddisruptionbudgets/{job}-budget",
        )

    def pods(self, job: str | None = None) -> list[dict[str, Any]]:
        selector = f"rackplane.io/job={job}" if job else "rackplane.io/job"
        got = self.api.ok(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={urllib.parse.quote(selector)}",
        )
        return list(got["items"])

    def until_pods(
        self, job: str, ok: Callable[[list[dict[str, Any]]], bool], timeout: float = 90.0
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            pods = self.pods(job)
            if ok(pods):
                return pods
            if time.monotonic() > deadline or (self.adapter.starts and not self.adapter.running()):
                phases = sorted((p["metadata"]["name"], p["status"].get("phase"),
                                 p["spec"].get("nodeName")) for p in pods)  # fmt: skip
                raise AssertionError(
                    f"pods of {job} never got there: {phases[:40]}\n"
                    f"adapter log:\n{self.adapter_log()}"
                )
            time.sleep(0.25)

    def set_phase(self, pod: str, phase: str) -> None:
        """What a finished container would do (kwok plays Running only)."""
        self.api.ok(
            "PATCH",
            f"/api/v1/namespaces/{self.namespace}/pods/{pod}/status",
            {"status": {"phase": phase}},
            content_type="application/merge-patch+json",
        )

    # -- nodes ----------------------------------------------------------------------------

    def not_ready(self, node: str) -> None:
        """The node's kubelet dies: kwok stops playing it (else it sets Ready again at once)
        and the node reports Ready=False."""
        self.api.ok(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"metadata": {"annotations": {"kwok.x-k8s.io/node": None}}},
            content_type="application/merge-patch+json",
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.api.ok(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": {"conditions": [{"type": "Ready", "status": "False",
                                        "reason": "KubeletStopped", "lastTransitionTime": now,
                                        "lastHeartbeatTime": now,
                                        "message": "the kubelet stopped posting"}]}},
            content_type="application/strategic-merge-patch+json",
        )  # fmt: skip

    def cordon(self, node: str, on: bool = True) -> None:
        self.api.ok(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"spec": {"unschedulable": on}},
            content_type="application/merge-patch+json",
        )

    # -- rackplane ------------------------------------------------------------------------

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


@pytest.fixture(scope="module")
def pipeline(
    broker: BrokerUnderTest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    """A worker shared by a test module (each story has its own cluster id)."""
    p = start_pipeline(broker, tmp_path_factory.mktemp("worker"))
    try:
        yield p
    finally:
        p.worker.stop()


@pytest.fixture
def story_factory(
    api: Api, pipeline: Pipeline, tmp_path: Path
) -> Iterator[Callable[[int, int], Story]]:
    made: list[Story] = []

    def make(racks: int = 8, per_rack: int = 18) -> Story:
        story = Story(api, pipeline, tmp_path, racks, per_rack)
        made.append(story)
        story.create()
        story.start_adapter()
        return story

    try:
        yield make
    finally:
        for story in made:
            story.stop()
