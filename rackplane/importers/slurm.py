"""Slurm's block topology (the topology/block plugin) as a rackplane `Topology`.

Theory of operation: on GB200 NVL72 systems each Slurm base block is one NVLink domain, so a
base block becomes a rack (its id is the block name, its nodes the block's hostlist). Slurm's
`block_sizes` are aggregation levels above the base block; rackplane reads them as the IB fabric:

    block_sizes: [18, 144, 576]
                  |    |    `-- 576 / 144 = 4 pods per superpod
                  |    `------- 144 / 18  = 8 blocks per pod
                  `------------ base block: one rack

Blocks are grouped into pods in file order (`<topology>-pod01`, ...), pods into superpods the
same way (`<topology>-superpod01`, ...). With only a base size (or none) every rack is in one
pod. Levels past the third are ignored: rackplane's fabric has racks, pods and superpods.

Both file formats are accepted: `topology.yaml` (Slurm 25.05+, a YAML list of topologies) and
the classic `topology.conf` (`BlockName=... Nodes=...` lines); `parse_slurm_topology` tells
them apart by their first non-comment line.

Algorithm overview:
    1. Detect the format and read it into a `BlockLayout` (blocks, sizes, where each was written).
    2. Check the sizes: increasing, each a multiple of the one before.
    3. Assign each block its pod (and each pod its superpod) by position.
    4. Assemble the `Topology`, which checks for repeated block names and nodes.
"""

from __future__ import annotations

import itertools
import os
import re

from rackplane.importers._assemble import PodDraft, RackDraft, assemble_topology
from rackplane.importers._common import read_text
from rackplane.importers._slurm_formats import BlockLayout, read_topology_conf, read_topology_yaml
from rackplane.importers.errors import TopologyFileError
from rackplane.models.topology import Topology

_CONF_LINE = re.compile(r"^[A-Za-z]+\s*=")


def parse_slurm_topology(
    text: str,
    source: str,
    *,
    cluster: str,
    gpus_per_node: int = 4,
    name: str | None = None,
) -> Topology:
    """Read a Slurm block topology (`topology.yaml` or `topology.conf`).

    Args:
        text: the file's content.
        source: the file's name, used in errors.
        cluster: the cluster id to give the topology (Slurm's files do not name it).
        gpus_per_node: GPUs on every node (Slurm's topology files do not say).
        name: for `topology.yaml`, the topology to use; default: the first with
            `cluster_default: true`, else the only block topology. For `topology.conf`, the
            prefix of the pod ids (default `block`).

    Returns:
        One rack per base block, grouped into pods (and superpods) by `block_sizes`.

    Raises:
        TopologyFileError: bad syntax, a tree or flat topology, an unknown parameter, a bad
            hostlist, a node in two blocks, sizes that do not nest; with the line.
    """
    layout = _read(text, source, name)
    pod_of, pods = _group(layout, source)
    racks = [
        RackDraft(
            id=block.name,
            nodes=block.nodes,
            pod=pod_of[i],
            gpus_per_node=gpus_per_node,
            where=block.where,
            nodes_where=block.nodes_where,
            pod_where=block.where,
        )
        for i, block in enumerate(layout.blocks)
    ]
    return assemble_topology(source, cluster, racks, pods)


def load_slurm_topology(
    path: str | os.PathLike[str],
    *,
    cluster: str,
    gpus_per_node: int = 4,
    name: str | None = None,
) -> Topology:
    """Read and parse a Slurm `topology.yaml` or `topology.conf`.

    Args:
        path: the file.
        cluster: the cluster id.
        gpus_per_node: GPUs on every node.
        name: see `parse_slurm_topology`.

    Raises:
        OSError: the file cannot be read.
        TopologyFileError: see `parse_slurm_topology`.
    """
    text, source = read_text(path)
    return parse_slurm_topology(
        text, source, cluster=cluster, gpus_per_node=gpus_per_node, name=name
    )


def _read(text: str, source: str, name: str | None) -> BlockLayout:
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if _CONF_LINE.match(line):
            return read_topology_conf(text, source, name)
        return read_topology_yaml(text, source, name)
    raise TopologyFileError(
        source,
        "expected a Slurm block topology: BlockName= lines (topology.conf) or a list of "
        "topologies (topology.yaml); the file has none",
    )


def _group(layout: BlockLayout, source: str) -> tuple[list[str], list[PodDraft]]:
    """Each block's pod id, and the pod drafts when superpods exist (else pods are implied)."""
    sizes = layout.sizes
    for previous, size in itertools.pairwise(sizes):
        if size <= previous or size % previous:
            raise layout.sizes_where.error(
                source,
                "expected increasing block sizes, each a multiple of the one before",
                ", ".join(str(s) for s in sizes),
            )
    count = len(layout.blocks)
    per_pod = sizes[1] // sizes[0] if len(sizes) >= 2 else count
    pod_index = [i // per_pod for i in range(count)]
    pod_ids = _numbered(f"{layout.name}-pod", max(pod_index) + 1)
    pod_of = [pod_ids[k] for k in pod_index]
    if len(sizes) < 3:
        return pod_of, []
    per_superpod = sizes[2] // sizes[1]
    superpod_ids = _numbered(f"{layout.name}-superpod", (len(pod_ids) - 1) // per_superpod + 1)
    first_block = {pod_of[i]: i for i in reversed(range(count))}
    pods = [
        PodDraft(pod, superpod_ids[k // per_superpod], layout.blocks[first_block[pod]].where)
        for k, pod in enumerate(pod_ids)
    ]
    return pod_of, pods


def _numbered(prefix: str, count: int) -> list[str]:
    width = max(2, len(str(count)))
    return [f"{prefix}{n:0{width}d}" for n in range(1, count + 1)]
