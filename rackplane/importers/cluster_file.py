"""The rackplane cluster file: a cluster's racks, pods and policy in one YAML (or JSON) file.

Theory of operation: the file is read with line tracking (`_yaml`), validated against a small
document schema that mirrors the file (unknown keys are errors that list the allowed ones), then
turned into drafts and assembled into a `Topology` so cross-entry mistakes (a node in two racks)
also point at a line. `dump_cluster_file` writes the same format back, compactly: node lists as
hostlist expressions, one flow mapping per rack, and `parse(dump(t)).topology == t`.

The format::

    cluster: gb200-128            # cluster id
    gpus_per_node: 4              # default for racks that do not say
    pods:                         # optional; each {id, superpod?}
      - {id: pod01}
    racks:
      - {id: r001, pod: pod01, nodes: "gb-r001-n[01-18]"}   # hostlist or list of names
    policy:                       # optional; fields of PolicySettings
      spares_per_rack: 2
      xid_actions: {94: reboot_node}   # GPU Manager: override the XID table's action
"""

from __future__ import annotations

import os
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from rackplane.importers._assemble import PodDraft, RackDraft, Where, assemble_topology
from rackplane.importers._common import NodeList, read_text
from rackplane.importers._yaml import LineMap, load_document, validate
from rackplane.importers.hostlist import compress_hostlist
from rackplane.models._ids import ClusterId, PodId, RackId
from rackplane.models.settings import PolicySettings
from rackplane.models.topology import DEFAULT_POD, Rack, Topology


class ClusterFile(BaseModel):
    """What a cluster file says: the static topology and the policy knobs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topology: Topology
    policy: PolicySettings = PolicySettings()


class _PodDoc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: PodId
    superpod: PodId | None = None


class _RackDoc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: RackId
    pod: PodId | None = None
    nodes: NodeList
    gpus_per_node: int | None = Field(default=None, ge=1, le=64, strict=True)


class _ClusterDoc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: ClusterId
    gpus_per_node: int = Field(default=4, ge=1, le=64, strict=True)
    pods: tuple[_PodDoc, ...] = ()
    racks: tuple[_RackDoc, ...] = Field(min_length=1)
    policy: PolicySettings = PolicySettings()


def parse_cluster_file(text: str, source: str) -> ClusterFile:
    """Read a cluster file's text.

    Args:
        text: YAML or JSON in the cluster-file format.
        source: the file's name, used in errors.

    Returns:
        The topology, and the policy (defaults for every knob the file leaves out).

    Raises:
        TopologyFileError: bad syntax, an unknown key, a wrong type, a bad hostlist, a node in
            two racks, a rack naming an unlisted pod; always with the line or field.
    """
    data, lines = load_document(text, source)
    if not isinstance(data, dict):
        raise Where(lines.line_of(())).error(
            source, "expected a mapping with 'cluster' and 'racks' at the top of the file"
        )
    doc = validate(_ClusterDoc, data, source, lines)
    racks = [_rack_draft(i, r, doc, lines) for i, r in enumerate(doc.racks)]
    pods = [PodDraft(p.id, p.superpod, Where.of(lines, "pods", i)) for i, p in enumerate(doc.pods)]
    topology = assemble_topology(
        source, doc.cluster, racks, pods, where=Where(lines.line_of(("cluster",)), "cluster")
    )
    _check_policy(doc.policy, topology, source, lines)
    return ClusterFile(topology=topology, policy=doc.policy)


def _check_policy(policy: PolicySettings, topology: Topology, source: str, lines: LineMap) -> None:
    """Refuse the knobs a file sets that no rack can honour: jobs would be accepted and wait
    for ever (the defaults are not judged: a file of small test racks leaves them)."""
    said = policy.model_fields_set
    largest = max(len(r.nodes) for r in topology.racks)
    keep = policy.spares_per_rack
    if "spares_per_rack" in said and keep >= largest:
        raise Where.of(lines, "policy", "spares_per_rack").error(
            source,
            f"fewer spares per rack than the largest rack's {largest} nodes (with "
            f"{keep} every node is a spare and no job can ever run)",
            got=str(keep),
        )
    room = largest - keep
    if "slice_size" in said and policy.rack_local_slices and policy.slice_size > room:
        raise Where.of(lines, "policy", "slice_size").error(
            source,
            f"a slice size that fits a rack outside its spares: at most {room} (the largest "
            f"rack has {largest} nodes, {keep} kept as spares); a job of default slices would "
            "wait for ever",
            got=f"slice_size {policy.slice_size}, spares_per_rack {keep}",
        )


def load_cluster_file(path: str | os.PathLike[str]) -> ClusterFile:
    """Read and parse a cluster file.

    Args:
        path: the file, YAML or JSON.

    Raises:
        OSError: the file cannot be read.
        TopologyFileError: see `parse_cluster_file`.
    """
    text, source = read_text(path)
    return parse_cluster_file(text, source)


def dump_cluster_file(topology: Topology, policy: PolicySettings | None = None) -> str:
    """Write a topology (and optionally a policy) as a compact cluster file.

    Node lists become hostlist expressions; `gpus_per_node` is written once at the top when
    every rack agrees, else on each rack; pods are listed only when the topology lists them
    (which it must when some pod has a superpod); racks in the default pod omit `pod`.

    Args:
        topology: what to write.
        policy: written under `policy` (every knob, explicitly) when given; one the
            topology can honour (`parse_cluster_file` refuses a slice size no rack holds
            outside its spares, and spares that take a whole rack).

    Returns:
        YAML text such that `parse_cluster_file(text, ...).topology == topology`.
    """
    gpus = {r.gpus_per_node for r in topology.racks}
    shared_gpus = gpus.pop() if len(gpus) == 1 else None
    doc: dict[str, Any] = {"cluster": topology.cluster}
    if shared_gpus is not None:
        doc["gpus_per_node"] = shared_gpus
    if topology.pods:
        doc["pods"] = [
            _Flow({"id": p.id} if p.superpod is None else {"id": p.id, "superpod": p.superpod})
            for p in topology.pods
        ]
    doc["racks"] = [_rack_entry(r, shared_gpus is None) for r in topology.racks]
    if policy is not None:
        doc["policy"] = policy.model_dump(mode="json")
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1_000, allow_unicode=True)
    return f"# rackplane cluster file\n{body}"


def _rack_draft(index: int, rack: _RackDoc, doc: _ClusterDoc, lines: LineMap) -> RackDraft:
    where = Where.of(lines, "racks", index)
    return RackDraft(
        id=rack.id,
        nodes=rack.nodes,
        pod=rack.pod or DEFAULT_POD,
        gpus_per_node=rack.gpus_per_node or doc.gpus_per_node,
        where=where,
        nodes_where=Where.of(lines, "racks", index, "nodes"),
        pod_where=Where.of(lines, "racks", index, "pod") if rack.pod else where,
    )


def _rack_entry(rack: Rack, per_rack_gpus: bool) -> _Flow:
    entry: dict[str, Any] = {"id": rack.id}
    if rack.pod != DEFAULT_POD:
        entry["pod"] = rack.pod
    entry["nodes"] = compress_hostlist(rack.nodes)
    if per_rack_gpus:
        entry["gpus_per_node"] = rack.gpus_per_node
    return _Flow(entry)


class _Flow(dict[str, Any]):
    """A mapping written on one line: `{id: r001, pod: pod01, nodes: ...}`."""


class _Dumper(yaml.SafeDumper):
    """Safe dumper that writes `_Flow` mappings inline and indents block sequences."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_flow(dumper: yaml.SafeDumper, data: _Flow) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=True)


_Dumper.add_representer(_Flow, _represent_flow)
