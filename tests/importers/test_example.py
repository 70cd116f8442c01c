"""The shipped example, examples/gb200-128.yaml, loads to the cluster it describes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackplane.importers import dump_cluster_file, load_cluster_file, parse_cluster_file
from rackplane.models import PolicySettings, TopologyIndex

EXAMPLE = Path(__file__).parents[2] / "examples" / "gb200-128.yaml"


def test_the_gb200_example_has_128_racks_2304_nodes_9216_gpus_in_16_pods() -> None:
    topology = load_cluster_file(EXAMPLE).topology
    assert len(topology.racks) == 128
    assert topology.node_count == 2_304
    assert topology.gpu_count == 9_216
    assert len(topology.pod_list()) == 16
    assert topology.racks[0].nodes[0] == "gb-r001-n01"
    assert topology.racks[-1].nodes[-1] == "gb-r128-n18"
    assert {r.id: r.pod for r in topology.racks}["r128"] == "pod16"


# Eight racks to a pod, pods joined through the core:
#
#                 core
#        /     /   ...   \
#     pod01  pod02  ...  pod16
#    r001..r008  r009..r016 ...
@pytest.mark.parametrize(
    ("a", "b", "want_hops"),
    [
        pytest.param("r001", "r001", 0, id="a rack to itself"),
        pytest.param("r001", "r008", 2, id="two racks of one pod meet at its leaves"),
        pytest.param("r001", "r009", 4, id="racks of neighbouring pods go through the core"),
        pytest.param("r001", "r128", 4, id="the farthest racks are no farther"),
    ],
)
def test_hops_in_the_gb200_example_are_two_within_a_pod_and_four_across(
    a: str, b: str, want_hops: int
) -> None:
    index = TopologyIndex(load_cluster_file(EXAMPLE).topology)
    assert index.hops(a, b) == want_hops


def test_the_gb200_example_writes_out_the_default_policy() -> None:
    loaded = load_cluster_file(EXAMPLE)
    assert loaded.policy == PolicySettings()
    assert (loaded.policy.slice_size, loaded.policy.spares_per_rack) == (16, 2)
    assert "slice_size: 16" in EXAMPLE.read_text()


def test_dumping_the_gb200_example_keeps_one_line_per_rack_and_reads_back() -> None:
    loaded = load_cluster_file(EXAMPLE)
    text = dump_cluster_file(loaded.topology, loaded.policy)
    assert sum(line.startswith("  - {id: r") for line in text.splitlines()) == 128
    back = parse_cluster_file(text, "dump.yaml")
    assert (back.topology, back.policy) == (loaded.topology, loaded.policy)
