"""Topology sources: rackplane cluster files, Slurm block and tree topologies, Kubernetes labels.

Every source produces the same `rackplane.models.Topology`. Parsing is pure (text in, model
out); the `load_*` helpers only read the file first. A bad file raises `TopologyFileError`,
which names the file, the line or field, and what was expected.
"""

from rackplane.importers.cluster_file import (
    ClusterFile,
    dump_cluster_file,
    load_cluster_file,
    parse_cluster_file,
)
from rackplane.importers.errors import TopologyFileError
from rackplane.importers.hostlist import compress_hostlist, expand_hostlist
from rackplane.importers.k8s import (
    CLIQUE_LABEL,
    GPU_RESOURCE,
    POD_LABEL,
    SUPERPOD_LABEL,
    K8sImport,
    load_k8s_nodes,
    parse_k8s_nodes,
)
from rackplane.importers.slurm import (
    SlurmTree,
    load_slurm_topology,
    load_slurm_topology_with_notes,
    parse_slurm_topology,
    parse_slurm_tree,
)

__all__ = [
    "CLIQUE_LABEL",
    "GPU_RESOURCE",
    "POD_LABEL",
    "SUPERPOD_LABEL",
    "ClusterFile",
    "K8sImport",
    "SlurmTree",
    "TopologyFileError",
    "compress_hostlist",
    "dump_cluster_file",
    "expand_hostlist",
    "load_cluster_file",
    "load_k8s_nodes",
    "load_slurm_topology",
    "load_slurm_topology_with_notes",
    "parse_cluster_file",
    "parse_k8s_nodes",
    "parse_slurm_topology",
    "parse_slurm_tree",
]
