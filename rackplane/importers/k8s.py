"""Kubernetes nodes (`kubectl get nodes -o json`) as a rackplane `Topology`.

Theory of operation: on GB200 systems the NVIDIA GPU operator labels every GPU node with
`nvidia.com/gpu.clique=<ClusterUUID>.<CliqueID>`: nodes with the same value share one NVLink
domain, so each clique becomes a rack. GPUs per node come from `status.capacity`
(`nvidia.com/gpu: "4"`). The IB fabric comes from the labels NVIDIA Topograph writes:
`network.topology.nvidia.com/leaf` (the pod) and `.../spine` (the superpod); other label names
can be passed in.

Rules of this file:
    - A node without GPUs (no `nvidia.com/gpu` capacity, or 0) is skipped silently.
    - A GPU node without the clique label is skipped and reported in `K8sImport.skipped`.
    - Nodes of one clique must agree on their GPU count and pod label, else the file is refused
      at the first node that disagrees.
    - If any used node lacks the pod label, every rack goes into one pod, `pod-default`; if any
      lacks the superpod label, there are no superpods.
    - Racks (and nodes within them) keep the order in which the file first names them.
    - Label values become ids by replacing characters outside `[A-Za-z0-9._:/@+-]` with `-`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rackplane.importers._assemble import PodDraft, RackDraft, Where, assemble_topology
from rackplane.importers._common import read_text, to_id
from rackplane.importers._yaml import LineMap, load_document, validate
from rackplane.importers.errors import TopologyFileError
from rackplane.models.topology import DEFAULT_POD, Topology

CLIQUE_LABEL = "nvidia.com/gpu.clique"
GPU_RESOURCE = "nvidia.com/gpu"
POD_LABEL = "network.topology.nvidia.com/leaf"
SUPERPOD_LABEL = "network.topology.nvidia.com/spine"


class K8sImport(BaseModel):
    """What a `kubectl get nodes -o json` dump gave: the topology and the GPU nodes left out."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topology: Topology
    skipped: tuple[tuple[str, str], ...] = ()
    """(node name, reason) for each GPU node that could not be placed in an NVLink domain."""


class _Metadata(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)


class _Status(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    capacity: dict[str, Any] = Field(default_factory=dict)


class _Node(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    metadata: _Metadata
    status: _Status = _Status()


class _NodeList(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    items: tuple[_Node, ...]


@dataclass
class _Clique:
    """A rack being gathered: the first node's facts, against which later nodes are checked."""

    value: str
    first: str
    gpus: int
    where: Where
    pod: str | None = None
    nodes: list[str] = field(default_factory=list)


@dataclass
class _Fabric:
    """The pod and superpod labels seen so far, and whether every used node had them."""

    pod_label: str
    superpod_label: str
    all_pods: bool = True
    all_superpods: bool = True
    superpod_of: dict[str, tuple[str, str]] = field(default_factory=dict)
    """pod label value -> (superpod label value, the first node that said so)."""


def parse_k8s_nodes(
    text: str,
    source: str,
    *,
    cluster: str | None = None,
    pod_label: str = POD_LABEL,
    superpod_label: str = SUPERPOD_LABEL,
) -> K8sImport:
    """Read `kubectl get nodes -o json` output.

    Args:
        text: the JSON (YAML from `-o yaml` works too).
        source: the file's name, used in errors and as the fallback cluster id.
        cluster: the cluster id; default: the `<ClusterUUID>` part of the clique labels when
            all agree, else the file's stem.
        pod_label: the node label naming the IB pod.
        superpod_label: the node label naming the superpod.

    Returns:
        The topology (one rack per clique) and the skipped GPU nodes with reasons.

    Raises:
        TopologyFileError: not a node list; a bad GPU count; nodes of one clique that disagree
            on GPUs or pod; a repeated node name; no usable GPU node at all.
    """
    data, lines = load_document(text, source)
    return _parse(data, lines, source, cluster, pod_label, superpod_label)


def k8s_topology(
    nodes: list[dict[str, Any]],
    *,
    cluster: str,
    pod_label: str = POD_LABEL,
    superpod_label: str = SUPERPOD_LABEL,
    source: str = "the API server's nodes",
) -> K8sImport:
    """The topology of nodes as the API server gives them (each the JSON of a `Node`): what
    `parse_k8s_nodes` reads from a file, for the Kubernetes adapter.

    Raises:
        TopologyFileError: as `parse_k8s_nodes` (errors name `items[i]`, not a line).
    """
    return _parse({"items": nodes}, LineMap(), source, cluster, pod_label, superpod_label)


def _parse(
    data: object,
    lines: LineMap,
    source: str,
    cluster: str | None,
    pod_label: str,
    superpod_label: str,
) -> K8sImport:
    if not isinstance(data, dict):
        raise TopologyFileError(
            source,
            "expected a node list as printed by `kubectl get nodes -o json`",
            line=lines.line_of(()),
        )
    nodes = validate(_NodeList, data, source, lines).items
    cliques: dict[str, _Clique] = {}
    skipped: list[tuple[str, str]] = []
    named: dict[str, int] = {}
    fabric = _Fabric(pod_label, superpod_label)
    for i, node in enumerate(nodes):
        name, labels = node.metadata.name, node.metadata.labels
        earlier = named.setdefault(name, i)
        if earlier != i:
            raise _at(lines, i, "metadata", "name").error(
                source, f"expected unique node names; {name!r} is also items[{earlier}]"
            )
        gpus = _gpus(node, source, lines, i)
        if not gpus:
            continue
        value = labels.get(CLIQUE_LABEL, "")
        if not value:
            skipped.append((name, f"no {CLIQUE_LABEL} label"))
            continue
        clique = cliques.get(value)
        if clique is None:
            where = _at(lines, i, "metadata", "labels", CLIQUE_LABEL)
            clique = cliques[value] = _Clique(value=value, first=name, gpus=gpus, where=where)
        _check_agrees(clique, node, gpus, fabric, source, lines, i)
        clique.nodes.append(name)
    if not cliques:
        raise TopologyFileError(
            source,
            f"expected at least one GPU node with a {CLIQUE_LABEL} label "
            f"(found {len(skipped)} GPU node(s) without it)",
        )
    topology = _assemble(source, cluster, list(cliques.values()), fabric)
    return K8sImport(topology=topology, skipped=tuple(skipped))


def load_k8s_nodes(
    path: str | os.PathLike[str],
    *,
    cluster: str | None = None,
    pod_label: str = POD_LABEL,
    superpod_label: str = SUPERPOD_LABEL,
) -> K8sImport:
    """Read and parse a saved `kubectl get nodes -o json`.

    Raises:
        OSError: the file cannot be read.
        TopologyFileError: see `parse_k8s_nodes`.
    """
    text, source = read_text(path)
    return parse_k8s_nodes(
        text, source, cluster=cluster, pod_label=pod_label, superpod_label=superpod_label
    )


def _gpus(node: _Node, source: str, lines: LineMap, i: int) -> int:
    raw = node.status.capacity.get(GPU_RESOURCE)
    if raw is None:
        return 0
    text = str(raw).strip() if isinstance(raw, str | int) and not isinstance(raw, bool) else ""
    if not (text.isascii() and text.isdigit()):
        raise _at(lines, i, "status", "capacity", GPU_RESOURCE).error(
            source,
            f"expected a whole number of GPUs on node {node.metadata.name!r}",
            repr(raw),
        )
    return int(text)


def _check_agrees(
    clique: _Clique,
    node: _Node,
    gpus: int,
    fabric: _Fabric,
    source: str,
    lines: LineMap,
    i: int,
) -> None:
    """Check one node against its clique (GPUs, pod) and its pod (superpod); note gaps."""
    name, labels = node.metadata.name, node.metadata.labels
    if gpus != clique.gpus:
        raise _at(lines, i, "status", "capacity", GPU_RESOURCE).error(
            source,
            f"expected node {name!r} to have {clique.gpus} GPUs like {clique.first!r}, "
            f"which shares its NVLink domain {clique.value!r}",
            str(gpus),
        )
    pod = labels.get(fabric.pod_label) or None
    superpod = labels.get(fabric.superpod_label) or None
    fabric.all_pods &= pod is not None
    fabric.all_superpods &= superpod is not None
    if pod is None:
        return
    if clique.pod is None:
        clique.pod = pod
    elif pod != clique.pod:
        raise _at(lines, i, "metadata", "labels", fabric.pod_label).error(
            source,
            f"expected node {name!r} in pod {clique.pod!r} like the rest of its NVLink "
            f"domain {clique.value!r}",
            repr(pod),
        )
    if superpod is None:
        return
    said, by = fabric.superpod_of.setdefault(pod, (superpod, name))
    if said != superpod:
        raise _at(lines, i, "metadata", "labels", fabric.superpod_label).error(
            source,
            f"expected node {name!r} under superpod {said!r} like {by!r}, "
            f"which is in the same pod {pod!r}",
            repr(superpod),
        )


def _assemble(
    source: str, cluster: str | None, cliques: list[_Clique], fabric: _Fabric
) -> Topology:
    def pod_id(value: str | None) -> str:
        return to_id(value, fallback="pod") if fabric.all_pods and value else DEFAULT_POD

    pods: list[PodDraft] = []
    if fabric.all_pods and fabric.all_superpods:
        where = {c.pod: c.where for c in reversed(cliques)}
        pods = [
            PodDraft(pod_id(pod), to_id(superpod, fallback="superpod"), where.get(pod, Where()))
            for pod, (superpod, _) in fabric.superpod_of.items()
        ]
    racks = [
        RackDraft(
            id=to_id(c.value, fallback="clique"),
            nodes=tuple(c.nodes),
            pod=pod_id(c.pod),
            gpus_per_node=c.gpus,
            where=c.where,
            nodes_where=c.where,
            pod_where=c.where,
        )
        for c in cliques
    ]
    return assemble_topology(source, cluster or _cluster_id(cliques, source), racks, pods)


def _cluster_id(cliques: list[_Clique], source: str) -> str:
    uuids = {c.value.partition(".")[0] if "." in c.value else "" for c in cliques}
    if len(uuids) == 1 and "" not in uuids:
        return to_id(uuids.pop(), fallback="cluster")
    return to_id(PurePath(source).stem, fallback="cluster")


def _at(lines: LineMap, *path: str | int) -> Where:
    return Where.of(lines, "items", *path)
