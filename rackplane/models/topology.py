"""Physical shape of a cluster: NVLink domains (racks) and the InfiniBand fabric above them.

Theory of operation: a `Topology` is plain data (what a cluster file, Slurm's block topology or
Kubernetes node labels say). `TopologyIndex` is built from it once and shared read-only: lookups
by id, the fabric as a networkx graph, and hop distances between racks. Nothing here changes
while the cluster runs; per-cycle capacity lives in the cluster state.

The fabric is a tree: rack -> pod (racks under the same IB leaf switches, a Slurm block level)
-> optional superpod (spine group) -> core. Two racks in one pod are 2 hops apart, in two pods
of one superpod 4, otherwise (through the core) 4 or 6 depending on whether superpods exist.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rackplane.models._ids import ClusterId, NodeId, PodId, RackId

if TYPE_CHECKING:
    import networkx as nx

DEFAULT_POD = "pod-default"
CORE = "core"


class Rack(BaseModel):
    """One NVLink domain: nodes on one non-blocking NVLink fabric (an NVL72 rack: 18 x 4 GPUs)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: RackId
    pod: PodId = DEFAULT_POD
    nodes: tuple[NodeId, ...] = Field(min_length=1)
    gpus_per_node: int = Field(default=4, ge=1, le=64)

    @property
    def gpus(self) -> int:
        """GPUs in this NVLink domain."""
        return len(self.nodes) * self.gpus_per_node


class Pod(BaseModel):
    """Racks under the same InfiniBand leaf switches; optionally grouped into a superpod."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: PodId
    superpod: PodId | None = None


class Topology(BaseModel):
    """A cluster's racks and fabric. Every node belongs to exactly one rack."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    cluster: ClusterId
    racks: tuple[Rack, ...] = Field(min_length=1)
    pods: tuple[Pod, ...] = ()

    @model_validator(mode="after")
    def _check_identities(self) -> Topology:
        rack_ids = Counter(r.id for r in self.racks)
        twice = sorted(r for r, n in rack_ids.items() if n > 1)
        if twice:
            raise ValueError(f"rack ids must be unique; repeated: {', '.join(twice[:5])}")
        node_ids = Counter(n for r in self.racks for n in r.nodes)
        twice = sorted(n for n, c in node_ids.items() if c > 1)
        if twice:
            raise ValueError(
                f"a node belongs to exactly one rack; in several: {', '.join(twice[:5])}"
            )
        if self.pods:
            pod_ids = Counter(p.id for p in self.pods)
            twice = sorted(p for p, n in pod_ids.items() if n > 1)
            if twice:
                raise ValueError(f"pod ids must be unique; repeated: {', '.join(twice[:5])}")
            unknown = sorted({r.pod for r in self.racks} - set(pod_ids))
            if unknown:
                raise ValueError(
                    f"racks name pods that are not listed under 'pods': {', '.join(unknown[:5])}"
                )
        return self

    @property
    def node_count(self) -> int:
        """Compute nodes in the cluster."""
        return sum(len(r.nodes) for r in self.racks)

    @property
    def gpu_count(self) -> int:
        """GPUs in the cluster."""
        return sum(r.gpus for r in self.racks)

    def pod_list(self) -> tuple[Pod, ...]:
        """Pods: those listed, else those the racks name (in order of first appearance)."""
        if self.pods:
            return self.pods
        seen = dict.fromkeys(r.pod for r in self.racks)
        return tuple(Pod(id=p) for p in seen)


class TopologyIndex:
    """Read-only lookups over one `Topology`, built once and shared.

    Args:
        topology: the cluster's static shape.
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._racks: dict[RackId, Rack] = {r.id: r for r in topology.racks}
        self._node_rack: dict[NodeId, RackId] = {n: r.id for r in topology.racks for n in r.nodes}
        self._pod_of: dict[RackId, PodId] = {r.id: r.pod for r in topology.racks}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopologyIndex) and other.topology == self.topology

    def __hash__(self) -> int:
        return hash(self.topology.cluster)

    def __repr__(self) -> str:
        t = self.topology
        return f"TopologyIndex({t.cluster!r}, racks={len(t.racks)}, nodes={t.node_count})"

    @property
    def racks(self) -> tuple[Rack, ...]:
        """Racks in file order."""
        return self.topology.racks

    def rack(self, rack: RackId) -> Rack:
        """The rack with this id. Raises KeyError for an unknown id."""
        return self._racks[rack]

    def has_rack(self, rack: RackId) -> bool:
        """True when the cluster has this rack."""
        return rack in self._racks

    def has_node(self, node: NodeId) -> bool:
        """True when the cluster has this node."""
        return node in self._node_rack

    def rack_of(self, node: NodeId) -> RackId:
        """The rack (NVLink domain) holding this node. Raises KeyError for an unknown node."""
        return self._node_rack[node]

    def pod_of(self, rack: RackId) -> PodId:
        """The IB pod of a rack."""
        return self._pod_of[rack]

    def gpus_per_node(self, node: NodeId) -> int:
        """GPUs on one node."""
        return self._racks[self._node_rack[node]].gpus_per_node

    def nodes(self) -> Iterator[NodeId]:
        """Every node, rack by rack."""
        for r in self.topology.racks:
            yield from r.nodes

    @cached_property
    def fabric(self) -> nx.Graph:
        """The InfiniBand fabric as a tree: racks, pods, superpods, core."""
        import networkx as nx  # on first use: 90 ms of every CLI start otherwise

        g = nx.Graph()
        g.add_node(CORE, kind="core")
        for pod in self.topology.pod_list():
            g.add_node(pod.id, kind="pod")
            if pod.superpod is None:
                g.add_edge(pod.id, CORE)
            else:
                g.add_node(pod.superpod, kind="superpod")
                g.add_edge(pod.id, pod.superpod)
                g.add_edge(pod.superpod, CORE)
        for rack in self.topology.racks:
            g.add_node(rack.id, kind="rack")
            g.add_edge(rack.id, rack.pod)
        return g

    @cached_property
    def _pod_hops(self) -> dict[PodId, dict[PodId, int]]:
        # Racks hang off their pod, so rack distances reduce to pod distances: one BFS per pod
        # over the small switch-level graph, not one per rack over the whole fabric.
        switches = self.fabric.subgraph(
            n for n, kind in self.fabric.nodes(data="kind") if kind != "rack"
        )
        pods = [p.id for p in self.topology.pod_list()]
        import networkx as nx

        return {p: dict(nx.single_source_shortest_path_length(switches, p)) for p in pods}

    def hops(self, a: RackId, b: RackId) -> int:
        """Switch hops between two racks over InfiniBand (0 for the same rack)."""
        if a == b:
            return 0
        return 2 + self._pod_hops[self._pod_of[a]][self._pod_of[b]]

    @cached_property
    def rack_order(self) -> dict[RackId, int]:
        """Position of each rack in the topology: the deterministic tie-breaker."""
        return {r.id: i for i, r in enumerate(self.topology.racks)}

    @cached_property
    def node_order(self) -> dict[NodeId, int]:
        """Position of each node in the topology (rack by rack)."""
        return {n: i for i, n in enumerate(self.nodes())}

    @cached_property
    def pod_racks(self) -> dict[PodId, tuple[RackId, ...]]:
        """Racks of each pod, in topology order; pods in the order `pod_list` gives."""
        out: dict[PodId, list[RackId]] = {p.id: [] for p in self.topology.pod_list()}
        for r in self.topology.racks:
            out[r.pod].append(r.id)
        return {p: tuple(rs) for p, rs in out.items()}

    @cached_property
    def superpod_of(self) -> dict[PodId, PodId | None]:
        """The superpod of each pod (None when the pod hangs off the core)."""
        return {p.id: p.superpod for p in self.topology.pod_list()}

    def gpus_per_domain(self) -> Counter[int]:
        """How many racks have each NVLink-domain size (in GPUs)."""
        return Counter(r.gpus for r in self.topology.racks)
