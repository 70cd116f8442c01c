"""Whether a workload adapter should register the topology its runtime shows (`rackplane kube`,
`rackplane slurm`): the one rule both follow, pure."""

from __future__ import annotations

import hashlib

from rackplane.models import Topology
from rackplane.projections.state import ClusterState


def registration_due(state: ClusterState, topology: Topology | None) -> str | None:
    """A digest of `topology` (for the command's id) when it should be registered: it is the
    cluster's and rackplane has none or a different one, unless that would pull an allocated
    node out of its rack (the adapter's failure reports free it first). None otherwise."""
    if topology is None or topology.cluster != state.cluster:
        return None
    if state.index is not None:
        if state.index.topology == topology:
            return None
        rack_of = {n: r.id for r in topology.racks for n in r.nodes}
        if any(n.job is not None and rack_of.get(n.id) != n.rack for n in state.nodes.values()):
            return None  # wait: an allocated node would leave its rack
    return hashlib.sha256(topology.model_dump_json().encode()).hexdigest()[:16]
