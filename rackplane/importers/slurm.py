r"""Slurm's topologies (the topology/block and topology/tree plugins) as a rackplane `Topology`.

Theory of operation, topology/block: on GB200 NVL72 systems each Slurm base block is one NVLink
domain, so a base block becomes a rack (its id is the block name, its nodes the block's
hostlist). Slurm's `block_sizes` are aggregation levels above the base block; rackplane reads
them as the IB fabric:

    block_sizes: [18, 144, 576]
                  |    |    `-- 576 / 144 = 4 pods per superpod
                  |    `------- 144 / 18  = 8 blocks per pod
                  `------------ base block: one rack

Blocks are grouped into pods in file order (`<topology>-pod01`, ...), pods into superpods the
same way (`<topology>-superpod01`, ...). With only a base size (or none) every rack is in one
pod. Levels past the third are ignored: rackplane's fabric has racks, pods and superpods. Both
files are accepted: `topology.yaml` (Slurm 25.05+, a YAML list of topologies) and the classic
`topology.conf` (`BlockName=... Nodes=...` lines).

Theory of operation, topology/tree: the tree describes IB switches, not NVLink domains, so it
is read on the assumption that each leaf switch serves one NVLink domain:

            spine                   <- superpod (the leaves' grandparent), when there is one
           /     \
       pod01     pod02              <- pod (a leaf's parent); a leaf without one: its own pod
       /  \       |
    rack01 rack02 rack03            <- leaf switch = rack: its nodes are the leaf's hostlist

A leaf with more than `domain_nodes` nodes cannot be one NVLink domain (an IB leaf cabled to
several racks): that is an error, never one giant rack. A leaf with fewer is read as a partial
rack, with a note. Switches above the superpods are left out, with a note. The tree comes as
`topology.conf` (`SwitchName=... Nodes=...` and `SwitchName=... Switches=...` lines) or as
`scontrol show topology` output (the same lines with `Level=`; upper switches list every node
below them too, which is checked). A file with any `SwitchName=` line is a tree; otherwise
its first non-comment line tells `topology.conf` (`Parameter=`) from `topology.yaml`.

Algorithm overview (block):
    1. Detect the format and read it into a `BlockLayout` (blocks, sizes, where each was written).
    2. Check the sizes: increasing, each a multiple of the one before.
    3. Assign each block its pod (and each pod its superpod) by position.
    4. Assemble the `Topology`, which checks for repeated block names and nodes.

Algorithm overview (tree):
    1. Read the lines into `SwitchSpec`s (per-line syntax, a unique name each).
    2. Link children to parents: every child named in the file, under one parent, no cycle.
    3. Measure each switch's level above its leaves; a switch's children share one level.
    4. Check what scontrol lists under an upper switch against the leaves below it.
    5. Each leaf becomes a rack (sized against `domain_nodes`), its parent its pod, its
       grandparent that pod's superpod.
    6. Assemble the `Topology`, which checks for nodes under two leaves.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import NamedTuple

from rackplane.importers._assemble import PodDraft, RackDraft, assemble_topology
from rackplane.importers._common import read_text
from rackplane.importers._slurm_formats import (
    CUT_HINT,
    BlockLayout,
    SwitchSpec,
    read_topology_conf,
    read_topology_tree,
    read_topology_yaml,
)
from rackplane.importers.errors import TopologyFileError
from rackplane.models.topology import Topology

DOMAIN_NODES = 18
"""Nodes of one NVLink domain by default: an NVL72 rack of 18 nodes with 4 GPUs each."""

_CONF_LINE = re.compile(r"^[A-Za-z]+\s*=")
_SWITCH_LINE = re.compile(r"^\s*switchname\s*=", re.IGNORECASE)
_SUPERPOD_LEVEL = 2
"""Levels above the leaves that rackplane keeps: 1 is a pod, 2 a superpod; higher are left out."""


class SlurmTree(NamedTuple):
    """A Slurm topology/tree read as racks, and what the operator should know about the reading."""

    topology: Topology
    notes: tuple[str, ...] = ()
    """One line each, `file:line: ...`: partial racks, leaves read as pods of their own,
    switches above the superpods left out."""


def parse_slurm_topology(
    text: str,
    source: str,
    *,
    cluster: str,
    gpus_per_node: int = 4,
    name: str | None = None,
    domain_nodes: int = DOMAIN_NODES,
) -> Topology:
    """Read a Slurm block topology (`topology.yaml`, `topology.conf`) or tree topology.

    A tree (`topology.conf` with `SwitchName=` lines, or `scontrol show topology` output) is
    read by `parse_slurm_tree`, whose notes are dropped here; call it to have them.

    Args:
        text: the file's content.
        source: the file's name, used in errors.
        cluster: the cluster id to give the topology (Slurm's files do not name it).
        gpus_per_node: GPUs on every node (Slurm's topology files do not say).
        name: for `topology.yaml`, the topology to use; default: the first with
            `cluster_default: true`, else the only block topology. For a block
            `topology.conf`, the prefix of the pod ids (default `block`). Unused for a tree.
        domain_nodes: the nodes of one NVLink domain: a block's most when the file sets no
            `BlockSizes`, and the largest base block size it may set; for a tree, see
            `parse_slurm_tree`.

    Returns:
        One rack per base block, grouped into pods (and superpods) by `block_sizes`; or, for
        a tree, one rack per leaf switch, grouped by parent (and grandparent) switch.

    Raises:
        ValueError: `domain_nodes` is below 1.
        TopologyFileError: bad syntax, a tree or flat topology in `topology.yaml`, an unknown
            parameter, a bad hostlist, a node in two blocks, sizes that do not nest, a base
            block size above `domain_nodes`, a block with more nodes than the base block size
            (or, without sizes, `domain_nodes`); for a tree, see `parse_slurm_tree`; with the
            line.
    """
    if _is_tree(text):
        return parse_slurm_tree(
            text, source, cluster=cluster, gpus_per_node=gpus_per_node, domain_nodes=domain_nodes
        ).topology
    if domain_nodes < 1:
        raise ValueError(f"domain_nodes must be at least 1 (got {domain_nodes})")
    layout = _read(text, source, name)
    pod_of, pods = _group(layout, source)
    _check_block_sizes(layout, domain_nodes, source)
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


def parse_slurm_tree(
    text: str,
    source: str,
    *,
    cluster: str,
    gpus_per_node: int = 4,
    domain_nodes: int = DOMAIN_NODES,
) -> SlurmTree:
    """Read a Slurm topology/tree: `topology.conf` switch lines or `scontrol show topology`.

    Args:
        text: the file's content.
        source: the file's name, used in errors and notes.
        cluster: the cluster id to give the topology.
        gpus_per_node: GPUs on every node.
        domain_nodes: nodes of one NVLink domain; a leaf switch with more is an error, one
            with fewer a partial rack (noted).

    Returns:
        The topology (one rack per leaf switch, in file order; pods named after the leaves'
        parents, superpods after their grandparents) and the notes, in line order.

    Raises:
        ValueError: `domain_nodes` is below 1.
        TopologyFileError: bad syntax, an unknown parameter, a bad hostlist, a leaf with more
            than `domain_nodes` nodes, a node under two leaves, an unknown or repeated switch
            name, a switch under two parents, a cycle, children on different levels, an
            scontrol `Nodes=` that is not the nodes below; with the line.
    """
    if domain_nodes < 1:
        raise ValueError(f"domain_nodes must be at least 1 (got {domain_nodes})")
    switches = read_topology_tree(text, source)
    if not switches:
        raise TopologyFileError(source, "expected topology/tree lines (SwitchName=...)")
    by_name = {s.name: s for s in switches}
    parent = _parents(switches, by_name, source)
    _check_acyclic(switches, parent, source)
    level = _levels(switches, by_name, source)
    _check_listed_nodes(switches, by_name, source)
    notes: list[tuple[int, str]] = []
    racks: list[RackDraft] = []
    pods: dict[str, PodDraft] = {}
    for leaf in (s for s in switches if s.is_leaf):
        notes.extend(_check_size(leaf, domain_nodes, source))
        above = parent.get(leaf.name)
        if above is None:
            pod = PodDraft(f"{leaf.name}-pod", None, leaf.where)
            if pod.id in by_name:
                raise leaf.where.error(
                    source,
                    f"expected a parent switch, or no switch named {pod.id!r} (line "
                    f"{by_name[pod.id].line}): a leaf without a parent is read as a pod of "
                    "its own of that name",
                )
            notes.append(
                (
                    leaf.line,
                    f"leaf {leaf.name!r} has no parent switch: read as a pod of its "
                    f"own, {pod.id!r}",
                )
            )
        else:
            top = parent.get(above.name)
            pod = PodDraft(above.name, top.name if top else None, above.where)
        pods.setdefault(pod.id, pod)
        racks.append(
            RackDraft(
                id=leaf.name,
                nodes=leaf.nodes,
                pod=pod.id,
                gpus_per_node=gpus_per_node,
                where=leaf.where,
                nodes_where=leaf.nodes_where,
                pod_where=leaf.where if above is None else above.switches_where,
            )
        )
    notes.extend(
        (
            s.line,
            f"switch {s.name!r} is above the superpods: left out (rackplane's fabric has "
            "racks, pods and superpods)",
        )
        for s in switches
        if level[s.name] > _SUPERPOD_LEVEL
    )
    listed = list(pods.values()) if any(p.superpod for p in pods.values()) else []
    topology = assemble_topology(source, cluster, racks, listed)
    notes.sort(key=lambda note: note[0])
    return SlurmTree(topology, tuple(f"{source}:{line}: {note}" for line, note in notes))


def load_slurm_topology(
    path: str | os.PathLike[str],
    *,
    cluster: str,
    gpus_per_node: int = 4,
    name: str | None = None,
    domain_nodes: int = DOMAIN_NODES,
) -> Topology:
    """Read and parse a Slurm `topology.yaml`, `topology.conf` or `scontrol show topology`.

    Args:
        path: the file.
        cluster: the cluster id.
        gpus_per_node: GPUs on every node.
        name: see `parse_slurm_topology`.
        domain_nodes: see `parse_slurm_tree`.

    Raises:
        OSError: the file cannot be read.
        TopologyFileError: see `parse_slurm_topology`.
    """
    return load_slurm_topology_with_notes(
        path, cluster=cluster, gpus_per_node=gpus_per_node, name=name, domain_nodes=domain_nodes
    ).topology


def load_slurm_topology_with_notes(
    path: str | os.PathLike[str],
    *,
    cluster: str,
    gpus_per_node: int = 4,
    name: str | None = None,
    domain_nodes: int = DOMAIN_NODES,
) -> SlurmTree:
    """Like `load_slurm_topology`, keeping a tree's notes (a block topology has none).

    Raises:
        OSError: the file cannot be read.
        TopologyFileError: see `parse_slurm_topology`.
    """
    text, source = read_text(path)
    if _is_tree(text):
        return parse_slurm_tree(
            text, source, cluster=cluster, gpus_per_node=gpus_per_node, domain_nodes=domain_nodes
        )
    topology = parse_slurm_topology(
        text,
        source,
        cluster=cluster,
        gpus_per_node=gpus_per_node,
        name=name,
        domain_nodes=domain_nodes,
    )
    return SlurmTree(topology)


def _is_tree(text: str) -> bool:
    return any(_SWITCH_LINE.match(raw.split("#", 1)[0]) for raw in text.splitlines())


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
        "expected a Slurm topology: BlockName= or SwitchName= lines (topology.conf, "
        "scontrol show topology) or a list of topologies (topology.yaml); the file has none",
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


def _check_block_sizes(layout: BlockLayout, domain_nodes: int, source: str) -> None:
    """A base block is one NVLink domain: no larger than `domain_nodes`, no block above it.

    A hostlist typo (`gb[01-81]` for `gb[01-18]`) would otherwise become one rack of 81
    nodes: an NVLink domain that does not exist, which placement would fill.
    """
    sizes = layout.sizes
    if sizes and sizes[0] > domain_nodes:
        raise layout.sizes_where.error(
            source,
            f"expected a base block size of at most {domain_nodes} nodes, one NVLink domain "
            "(domain_nodes)",
            ", ".join(str(s) for s in sizes),
        )
    most = sizes[0] if sizes else domain_nodes
    why = (
        f"the base block size at {layout.sizes_where.describe()}"
        if sizes
        else "one NVLink domain (domain_nodes)"
    )
    for block in layout.blocks:
        if len(block.nodes) > most:
            raise block.nodes_where.error(
                source,
                f"expected a block of at most {most} nodes, {why}; block {block.name!r} has "
                f"{len(block.nodes)} (a typo in its hostlist?)",
            )


def _numbered(prefix: str, count: int) -> list[str]:
    width = max(2, len(str(count)))
    return [f"{prefix}{n:0{width}d}" for n in range(1, count + 1)]


# --- topology/tree ---------------------------------------------------------------------------


def _parents(
    switches: tuple[SwitchSpec, ...], by_name: dict[str, SwitchSpec], source: str
) -> dict[str, SwitchSpec]:
    """Each child switch's parent; every child must be a switch of the file, under one parent."""
    parent: dict[str, SwitchSpec] = {}
    for switch in switches:
        here: set[str] = set()
        for child in switch.switches:
            if child not in by_name:
                raise switch.switches_where.error(
                    source,
                    f"expected the names of switches in this file; {child!r} has no "
                    "SwitchName line",
                )
            if child in here:
                raise switch.switches_where.error(
                    source, f"expected each switch once; {child!r} is listed twice"
                )
            here.add(child)
            earlier = parent.setdefault(child, switch)
            if earlier is not switch:
                raise switch.switches_where.error(
                    source,
                    f"expected each switch under one parent; {child!r} is also under "
                    f"{earlier.name!r} at line {earlier.line}",
                )
    return parent


def _check_acyclic(
    switches: tuple[SwitchSpec, ...], parent: dict[str, SwitchSpec], source: str
) -> None:
    """Walk up from every switch; coming back to one on the way up is a cycle."""
    rooted: set[str] = set()
    for switch in switches:
        path: list[SwitchSpec] = []
        current: SwitchSpec | None = switch
        while current is not None and current.name not in rooted:
            if current in path:
                cycle = path[path.index(current) :][::-1]  # top-down: each lists the next
                first = min(range(len(cycle)), key=lambda i: cycle[i].line)
                cycle = cycle[first:] + cycle[:first]
                chain = " -> ".join(s.name for s in [*cycle, cycle[0]])
                raise cycle[0].switches_where.error(
                    source, f"expected a tree; the switches form a cycle: {chain}"
                )
            path.append(current)
            current = parent.get(current.name)
        rooted.update(s.name for s in path)


def _levels(
    switches: tuple[SwitchSpec, ...], by_name: dict[str, SwitchSpec], source: str
) -> dict[str, int]:
    """Levels above the leaves (a leaf: 0); the children of a switch must share one level."""
    level = {s.name: 0 for s in switches if s.is_leaf}
    for switch in switches:
        stack = [switch]  # depth first, without recursion: the tree has no cycle by now
        while stack:
            top = stack[-1]
            if top.name in level:
                stack.pop()
                continue
            pending = [by_name[c] for c in top.switches if c not in level]
            if pending:
                stack.extend(pending)
                continue
            first, *rest = top.switches
            for other in rest:
                if level[other] != level[first]:
                    raise top.switches_where.error(
                        source,
                        f"expected the switches under {top.name!r} on one level (rackplane "
                        f"reads the levels as racks, pods, superpods); {first!r} is "
                        f"{_level_name(level[first])}, {other!r} {_level_name(level[other])}",
                    )
            level[top.name] = level[first] + 1
            stack.pop()
    return level


def _level_name(level: int) -> str:
    return "a leaf" if level == 0 else f"{level} level{'s' * (level > 1)} above the leaves"


def _check_listed_nodes(
    switches: tuple[SwitchSpec, ...], by_name: dict[str, SwitchSpec], source: str
) -> None:
    """scontrol lists every node below an upper switch: they must be its leaves' nodes."""
    for switch in switches:
        if switch.is_leaf or not switch.nodes:
            continue
        below: dict[str, str] = {}  # node -> its leaf
        stack = [switch]
        while stack:
            current = stack.pop()
            if current.is_leaf:
                below.update(dict.fromkeys(current.nodes, current.name))
            stack.extend(by_name[c] for c in reversed(current.switches))
        listed = set(switch.nodes)
        extra = next((n for n in switch.nodes if n not in below), None)
        if extra is not None:
            raise switch.nodes_where.error(
                source,
                f"expected the nodes of the leaves below {switch.name!r}; {extra!r} is under "
                f"none of them; {CUT_HINT}",
            )
        missing = next((n for n in below if n not in listed), None)
        if missing is not None:
            raise switch.nodes_where.error(
                source,
                f"expected the nodes of the leaves below {switch.name!r}; {missing!r} (under "
                f"{below[missing]!r}) is missing",
            )


def _check_size(leaf: SwitchSpec, domain_nodes: int, source: str) -> list[tuple[int, str]]:
    """A leaf is one NVLink domain or part of one: more nodes is an error, fewer a note."""
    count = len(leaf.nodes)
    if count > domain_nodes:
        raise leaf.nodes_where.error(
            source,
            f"expected a leaf switch to serve one NVLink domain of at most {domain_nodes} "
            f"nodes (domain_nodes); leaf {leaf.name!r} has {count}: a leaf spanning "
            "several racks cannot be read as one rack",
        )
    if count < domain_nodes:
        return [
            (
                leaf.line,
                f"leaf {leaf.name!r} has {_nodes(count)}, an NVLink domain has {domain_nodes}: "
                "read as a partial rack",
            )
        ]
    return []


def _nodes(count: int) -> str:
    return f"{count} node{'s' * (count != 1)}"
