"""The test control plane itself (`scripts/k8s/control_plane.py`): a real kube-apiserver on
etcd, with kwok playing the kubelets. What the Kubernetes adapter (issue 17) will rest on:
fake GB200 nodes with their real labels become Ready, a pod for another scheduler stays
Pending until it is bound, and a bound pod runs.

Runs in `make test-k8s` (the plane started around pytest; `RACKPLANE_TEST_KUBECONFIG`).
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.k8s


class Api:
    """Just enough of the Kubernetes REST API, from the plane's kubeconfig."""

    def __init__(self, kubeconfig: str) -> None:
        config = json.loads(Path(kubeconfig).read_text())
        cluster = config["clusters"][0]["cluster"]
        self.server = cluster["server"]
        self.token = config["users"][0]["user"]["token"]
        self.context = ssl.create_default_context(cafile=cluster["certificate-authority"])

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.server + path, data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}",
                     "Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.context) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def until(self, path: str, ok: Any, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            status, got = self.call("GET", path)
            if status == 200 and ok(got):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} never got there; last: {status} {got}")
            time.sleep(0.1)


@pytest.fixture(scope="module")
def api() -> Api:
    kubeconfig = os.environ.get("RACKPLANE_TEST_KUBECONFIG")
    if not kubeconfig:
        pytest.fail("RACKPLANE_TEST_KUBECONFIG is not set: run through `make test-k8s`")
    return Api(kubeconfig)


def fake_node(name: str, clique: str) -> dict[str, Any]:
    """A GB200 node as the GPU operator labels it, played by kwok."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok",
                       "nvidia.com/gpu.clique": clique, "nvidia.com/gpu.count": "4",
                       "nvidia.com/gpu.product": "NVIDIA-GB200"},
        },
        "status": {"allocatable": {"cpu": "144", "memory": "800Gi", "pods": "110",
                                   "nvidia.com/gpu": "4"},
                   "capacity": {"cpu": "144", "memory": "800Gi", "pods": "110",
                                "nvidia.com/gpu": "4"}},
    }  # fmt: skip


def ready(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


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
