"""Kubernetes nodes and pods as the adapter sees them: small immutable views of the API's JSON.

Theory of operation: the adapter keeps the API server's nodes and pods (from list + watch) as
plain JSON dicts, and `node_view` / `pod_view` reduce each to what the rules in `plan` read.
Nothing here does I/O; the views are built again whenever an object changes.

Names rackplane reads and writes (all under `rackplane.io/`):
    - label `rackplane.io/job`: the gang a pod belongs to (one job per namespace and value).
      Without it, a pod of rackplane's (`schedulerName: rackplane`) that names a PodGroup
      belongs to that group's gang: the job is `<namespace>/<group>`, its size the group's
      minimum (`GROUP_APIS`), the rest from the group's `rackplane.io/*` annotations (then
      the pods'). The PodGroups read (`GROUP_APIS`, each where the server serves it): the
      Workload API's (`scheduling.k8s.io/v1beta1` in 1.37, behind the `GenericWorkload`
      gate; the pod names it in `spec.schedulingGroup.podGroupName`, the size is
      `spec.schedulingPolicy.gang.minCount`), Volcano's (`scheduling.volcano.sh/v1beta1`;
      annotation `scheduling.k8s.io/group-name` or `scheduling.volcano.sh/group-name`),
      KAI Scheduler's (`scheduling.run.ai/v2alpha2`; annotation `pod-group-name`) and the
      coscheduling plugin's (`scheduling.x-k8s.io/v1alpha1`; label
      `scheduling.x-k8s.io/pod-group`), the last three sized by `spec.minMember`.
    - labels or annotations `rackplane.io/nodes`, `kind`, `priority`, `slice-size`,
      `min-nodes-per-slice`, `checkpoint-interval`, `owner`, `name`: the job's spec (`gangs`).
    - scheduling gate `rackplane.io/placement`: the gate mode (kube-scheduler binds).
    - annotations written on placement: `rackplane.io/node`, `rackplane.io/slice`,
      `rackplane.io/slice-nodes`, `rackplane.io/slices` (and, in the gate mode,
      `rackplane.io/affinity-before`); on a recreated bare pod
      `rackplane.io/base-name` and `rackplane.io/generation`; on a gang rackplane cannot take,
      `rackplane.io/problem`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

GROUP = "rackplane.io"
JOB_LABEL = f"{GROUP}/job"
GATE = f"{GROUP}/placement"
SCHEDULER_NAME = "rackplane"

NODE_ANNOTATION = f"{GROUP}/node"
SLICE_ANNOTATION = f"{GROUP}/slice"
SLICE_NODES_ANNOTATION = f"{GROUP}/slice-nodes"
SLICES_ANNOTATION = f"{GROUP}/slices"
BASE_NAME_ANNOTATION = f"{GROUP}/base-name"
GENERATION_ANNOTATION = f"{GROUP}/generation"
PROBLEM_ANNOTATION = f"{GROUP}/problem"
AFFINITY_ANNOTATION = f"{GROUP}/affinity-before"
"""Gate mode: the pod's `spec.affinity` before rackplane pinned it (JSON; "null": none)."""

CONTROLLER_ANNOTATIONS = (
    NODE_ANNOTATION,
    SLICE_ANNOTATION,
    SLICE_NODES_ANNOTATION,
    SLICES_ANNOTATION,
    BASE_NAME_ANNOTATION,
    GENERATION_ANNOTATION,
    PROBLEM_ANNOTATION,
    AFFINITY_ANNOTATION,
)
"""The annotations only rackplane writes; a recreated pod does not inherit the placement ones."""

STANDARD_CONDITIONS = frozenset(
    {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"}
)
GPU_CONDITION_MARKS = ("gpu", "nvidia", "nvlink", "xid")
"""A node condition other than the standard ones whose type contains one of these (any case)
and whose status is "True" reports a GPU problem (the GPU operator's and NVSentinel's
health checks set such conditions)."""


class GroupApi(NamedTuple):
    """A PodGroup API: where its groups are served, and how a pod names one."""

    version: str
    """`group/version`, as in a PodGroup's `apiVersion`."""
    title: str
    annotations: tuple[str, ...] = ()
    """Pod annotations that name the group (the first set wins)."""
    label: str = ""
    """A pod label that names the group."""

    @property
    def path(self) -> str:
        return f"/apis/{self.version}"


WORKLOAD_API = GroupApi("scheduling.k8s.io/v1beta1", "the Workload API")
GROUP_APIS = (
    WORKLOAD_API,
    GroupApi(
        "scheduling.volcano.sh/v1beta1",
        "Volcano",
        annotations=("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name"),
    ),
    GroupApi("scheduling.run.ai/v2alpha2", "KAI Scheduler", annotations=("pod-group-name",)),
    GroupApi("scheduling.x-k8s.io/v1alpha1", "coscheduling", label="scheduling.x-k8s.io/pod-group"),
)
"""The PodGroup APIs rackplane reads gangs from, where the server serves them."""


class PodKey(NamedTuple):
    """A pod's namespace and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class NodeView(NamedTuple):
    """What the rules read of a node."""

    name: str
    unschedulable: bool
    problems: tuple[str, ...]
    """Why the node cannot run work, in words (empty: it can)."""
    episode: str
    """Names this spell of problems (or of health): changes when a condition or taint does."""


class PodView(NamedTuple):
    """What the rules read of a pod."""

    key: PodKey
    job: str
    """The `rackplane.io/job` label's value, else the PodGroup it names (`group`)."""
    node: str
    """`spec.nodeName`, or where rackplane sent it in the gate mode; "" when unplaced."""
    bound: bool
    """`spec.nodeName` is set."""
    phase: str
    deleting: bool
    gated: bool
    """Held by the `rackplane.io/placement` gate."""
    ours: bool
    """`schedulerName: rackplane` or the gate: rackplane places it."""
    bare: bool
    """No controller owns it: rackplane recreates it when it must go."""
    reason: str
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    generation: int
    base_name: str
    group: str = ""
    """The PodGroup the pod names when the gang is a group's ("" otherwise)."""
    group_api: str = ""
    """That group's API (`GroupApi.version`)."""

    @property
    def group_key(self) -> GroupKey:
        return GroupKey(self.key.namespace, self.group_api, self.group)


class GroupKey(NamedTuple):
    """A PodGroup: its namespace, API (`GroupApi.version`) and name."""

    namespace: str
    api: str
    name: str


class GroupView(NamedTuple):
    """What the rules read of a PodGroup (any of `GROUP_APIS`)."""

    namespace: str
    name: str
    min_count: int | None
    """The gang's size: the Workload API's `spec.schedulingPolicy.gang.minCount` (None for a
    `basic` group), the others' `spec.minMember`."""
    annotations: Mapping[str, str]
    api: str = WORKLOAD_API.version

    @property
    def key(self) -> GroupKey:
        return GroupKey(self.namespace, self.api, self.name)


class BudgetView(NamedTuple):
    """What the rules read of a PodDisruptionBudget (`policy/v1`)."""

    namespace: str
    name: str
    selector: Mapping[str, Any] | None
    """`spec.selector`: `{}` selects every pod of the namespace, None (absent) none."""
    allowed: int
    """`status.disruptionsAllowed`; 0 while the status is older than the spec (the API
    server refuses every eviction under such a budget)."""
    computed: bool
    """`status.observedGeneration` has caught up with `metadata.generation` (the disruption
    controller of kube-controller-manager computed it)."""

    @property
    def title(self) -> str:
        return f"PodDisruptionBudget {self.namespace}/{self.name}"


def budget_view(obj: Mapping[str, Any]) -> BudgetView:
    """The view of a PodDisruptionBudget (the API's JSON)."""
    meta, spec, status = _part(obj, "metadata"), _part(obj, "spec"), _part(obj, "status")
    selector = spec.get("selector")
    observed, generation = status.get("observedGeneration"), meta.get("generation")
    computed = isinstance(observed, int) and isinstance(generation, int) and observed >= generation
    allowed = status.get("disruptionsAllowed")
    return BudgetView(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name", "")),
        selector=selector if isinstance(selector, Mapping) else None,
        allowed=allowed if computed and isinstance(allowed, int) and allowed > 0 else 0,
        computed=computed,
    )


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (`matchLabels`, `matchExpressions`) picks these labels: every
    term must hold; an empty selector picks everything, None nothing; an operator it does not
    know picks nothing (as the API server would refuse it)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for term in selector.get("matchExpressions") or ():
        key, op = term.get("key"), term.get("operator")
        values = set(term.get("values") or ())
        match op:
            case "In":
                ok = key in labels and labels[key] in values
            case "NotIn":
                ok = key not in labels or labels[key] not in values
            case "Exists":
                ok = key in labels
            case "DoesNotExist":
                ok = key not in labels
            case _:
                ok = False
        if not ok:
            return False
    return True


def group_view(obj: Mapping[str, Any], api: str | None = None) -> GroupView:
    """The view of a PodGroup (the API's JSON) of `api` (`GroupApi.version`; by default its
    `apiVersion`: the items of a built-in type's list carry none)."""
    meta, spec = _part(obj, "metadata"), _part(obj, "spec")
    api = api or str(obj.get("apiVersion") or WORKLOAD_API.version)
    if api == WORKLOAD_API.version:
        count = _part(_part(spec, "schedulingPolicy"), "gang").get("minCount")
    else:
        count = spec.get("minMember")
    return GroupView(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name", "")),
        min_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
        annotations=meta.get("annotations") or {},
        api=api,
    )


def named_group(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> tuple[str, str]:
    """The PodGroup a pod names, and its API: ("", "") when it names none."""
    name = _part(spec, "schedulingGroup").get("podGroupName")
    if name:
        return str(name), WORKLOAD_API.version
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    for api in GROUP_APIS[1:]:
        for key in api.annotations:
            if annotations.get(key):
                return str(annotations[key]), api.version
        if api.label and labels.get(api.label):
            return str(labels[api.label]), api.version
    return "", ""


def node_view(obj: Mapping[str, Any]) -> NodeView:
    """The view of a node (the API's JSON)."""
    meta, spec, status = _part(obj, "metadata"), _part(obj, "spec"), _part(obj, "status")
    problems: list[str] = []
    marks: list[str] = []
    ready = None
    for cond in status.get("conditions") or ():
        kind, value = str(cond.get("type", "")), str(cond.get("status", ""))
        if kind == "Ready":
            ready = value
            marks.append(f"Ready={value}@{cond.get('lastTransitionTime', '')}")
            if value != "True":
                why = cond.get("reason") or cond.get("message") or ""
                problems.append(f"Ready={value}" + (f" ({why})" if why else ""))
        elif (
            kind not in STANDARD_CONDITIONS
            and value == "True"
            and any(m in kind.lower() for m in GPU_CONDITION_MARKS)
        ):
            marks.append(f"{kind}@{cond.get('lastTransitionTime', '')}")
            why = cond.get("message") or cond.get("reason") or ""
            problems.append(f"{kind}" + (f" ({why})" if why else ""))
    if ready is None:
        problems.append("no Ready condition")
    for taint in spec.get("taints") or ():
        if taint.get("effect") == "NoExecute":
            key = str(taint.get("key", ""))
            marks.append(f"taint:{key}@{taint.get('timeAdded', '')}")
            problems.append(f"NoExecute taint {key}")
    digest = hashlib.sha256("\n".join(sorted(marks)).encode()).hexdigest()[:12]
    return NodeView(
        name=str(meta.get("name", "")),
        unschedulable=bool(spec.get("unschedulable", False)),
        problems=tuple(problems),
        episode=digest,
    )


def pod_view(obj: Mapping[str, Any]) -> PodView | None:
    """The view of a pod of a gang (the API's JSON); None when it is in none: no
    `rackplane.io/job` label, nor rackplane's with a PodGroup."""
    meta, spec, status = _part(obj, "metadata"), _part(obj, "spec"), _part(obj, "status")
    labels: Mapping[str, str] = meta.get("labels") or {}
    group, group_api = named_group(meta, spec)
    job = labels.get(JOB_LABEL)
    if not job:
        if not group or spec.get("schedulerName") != SCHEDULER_NAME:
            return None
        job = group
    else:
        group = group_api = ""
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    gates = {g.get("name") for g in spec.get("schedulingGates") or ()}
    gated = GATE in gates
    bound_to = str(spec.get("nodeName") or "")
    gate_mode = gated or (not bound_to and spec.get("schedulerName") != SCHEDULER_NAME)
    node = bound_to or (annotations.get(NODE_ANNOTATION, "") if gate_mode and not gated else "")
    owners = meta.get("ownerReferences") or ()
    try:
        generation = int(annotations.get(GENERATION_ANNOTATION, "0"))
    except ValueError:
        generation = 0
    name = str(meta.get("name", ""))
    reason = " ".join(str(status.get(k) or "") for k in ("reason", "message")).strip()
    return PodView(
        key=PodKey(str(meta.get("namespace") or "default"), name),
        job=job,
        node=node,
        bound=bool(bound_to),
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        gated=gated,
        ours=gated or spec.get("schedulerName") == SCHEDULER_NAME,
        bare=not any(o.get("controller") for o in owners),
        reason=reason,
        annotations=annotations,
        labels=labels,
        generation=generation,
        base_name=annotations.get(BASE_NAME_ANNOTATION, name),
        group=group,
        group_api=group_api,
    )


def replacement(obj: Mapping[str, Any], name: str, generation: int) -> dict[str, Any]:
    """A bare pod made again: its spec without the node, its labels and annotations without
    rackplane's placement ones, a new name. What `Recreate` creates."""
    meta, spec = _part(obj, "metadata"), copy.deepcopy(dict(_part(obj, "spec")))
    spec.pop("nodeName", None)
    before = (meta.get("annotations") or {}).get(AFFINITY_ANNOTATION)
    if before is not None:  # the gate mode: pinned by rackplane; unpin and gate it again
        try:
            affinity = json.loads(before)
        except ValueError:  # not what rackplane wrote: drop the pin, keep no affinity
            affinity = None
        if not isinstance(affinity, dict):
            spec.pop("affinity", None)
        else:
            spec["affinity"] = affinity
        gates = [g for g in spec.get("schedulingGates") or () if g.get("name") != GATE]
        spec["schedulingGates"] = [*gates, {"name": GATE}]
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k not in CONTROLLER_ANNOTATIONS
    }
    annotations[BASE_NAME_ANNOTATION] = str(
        (meta.get("annotations") or {}).get(BASE_NAME_ANNOTATION, meta.get("name", ""))
    )
    annotations[GENERATION_ANNOTATION] = str(generation)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace") or "default",
            "labels": dict(meta.get("labels") or {}),
            "annotations": annotations,
        },
        "spec": spec,
    }


def _part(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = obj.get(name)
    return value if isinstance(value, Mapping) else {}
