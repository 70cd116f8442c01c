"""`rackplane kube`: the adapter between rackplane and a Kubernetes API server. Holds no rules.

Theory of operation: three loops feed two pictures and one loop acts on them.
    - Two reflectors list the API server's nodes and the pods with a `rackplane.io/job` label,
      then watch them from that list's resourceVersion (listing again when the watch is too
      old: 410), keeping each object as the API's JSON. When the server has the Workload
      API's PodGroups (`scheduling.k8s.io/v1beta1`, asked at the start), a third reflector
      keeps them, and the pods reflector reads every pod (a PodGroup's pods need no label).
    - A follower reads the cluster's events from the start of the log and folds them into
      the cluster state (what rackplane decided).
    - Once both lists are in and the follower has reached the end the log had when it started,
      the reconciler runs `plan` whenever something changed (and every second): it sends the
      plan's commands (one per subject in flight; again after `resend_after` if still
      planned) and performs its actions, each pod's in order, never two at once for a pod.

What it did itself and has not seen come back yet is remembered so the next plan does not
ask for it again: a pod it bound counts as bound, one it evicted as leaving, one it made as
there. After a crash nothing of that is needed: the API server shows what was done and the
plan's command ids are deduplicated by the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from rackplane.importers.errors import TopologyFileError
from rackplane.importers.k8s import (
    CLIQUE_LABEL,
    GPU_RESOURCE,
    POD_LABEL,
    SUPERPOD_LABEL,
    k8s_topology,
)
from rackplane.keyfiles import KeyFile
from rackplane.kube._api import GROUPS_KIND, ApiError, Json, KubeApi, groups_kind
from rackplane.kube.objects import (
    AFFINITY_ANNOTATION,
    GROUP_APIS,
    BudgetView,
    GroupApi,
    GroupKey,
    GroupView,
    NodeView,
    PodKey,
    PodView,
    budget_view,
    group_view,
    node_view,
    pod_view,
    replacement,
)
from rackplane.kube.plan import (
    CORDON_REASON,
    Action,
    Annotate,
    Bind,
    Evict,
    Recreate,
    Ungate,
    View,
    plan,
)
from rackplane.models import ClusterId, Event, NodeCordoned, NodeUncordoned, Topology
from rackplane.projections import ClusterState
from rackplane.streams.client import Client
from rackplane.streams.config import StreamConfig
from rackplane.streams.mirror import ClusterMirror, Outbox

log = logging.getLogger("rackplane.kube")

_RETRY_S = (0.2, 0.5, 1.0, 2.0, 5.0)
_FORBIDDEN_RETRY_S = 60.0
EVICTION_RETRY_S = 5.0
"""How long a pod whose eviction a disruption budget refused waits before the next try."""


class KubeAdapter:
    """One cluster's adapter. `run()` until cancelled."""

    def __init__(
        self,
        config: StreamConfig,
        api: KubeApi,
        cluster: ClusterId,
        *,
        actor: str,
        key: KeyFile | None = None,
        namespace: str | None = None,
        node_selector: str | None = None,
        pod_label: str = POD_LABEL,
        superpod_label: str = SUPERPOD_LABEL,
        settle: float = 0.02,
        resend_after: float = 30.0,
        concurrency: int = 32,
    ) -> None:
        self.config, self.api, self.cluster = config, api, cluster
        self.actor, self.key, self.namespace = actor, key, namespace
        self.node_selector = node_selector
        self.labels = (pod_label, superpod_label)
        self.settle, self.resend_after = settle, resend_after
        self._slots = asyncio.Semaphore(concurrency)

        self.kube_cordoned: set[str] = set()
        self.mirror = ClusterMirror(
            config, cluster, on_event=lambda e: _tally_cordon(self.kube_cordoned, e), log=log
        )
        self.outbox = Outbox(key=key, resend_after=resend_after, log=log)
        self.nodes: dict[str, Json] = {}
        self.pods: dict[PodKey, Json] = {}
        self._node_views: dict[str, NodeView] = {}
        self._pod_views: dict[PodKey, PodView] = {}
        self._fabric: dict[str, tuple[object, ...]] = {}
        self._topology: Topology | None = None
        self._topology_stale = True
        self._bound: dict[PodKey, tuple[str, Mapping[str, str]]] = {}
        """Pods this adapter bound or pinned, until the API server shows them placed."""
        self._leaving: set[PodKey] = set()
        """Pods this adapter evicted, until the API server shows them deleting or gone."""
        self._busy: set[PodKey] = set()
        self._in_flight: dict[tuple[str, str], int] = defaultdict(int)
        """Actions under way per gang (namespace, job label)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self.listed = {k: asyncio.Event() for k in ("nodes", "pods", "budgets")}
        self.groups: dict[GroupKey, GroupView] = {}
        """The PodGroups of every API in `GROUP_APIS` the server serves."""
        self.budgets: dict[tuple[str, str], BudgetView] = {}
        """The PodDisruptionBudgets, by namespace and name."""
        self._refused: dict[PodKey, float] = {}
        """Pods whose eviction a disruption budget refused, and when (retried after
        `EVICTION_RETRY_S`, as `kubectl drain` does)."""

    # -- the loops ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Reflect, follow and reconcile until cancelled."""
        kinds = ["nodes", "pods", "budgets"]
        for api in GROUP_APIS:
            if await self._pod_groups_served(api):
                self.api.pod_selector = None  # a PodGroup's pods carry no label: read all
                self.listed[groups_kind(api)] = asyncio.Event()
                kinds.append(groups_kind(api))
        async with Client(self.config) as client:
            loops = [
                *(asyncio.create_task(self._reflect(k), name=f"kube-{k}") for k in kinds),
                asyncio.create_task(self._follow(client), name="kube-follow"),
                asyncio.create_task(self._reconcile(client), name="kube-reconcile"),
            ]
            try:
                done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    task.result()  # a loop only ends by raising
            finally:
                for task in [*loops, *self._tasks]:
                    task.cancel()
                await asyncio.gather(*loops, *self._tasks, return_exceptions=True)

    @property
    def state(self) -> ClusterState:
        """The cluster as rackplane decided it (folded from the log)."""
        return self.mirror.state

    @property
    def caught_up(self) -> asyncio.Event:
        return self.mirror.caught_up

    async def _follow(self, client: Client) -> None:
        wake = asyncio.create_task(self._forward_changes())
        try:
            await self.mirror.follow(client)
        finally:
            wake.cancel()

    async def _forward_changes(self) -> None:
        while True:
            await self.mirror.changed.wait()
            self.mirror.changed.clear()
            self._wake.set()

    async def ready(self) -> None:
        """Every list is in and the log is read to where it ended at the start."""
        for listed in list(self.listed.values()):
            await listed.wait()
        await self.caught_up.wait()

    async def _pod_groups_served(self, api: GroupApi) -> bool:
        for delay in _RETRY_S:
            try:
                served = await self.api.serves_pod_groups(api)
            except ApiError as err:
                log.warning(
                    "kube: cannot ask for %s's PodGroups (%s); again in %.1f s",
                    api.title,
                    err,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            log.info("kube: gangs of %s's PodGroups (%s): %s", api.title, api.version, served)
            return served
        log.warning("kube: whether %s's PodGroups are served is not known: not read", api.title)
        return False

    async def _reflect(self, kind: str) -> None:
        failures = 0
        while True:
            try:
                if kind == "nodes":
                    listing = await self.api.list_nodes(self.node_selector)
                elif kind == "pods":
                    listing = await self.api.list_pods(self.namespace)
                else:
                    listing = await self.api.list_objects(kind, self.namespace)
                self._replace(kind, listing.get("items") or [])
                version = str((listing.get("metadata") or {}).get("resourceVersion", ""))
                self.listed[kind].set()
                failures = 0
                while True:  # a watch the server times out is opened again where it was
                    watch = self.api.watch(kind, self.namespace, version, self.node_selector)
                    async for event in watch:
                        obj = event.get("object") or {}
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        if event.get("type") != "BOOKMARK":
                            self._apply(kind, str(event.get("type")), obj)
            except ApiError as err:
                if err.status == 410:
                    log.info("kube: the %s watch is too old; listing again", kind)
                    continue
                optional = kind not in ("nodes", "pods")
                if optional and err.status == 403:
                    first = not self.listed[kind].is_set()
                    (log.warning if first else log.debug)(
                        "kube: may not read %s (%s): going on without them (%s); asking "
                        "again in %.0f s",
                        kind,
                        err,
                        "a defrag may pick a gang whose budget refuses, and its evictions then wait"
                        if kind == "budgets"
                        else "their gangs wait",
                        _FORBIDDEN_RETRY_S,
                    )
                    self.listed[kind].set()  # reconcile without them rather than not at all
                    await asyncio.sleep(_FORBIDDEN_RETRY_S)
                    continue
                delay = _RETRY_S[min(failures, len(_RETRY_S) - 1)]
                failures += 1
                log.warning("kube: %s list/watch failed (%s); again in %.1f s", kind, err, delay)
                await asyncio.sleep(delay)

    def _replace(self, kind: str, items: list[Json]) -> None:
        if kind == "nodes":
            self.nodes = {}
            self._node_views = {}
            for obj in items:
                self._apply("nodes", "ADDED", obj)
            self._topology_stale = True
        elif kind == "budgets" or kind.startswith(GROUPS_KIND):
            if kind == "budgets":
                self.budgets = {}
            else:
                api = kind.removeprefix(GROUPS_KIND)
                self.groups = {k: g for k, g in self.groups.items() if k.api != api}
            for obj in items:
                self._apply(kind, "ADDED", obj)
        else:
            self.pods = {}
            self._pod_views = {}
            for obj in items:
                self._apply("pods", "ADDED", obj)
        self._wake.set()

    def _apply(self, kind: str, change: str, obj: Json) -> None:
        meta = obj.get("metadata") or {}
        if kind == "nodes":
            name = str(meta.get("name", ""))
            if change == "DELETED":
                self.nodes.pop(name, None)
                self._node_views.pop(name, None)
                self._fabric.pop(name, None)
                self._topology_stale = True
            else:
                self.nodes[name] = obj
                self._node_views[name] = node_view(obj)
                fabric = _fabric_of(obj, self.labels)
                if self._fabric.get(name) != fabric:
                    self._fabric[name] = fabric
                    self._topology_stale = True
        elif kind.startswith(GROUPS_KIND):
            group = group_view(obj, kind.removeprefix(GROUPS_KIND))
            if change == "DELETED":
                self.groups.pop(group.key, None)
            else:
                self.groups[group.key] = group
        elif kind == "budgets":
            budget = budget_view(obj)
            if change == "DELETED":
                self.budgets.pop((budget.namespace, budget.name), None)
            else:
                self.budgets[(budget.namespace, budget.name)] = budget
        else:
            key = PodKey(str(meta.get("namespace") or "default"), str(meta.get("name", "")))
            if change == "DELETED":
                self.pods.pop(key, None)
                self._pod_views.pop(key, None)
                self._bound.pop(key, None)
                self._leaving.discard(key)
                self._refused.pop(key, None)
            else:
                if _older(obj, self.pods.get(key)):
                    return  # a response overtaken by the watch: keep the newer
                self.pods[key] = obj
                view = pod_view(obj)
                if view is None:  # its job label was taken off
                    self.pods.pop(key, None)
                    self._pod_views.pop(key, None)
                else:
                    self._pod_views[key] = view
                    if view.bound:
                        self._bound.pop(key, None)
                    if view.deleting:
                        self._leaving.discard(key)
        self._wake.set()

    async def _reconcile(self, client: Client) -> None:
        await self.ready()
        log.info("kube: reconciling cluster %s", self.cluster)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=1.0)
            self._wake.clear()
            if self.settle:
                await asyncio.sleep(self.settle)  # let a burst of watch events land first
            p = plan(self.state, self.view(), actor=self.actor)
            self._act(p.actions)
            await self.outbox.send(client, p.orders)

    # -- the pictures ---------------------------------------------------------------------------

    def view(self) -> View:
        """The API server's side as `plan` reads it, with what this adapter did not yet seen."""
        if self._topology_stale:
            self._topology = self._read_topology()
            self._topology_stale = False
        pods = list(self._pod_views.values())
        if self._bound or self._leaving:
            pods = [self._as_done(p) for p in pods]
        return View(
            nodes=self._node_views,
            pods=pods,
            topology=self._topology,
            kube_cordoned=frozenset(self.kube_cordoned),
            groups=self.groups,
            budgets=tuple(self.budgets.values()),
        )

    def _as_done(self, p: PodView) -> PodView:
        done = self._bound.get(p.key)
        if done is not None and not p.node:
            node, annotations = done  # a gated pod being pinned is placed, not bound
            merged = {**p.annotations, **annotations}
            p = p._replace(node=node, bound=not p.gated, annotations=merged)
        if p.key in self._leaving:
            p = p._replace(deleting=True)
        return p

    def _read_topology(self) -> Topology | None:
        try:
            found = k8s_topology(
                list(self.nodes.values()),
                cluster=self.cluster,
                pod_label=self.labels[0],
                superpod_label=self.labels[1],
            )
        except TopologyFileError as err:
            if self.nodes:
                log.warning("kube: the nodes make no topology: %s", err)
            return None
        for name, why in found.skipped:
            log.info("kube: node %s left out: %s", name, why)
        return found.topology

    # -- acting ---------------------------------------------------------------------------------

    def _act(self, actions: tuple[Action, ...]) -> None:
        by_pod: dict[PodKey, list[Action]] = defaultdict(list)
        for action in actions:
            if isinstance(action, Recreate):
                key = PodKey(action.template.namespace, action.name)
            else:
                key = action.pod
            by_pod[key].append(action)
        now = asyncio.get_running_loop().time()
        for key, todo in by_pod.items():
            if key in self._busy:
                continue
            refused = self._refused.get(key)
            waits = refused is not None and now - refused < EVICTION_RETRY_S
            if waits and isinstance(todo[0], Evict):
                continue
            gang = self._gang_of(todo[0])
            if isinstance(todo[0], Recreate) and todo[0].backfill and self._in_flight[gang]:
                continue  # a creation of this gang may not have come back yet
            self._busy.add(key)
            self._in_flight[gang] += 1
            task = asyncio.create_task(self._perform(key, gang, todo))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _gang_of(self, action: Action) -> tuple[str, str]:
        key = action.template if isinstance(action, Recreate) else action.pod
        view = self._pod_views.get(key)
        return (key.namespace, view.job if view is not None else "")

    async def _perform(self, key: PodKey, gang: tuple[str, str], todo: list[Action]) -> None:
        try:
            async with self._slots:
                for action in todo:
                    if not await self._one(action):
                        break
        except Exception:  # a bug, not the API server: say so, and let the next plan retry
            log.exception("kube: acting on pod %s failed", key)
        finally:
            self._busy.discard(key)
            self._in_flight[gang] -= 1
            self._wake.set()

    async def _one(self, action: Action) -> bool:
        """Do one action; False when the pod's next actions must wait for another plan."""
        kind = type(action).__name__.lower()
        try:
            await _DO[type(action)](self, action)
        except ApiError as err:
            if err.status == 409 and isinstance(action, Bind | Recreate):
                return True  # already bound / already made: the watch will show it
            if err.status == 404 and isinstance(action, Evict):
                return True
            if err.status == 429 and isinstance(action, Evict):
                first = action.pod not in self._refused
                self._refused[action.pod] = asyncio.get_running_loop().time()
                (log.warning if first else log.debug)(
                    "kube: eviction of pod %s refused (%s); again every %.0f s",
                    action.pod,
                    err,
                    EVICTION_RETRY_S,
                )
                return False
            log.warning("kube: %s failed: %s (%s)", kind, _describe(action), err)
            return False
        log.info("kube: %s", _describe(action))
        return True

    async def _bind(self, a: Bind) -> None:
        self._bound[a.pod] = (a.node, a.annotations)  # before the call: the node is taken
        try:
            await self.api.bind(a.pod.namespace, a.pod.name, a.node, a.annotations)
        except ApiError as err:
            if err.status != 409:  # 409: bound already (the watch will say where)
                self._bound.pop(a.pod, None)
            raise

    async def _ungate(self, a: Ungate) -> None:
        raw = self.pods.get(a.pod)
        if raw is None:
            raise ApiError(404, f"pod {a.pod} is not known")
        before = json.dumps((raw.get("spec") or {}).get("affinity"))
        annotations = {**a.annotations, AFFINITY_ANNOTATION: before}
        self._bound[a.pod] = (a.node, annotations)  # before the call: the node is taken
        try:
            updated = await self.api.ungate(raw, a.node, annotations)
        finally:
            self._bound.pop(a.pod, None)
        self._apply("pods", "MODIFIED", updated)

    async def _evict(self, a: Evict) -> None:
        await self.api.evict(a.pod.namespace, a.pod.name)
        self._leaving.add(a.pod)
        if self._refused.pop(a.pod, None) is not None:
            log.info("kube: eviction of pod %s accepted at last", a.pod)

    async def _recreate(self, a: Recreate) -> None:
        raw = self.pods.get(a.template)
        if raw is None:
            raise ApiError(404, f"template pod {a.template} is gone")
        created = await self.api.create_pod(replacement(raw, a.name, a.generation))
        self._apply("pods", "ADDED", created)

    async def _annotate(self, a: Annotate) -> None:
        updated = await self.api.annotate(a.pod.namespace, a.pod.name, a.annotations)
        self._apply("pods", "MODIFIED", updated)


_DO: Mapping[type, Callable[[KubeAdapter, Any], Awaitable[None]]] = {
    Bind: KubeAdapter._bind,
    Ungate: KubeAdapter._ungate,
    Evict: KubeAdapter._evict,
    Recreate: KubeAdapter._recreate,
    Annotate: KubeAdapter._annotate,
}


def _describe(a: Action) -> str:
    match a:
        case Bind(pod=pod, node=node):
            return f"bound pod {pod} to node {node}"
        case Ungate(pod=pod, node=node):
            return f"pinned pod {pod} to node {node} and lifted its gate"
        case Evict(pod=pod, reason=reason):
            return f"evicted pod {pod}: {reason}"
        case Recreate(template=t, name=name):
            return f"made pod {t.namespace}/{name} again from {t}"
        case Annotate(pod=pod, annotations=annotations):
            return f"annotated pod {pod}: {dict(annotations)}"


def _fabric_of(obj: Json, labels: tuple[str, str]) -> tuple[object, ...]:
    """What of a node the topology reads (its labels of interest and GPU capacity)."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    node_labels = meta.get("labels") or {}
    return (
        node_labels.get(CLIQUE_LABEL),
        node_labels.get(labels[0]),
        node_labels.get(labels[1]),
        (status.get("capacity") or {}).get(GPU_RESOURCE),
    )


def _older(obj: Json, cached: Json | None) -> bool:
    """True when `obj` is an older version of `cached` (resourceVersions compared as the
    numbers the API server gives; anything else is taken as newer)."""
    if cached is None:
        return False
    new = (obj.get("metadata") or {}).get("resourceVersion", "")
    old = (cached.get("metadata") or {}).get("resourceVersion", "")
    return bool(str(new).isdigit() and str(old).isdigit() and int(new) < int(old))


def _tally_cordon(kube_cordoned: set[str], event: Event) -> None:
    if isinstance(event, NodeCordoned):
        if event.reason == CORDON_REASON:
            kube_cordoned.add(event.node)
        else:
            kube_cordoned.discard(event.node)
    elif isinstance(event, NodeUncordoned):
        kube_cordoned.discard(event.node)
