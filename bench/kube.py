"""`rackplane kube` against a real kube-apiserver: binding throughput, gang latency, swap time.

Needs the test control plane (`make bench-k8s` starts it: etcd, kube-apiserver,
kube-scheduler and kwok; `RACKPLANE_TEST_KUBECONFIG`), an embedded Tansu, a worker and the
adapter, each a process of its own, as in production. On 128 racks x 18 kwok nodes:
1. gang latency: a 128-pod gang (16-node slices) created with 8 threads; the clock runs from
   the last pod's creation to every pod bound (polled every 20 ms), five gangs one after another;
2. throughput: 1,024 pods (8 gangs of 128) created at once; pods bound per second from the
   first creation to the last binding;
3. swap: a node under a running gang turned NotReady (kwok stops playing it, Ready=False);
   the clock runs to the replacement pod Running on the rack's spare, three times.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rackplane.kube._api import Json, KubeApi
from rackplane.streams import EmbeddedBroker
from rackplane.streams.config import StreamConfig
from rackplane.streams.process import WorkerProcess
from rackplane.streams.topics import ensure_topics

Progress = Callable[[str], None]
RUN_LABEL = "bench.rackplane.io/run"
POLL_S = 0.02


def _node(name: str, clique: str, tag: str) -> Json:
    capacity = {"cpu": "144", "memory": "800Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"nvidia.com/gpu.clique": clique, RUN_LABEL: tag, "type": "kwok"},
        },
        "status": {"allocatable": capacity, "capacity": capacity},
    }


def _pod(name: str, namespace: str, job: str, nodes: int) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"rackplane.io/job": job},
            "annotations": {"rackplane.io/nodes": str(nodes), "rackplane.io/slice-size": "16"},
        },
        "spec": {
            "schedulerName": "rackplane",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "trainer", "image": "trainer:1"}],
        },
    }


class _Bench:
    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.gate = asyncio.Semaphore(8)

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Json:
        async with self.gate:
            return await self.api.call(method, path, body=body, **kw)

    async def gang(self, job: str, nodes: int) -> float:
        """Create the gang's pods; the time the last creation returned."""
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        await asyncio.gather(
            *(self.call("POST", path, _pod(f"{job}-{i}", self.namespace, job, nodes))
              for i in range(nodes))
        )  # fmt: skip
        return time.perf_counter()

    async def pods(self, job: str) -> list[Json]:
        got = await self.api.call(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            query=[("labelSelector", f"rackplane.io/job={job}")],
        )
        return list(got.get("items") or [])

    async def until(
        self, jobs: list[str], ok: Callable[[list[Json]], bool], timeout: float
    ) -> float:
        deadline = time.perf_counter() + timeout
        while True:
            pods = [p for job in jobs for p in await self.pods(job)]
            if ok(pods):
                return time.perf_counter()
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{jobs}: not there in {timeout:.0f} s")
            await asyncio.sleep(POLL_S)


def _all_bound(n: int) -> Callable[[list[Json]], bool]:
    return lambda pods: len(pods) == n and all(p["spec"].get("nodeName") for p in pods)


def _replaced(name: str) -> Callable[[list[Json]], bool]:
    """The pod made again in place of `name` (`<name>-r<n>`) runs."""
    return lambda pods: any(
        p["metadata"]["name"].startswith(name + "-r") and p["status"].get("phase") == "Running"
        for p in pods
    )


async def run_all(say: Progress, *, racks: int = 128, per_rack: int = 18) -> list[dict[str, Any]]:
    kubeconfig = os.environ.get("RACKPLANE_TEST_KUBECONFIG")
    if not kubeconfig:
        raise SystemExit("the kube benchmark needs the test control plane: run `make bench-k8s`")
    tag = uuid.uuid4().hex[:6]
    api = await KubeApi.connect(Path(kubeconfig))
    namespace, cluster = f"bench-{tag}", f"bench-{tag}"
    b = _Bench(api, namespace)
    rows: list[dict[str, Any]] = []
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        config = StreamConfig(broker=broker.url, prefix=f"b{tag}", app_id=f"b{tag}", partitions=2)
        await ensure_topics(config)
        worker = WorkerProcess(config, data_dir=Path(tmp))
        worker.start()
        adapter = None
        try:
            say(f"kube: creating {racks} x {per_rack} kwok nodes")
            await b.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
            started = time.perf_counter()
            bodies = [
                _node(f"b{tag}-r{r:03d}-{i:02d}", f"{tag}.r{r}", tag)
                for r in range(racks)
                for i in range(per_rack)
            ]
            await asyncio.gather(*(b.call("POST", "/api/v1/nodes", body) for body in bodies))
            rows.append(
                {"what": f"create {racks * per_rack} nodes", "s": time.perf_counter() - started}
            )
            log = Path(tmp) / "adapter.log"
            adapter = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "rackplane", "kube", "--cluster", cluster,
                "--kubeconfig", kubeconfig, "--namespace", namespace,
                "--node-selector", f"{RUN_LABEL}={tag}", "--broker", config.broker,
                "--prefix", config.prefix,
                stdout=log.open("wb"), stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            say("kube: 128-pod gangs, last pod created -> all bound")
            latencies = []
            for g in range(5):
                created = await b.gang(f"g{g}", 128)
                done = await b.until([f"g{g}"], _all_bound(128), timeout=180)
                latencies.append(done - created)
            rows.append({
                "what": "128-pod gang: last pod created -> all bound (median of 5)",
                "s": statistics.median(latencies), "min s": min(latencies),
                "max s": max(latencies),
            })  # fmt: skip
            say("kube: 1,024 pods at once")
            first = time.perf_counter()
            jobs = [f"t{g}" for g in range(8)]
            await asyncio.gather(*(b.gang(job, 128) for job in jobs))
            done = await b.until(jobs, _all_bound(1024), timeout=300)
            rows.append({"what": "pods bound per second (1,024 pods, 8 gangs)",
                         "pods/s": 1024 / (done - first), "s": done - first})  # fmt: skip
            say("kube: node NotReady -> replacement Running")
            swaps = []
            for g in range(3):
                pods = await b.pods(f"g{g}")
                victim = pods[0]
                node = victim["spec"]["nodeName"]
                await b.call("PATCH", f"/api/v1/nodes/{node}",
                             {"metadata": {"annotations": {"kwok.x-k8s.io/node": None}}},
                             content_type="application/merge-patch+json")  # fmt: skip
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                t0 = time.perf_counter()
                await b.call("PATCH", f"/api/v1/nodes/{node}/status",
                             {"status": {"conditions": [{"type": "Ready", "status": "False",
                                                         "reason": "KubeletStopped",
                                                         "lastTransitionTime": now}]}},
                             content_type="application/strategic-merge-patch+json")  # fmt: skip
                t1 = await b.until([f"g{g}"], _replaced(victim["metadata"]["name"]), timeout=120)
                swaps.append(t1 - t0)
            rows.append({
                "what": "node NotReady -> replacement pod Running (median of 3)",
                "s": statistics.median(swaps), "min s": min(swaps), "max s": max(swaps),
            })  # fmt: skip
        finally:
            if adapter is not None and adapter.returncode is None:
                adapter.terminate()
                await adapter.wait()
            worker.stop()
            await b.call("DELETE", f"/api/v1/namespaces/{namespace}")
            await api.call(
                "DELETE", "/api/v1/nodes", query=[("labelSelector", f"{RUN_LABEL}={tag}")]
            )
            await api.close()
    for row in rows:
        row["nodes"] = racks * per_rack
    return rows


def plan_cost(sizes: tuple[int, ...], say: Progress, *, gangs: int = 8) -> list[dict[str, Any]]:
    """The adapter's pure cycle alone (`kube.plan`), no server: one plan over `racks` x 18
    nodes and `gangs` running 128-pod gangs, as the adapter makes it on every change. Also
    the topology read from the nodes' JSON (done only when node labels change)."""
    from datetime import UTC, datetime

    from rackplane.engine import Engine
    from rackplane.importers.k8s import k8s_topology
    from rackplane.kube import View, plan
    from rackplane.kube.gangs import gang_spec
    from rackplane.kube.objects import node_view, pod_view
    from rackplane.kube.plan import shape
    from rackplane.models import RegisterTopology, StartJob, SubmitJob
    from rackplane.policies.presets import default_policies

    rows = []
    for racks in sizes:
        say(f"kube plan: {racks} racks")
        nodes = [
            _node(f"n-r{r:04d}-{i:02d}", f"c.r{r}", "x") for r in range(racks) for i in range(18)
        ]
        for n in nodes:
            n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        t0 = time.perf_counter()
        topology = k8s_topology(nodes, cluster="bench").topology
        read_s = time.perf_counter() - t0
        engine = Engine("bench", clock=lambda: datetime(2026, 12, 1, tzinfo=UTC),
                        policies=default_policies())  # fmt: skip
        engine.handle(RegisterTopology(id="r", cluster="bench", actor="a", topology=topology))
        pods: list[Json] = []
        for g in range(gangs):
            gang = [_pod(f"g{g}-{i}", "ns", f"g{g}", 128) for i in range(128)]
            first = pod_view(gang[0])
            assert first is not None
            engine.handle(SubmitJob(id=f"s{g}", cluster="bench", actor="a", job=gang_spec(first)))
            job = engine.state.jobs[f"ns/g{g}"]
            for pod, node in zip(gang, [n for s in job.slices for n in s.nodes], strict=True):
                pod["spec"]["nodeName"] = node  # as the adapter binds it
                pod["metadata"]["annotations"].update(shape(job, node))
                pod["status"] = {"phase": "Running"}
            engine.handle(StartJob(id=f"t{g}", cluster="bench", actor="a", job=f"ns/g{g}"))
            pods += gang
        t0 = time.perf_counter()
        node_views = {n["metadata"]["name"]: node_view(n) for n in nodes}
        pod_views = [v for v in (pod_view(p) for p in pods) if v is not None]
        views_s = time.perf_counter() - t0
        view = View(nodes=node_views, pods=pod_views, topology=topology)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            p = plan(engine.state, view, actor="runtime:kube")
            times.append(time.perf_counter() - t0)
        if p.orders or p.actions:  # a settled cluster: nothing to do
            raise RuntimeError(
                f"plan on a settled cluster: {len(p.orders)} orders, {len(p.actions)} actions"
            )
        rows.append({
            "what": "plan (settled cluster)", "racks": racks, "nodes": racks * 18,
            "pods": len(pods), "plan ms": statistics.median(times) * 1000,
            "views ms": views_s * 1000, "topology read ms": read_s * 1000,
        })  # fmt: skip
    return rows
