"""The few calls of the Kubernetes API the adapter makes, over `kubernetes_asyncio`.

Every call asks for the raw response (`_preload_content=False`) and returns (status, JSON):
the generated models are skipped (a binding answers with a `Status` the models mistake), and
the adapter keeps objects as the API's JSON anyway.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config

from rackplane.kube.objects import GATE, JOB_LABEL, GroupApi

Json = dict[str, Any]

_WATCH_TIMEOUT_S = 300
"""The Workload API's PodGroups as Kubernetes 1.37 serves them (beta, `GenericWorkload`)."""
"""A watch the server ends after this long is opened again from its last resourceVersion."""


class ApiError(RuntimeError):
    """A call the API server refused, or one that never reached it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status


class KubeApi:
    """An API server reached through a kubeconfig file, or in-cluster."""

    def __init__(self, api: client.ApiClient) -> None:
        self._client = api
        self.pod_selector: str | None = JOB_LABEL
        """The pods listed and watched: those labelled `rackplane.io/job`; None: every pod
        (when gangs may be PodGroups', whose pods need no label)."""

    @classmethod
    async def connect(cls, kubeconfig: Path | None) -> KubeApi:
        """From `kubeconfig`; None: in-cluster (the pod's service account), else ~/.kube/config."""
        configuration = client.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(
                config_file=str(kubeconfig) if kubeconfig else None,
                client_configuration=configuration,
                persist_config=False,
            )
        return cls(client.ApiClient(configuration))

    async def close(self) -> None:
        await self._client.close()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Any:
        """The raw aiohttp response (the caller reads and releases it)."""
        try:
            return await self._client.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except client.ApiException as err:  # raised before any response (a bad request)
            raise ApiError(int(err.status or 0), str(err.reason)) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise ApiError(0, f"cannot reach the API server: {type(err).__name__}: {err}") from None

    async def call(self, method: str, path: str, **kwargs: Any) -> Json:
        """One request; its JSON answer (ApiError unless 2xx)."""
        response = await self._request(method, path, **kwargs)
        try:
            text = await _text(response)
            if not 200 <= response.status <= 299:
                raise ApiError(response.status, _message(text))
            data = json.loads(text) if text else {}
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as err:
            raise ApiError(0, f"{method} {path}: {type(err).__name__}: {err}") from None
        finally:
            response.release()
        return data if isinstance(data, dict) else {}

    async def list_nodes(self, selector: str | None = None) -> Json:
        query = [("labelSelector", selector)] if selector else []
        return await self.call("GET", "/api/v1/nodes", query=query, timeout=120.0)

    async def list_pods(self, namespace: str | None) -> Json:
        query = [("labelSelector", self.pod_selector)] if self.pod_selector else []
        return await self.call("GET", _pods_path(namespace), query=query, timeout=120.0)

    async def list_objects(self, kind: str, namespace: str | None) -> Json:
        """Every object of `kind` ("budgets", or `groups_kind(api)`)."""
        return await self.call("GET", _path(kind, namespace), timeout=120.0)

    async def serves_pod_groups(self, api: GroupApi) -> bool:
        """Whether the server serves `api`'s PodGroups (the Workload API: its gate and
        runtime-config on; a CRD: installed).

        Raises:
            ApiError: the server did not answer (a 404 is an answer: no).
        """
        try:
            found = await self.call("GET", api.path)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return any(r.get("name") == "podgroups" for r in found.get("resources") or ())

    async def watch(
        self, kind: str, namespace: str | None, version: str, selector: str | None = None
    ) -> AsyncIterator[Json]:
        """The watch events ({type, object}) of `kind` ("nodes", "pods", "budgets":
        PodDisruptionBudgets, or `groups_kind(api)`: PodGroups) after `version`
        (nodes: those `selector` picks, if given).

        Raises:
            ApiError: the watch could not start, or the server ended it with an error (410:
                the version is too old; list again).
        """
        path = _path(kind, namespace)
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", _WATCH_TIMEOUT_S),
        ]
        if kind == "pods":
            if self.pod_selector:
                query.append(("labelSelector", self.pod_selector))
        elif kind == "nodes" and selector:
            query.append(("labelSelector", selector))
        response = await self._request("GET", path, query=query, timeout=_WATCH_TIMEOUT_S + 30)
        try:
            if response.status != 200:
                raise ApiError(response.status, _message(await _text(response)))
            buffer = b""
            async for chunk in _chunks(response):  # a line can outgrow readline's limit
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        event = json.loads(line)
                    except ValueError:
                        raise ApiError(0, f"a watch line is not JSON: {line[:200]!r}") from None
                    if event.get("type") == "ERROR":
                        obj = event.get("object") or {}
                        raise ApiError(int(obj.get("code") or 0), str(obj.get("message", obj)))
                    yield event
        finally:
            response.release()

    async def bind(
        self, namespace: str, name: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "annotations": dict(annotations)},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.call("POST", f"{_pods_path(namespace)}/{name}/binding", body=body)

    async def evict(self, namespace: str, name: str) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        await self.call("POST", f"{_pods_path(namespace)}/{name}/eviction", body=body)

    async def create_pod(self, pod: Json) -> Json:
        return await self.call("POST", _pods_path(pod["metadata"]["namespace"]), body=pod)

    async def annotate(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> Json:
        return await self.call(
            "PATCH",
            f"{_pods_path(namespace)}/{name}",
            body={"metadata": {"annotations": dict(annotations)}},
            content_type="application/merge-patch+json",
        )

    async def ungate(self, pod: Json, node: str, annotations: Mapping[str, str]) -> Json:
        """Pin a gated pod to `node` and lift the gate (one JSON patch, tested on the pod's
        resourceVersion so a pod changed meanwhile is not patched blind)."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        ops: list[Json] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
        ]
        ops += pin_ops(spec, node)
        if not meta.get("annotations"):
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        for key, value in annotations.items():
            path = f"/metadata/annotations/{_pointer(key)}"
            ops.append({"op": "add", "path": path, "value": value})
        gates = [g for g in spec.get("schedulingGates") or () if g.get("name") != GATE]
        ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": gates})
        return await self.call(
            "PATCH",
            f"{_pods_path(meta['namespace'])}/{meta['name']}",
            body=ops,
            content_type="application/json-patch+json",
        )


async def _chunks(response: Any) -> AsyncIterator[bytes]:
    """A watch's body as it comes; a connection lost midway is an `ApiError` (watch again)."""
    try:
        async for chunk in response.content.iter_any():
            yield chunk
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        raise ApiError(0, f"the watch was cut: {type(err).__name__}: {err}") from None


def _pods_path(namespace: str | None) -> str:
    return "/api/v1/pods" if namespace is None else f"/api/v1/namespaces/{namespace}/pods"


GROUPS_KIND = "podgroups:"


def groups_kind(api: GroupApi) -> str:
    """The kind of `api`'s PodGroups for `list_objects` and `watch`."""
    return GROUPS_KIND + api.version


def _path(kind: str, namespace: str | None) -> str:
    if kind == "nodes":
        return "/api/v1/nodes"
    if kind == "pods":
        return _pods_path(namespace)
    if kind == "budgets":
        base, plural = "/apis/policy/v1", "poddisruptionbudgets"
    elif kind.startswith(GROUPS_KIND):
        base, plural = f"/apis/{kind.removeprefix(GROUPS_KIND)}", "podgroups"
    else:
        raise ValueError(f"no such kind: {kind!r}")
    return f"{base}/{plural}" if namespace is None else f"{base}/namespaces/{namespace}/{plural}"


def pin_ops(spec: Mapping[str, Any], node: str) -> list[Json]:
    """JSON patch operations that add "on node `node`" to a pod's required node affinity
    (a gated pod's affinity may only grow: each existing term gains the requirement)."""
    requirement: Json = {"key": "metadata.name", "operator": "In", "values": [node]}
    required_key = "requiredDuringSchedulingIgnoredDuringExecution"
    one_term: Json = {"nodeSelectorTerms": [{"matchFields": [requirement]}]}
    affinity = spec.get("affinity")
    if not affinity:
        value: Json = {"nodeAffinity": {required_key: one_term}}
        return [{"op": "add", "path": "/spec/affinity", "value": value}]
    node_affinity = affinity.get("nodeAffinity")
    if not node_affinity:
        value = {required_key: one_term}
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": value}]
    existing = (node_affinity.get(required_key) or {}).get("nodeSelectorTerms") or []
    path = f"/spec/affinity/nodeAffinity/{required_key}"
    if not existing:
        return [{"op": "add", "path": path, "value": one_term}]
    ops: list[Json] = []
    for i, term in enumerate(existing):
        if term.get("matchFields"):
            ops.append({"op": "add", "path": f"{path}/nodeSelectorTerms/{i}/matchFields/-",
                        "value": requirement})  # fmt: skip
        else:
            ops.append({"op": "add", "path": f"{path}/nodeSelectorTerms/{i}/matchFields",
                        "value": [requirement]})  # fmt: skip
    return ops


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


async def _text(response: Any) -> str:
    body: bytes = await response.read()
    return body.decode("utf-8", "replace")


def _message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    return (
        str(data.get("message") or data.get("reason") or text)[:500]
        if isinstance(data, dict)
        else text
    )
