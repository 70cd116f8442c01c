"""Slurm block topologies (topology.yaml and topology.conf) as rackplane topologies.

Trees (topology/tree) are in test_slurm_tree.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rackplane.importers import TopologyFileError, load_slurm_topology, parse_slurm_topology
from rackplane.models import Pod, TopologyIndex

FIXTURES = Path(__file__).parents[1] / "fixtures" / "slurm"
NEEDS_BLOCK = "rackplane needs the topology/block plugin: NVLink domains are blocks"


# topology.yaml, block_sizes [4, 8, 16]:
#
#                nvlink-superpod01
#                /               \
#         nvlink-pod01        nvlink-pod02
#          /       \            /       \
#        b01       b02        b03       b04
#    gb[001-004] [005-008]  [009-012]  [013-016]
def test_a_block_topology_yaml_becomes_racks_in_pods_under_a_superpod() -> None:
    topology = load_slurm_topology(FIXTURES / "topology.yaml", cluster="testbed")
    assert topology.cluster == "testbed"
    assert [r.id for r in topology.racks] == ["b01", "b02", "b03", "b04"]
    assert topology.racks[0].nodes == ("gb001", "gb002", "gb003", "gb004")
    assert topology.racks[3].nodes == ("gb013", "gb014", "gb015", "gb016")
    assert [r.pod for r in topology.racks] == ["nvlink-pod01"] * 2 + ["nvlink-pod02"] * 2
    assert topology.pods == (
        Pod(id="nvlink-pod01", superpod="nvlink-superpod01"),
        Pod(id="nvlink-pod02", superpod="nvlink-superpod01"),
    )
    assert topology.gpu_count == 64
    index = TopologyIndex(topology)
    assert (index.hops("b01", "b02"), index.hops("b01", "b03")) == (2, 4)


# topology.conf, BlockSizes=4,8: the same blocks, two pods, no superpods.
def test_a_classic_topology_conf_gives_the_same_blocks_grouped_by_block_sizes() -> None:
    topology = load_slurm_topology(FIXTURES / "topology.conf", cluster="testbed", gpus_per_node=8)
    from_yaml = load_slurm_topology(FIXTURES / "topology.yaml", cluster="testbed")
    assert [r.nodes for r in topology.racks] == [r.nodes for r in from_yaml.racks]
    assert [r.pod for r in topology.racks] == ["block-pod01"] * 2 + ["block-pod02"] * 2
    assert topology.pods == ()
    assert {r.gpus_per_node for r in topology.racks} == {8}


@pytest.mark.parametrize(
    ("text", "want_pods", "want_superpods"),
    [
        pytest.param(
            "BlockName=b1 Nodes=a[1-2]\nBlockName=b2 Nodes=a[3-4]\nBlockName=b3 Nodes=a[5-6]\n",
            ["block-pod01"] * 3,
            [],
            id="no block sizes: every rack in one pod",
        ),
        pytest.param(
            "BlockSizes=2\nBlockName=b1 Nodes=a[1-2]\nBlockName=b2 Nodes=a[3-4]\n",
            ["block-pod01"] * 2,
            [],
            id="only a base size: every rack in one pod",
        ),
        pytest.param(
            "BlockSizes=2,4\n" + "".join(f"BlockName=b{i} Nodes=a{i}\n" for i in range(1, 6)),
            ["block-pod01"] * 2 + ["block-pod02"] * 2 + ["block-pod03"],
            [],
            id="a last pod may be partly filled",
        ),
        pytest.param(
            "BlockSizes=1,2,4\n" + "".join(f"BlockName=b{i} Nodes=a{i}\n" for i in range(1, 7)),
            ["block-pod01"] * 2 + ["block-pod02"] * 2 + ["block-pod03"] * 2,
            ["block-superpod01", "block-superpod01", "block-superpod02"],
            id="a third size groups pods into superpods",
        ),
    ],
)
def test_block_sizes_group_consecutive_blocks_into_pods_and_superpods(
    text: str, want_pods: list[str], want_superpods: list[str]
) -> None:
    topology = parse_slurm_topology(text, "topology.conf", cluster="c")
    assert [r.pod for r in topology.racks] == want_pods
    assert [p.superpod for p in topology.pods] == want_superpods


@pytest.mark.parametrize(
    ("name", "want_racks"),
    [
        pytest.param(None, ["b1"], id="the cluster default wins without a name"),
        pytest.param("second", ["b2"], id="a name picks its topology"),
    ],
)
def test_the_topology_is_chosen_by_name_else_by_cluster_default(
    name: str | None, want_racks: list[str]
) -> None:
    text = """\
- topology: first
  cluster_default: true
  block: {blocks: [{block: b1, nodes: "a[1-2]"}]}
- topology: second
  block: {blocks: [{block: b2, nodes: "a[3-4]"}]}
"""
    topology = parse_slurm_topology(text, "topology.yaml", cluster="c", name=name)
    assert [r.id for r in topology.racks] == want_racks


def test_the_only_block_topology_is_used_when_none_is_the_cluster_default() -> None:
    text = """\
- topology: fabric
  tree: {switches: [{switch: s1, nodes: "a[1-4]"}]}
- topology: nvl
  block: {block_sizes: [2], blocks: [{block: b1, nodes: "a[1-2]"}, {block: b2, nodes: a3}]}
"""
    topology = parse_slurm_topology(text, "topology.yaml", cluster="c")
    assert [r.id for r in topology.racks] == ["b1", "b2"]
    assert {r.pod for r in topology.racks} == {"nvl-pod01"}


def test_a_tree_topology_in_topology_yaml_is_refused_with_a_pointer_to_topology_block() -> None:
    with pytest.raises(TopologyFileError, match=NEEDS_BLOCK) as caught:
        load_slurm_topology(FIXTURES / "tree.yaml", cluster="c")
    assert (caught.value.line, caught.value.field) == (4, "[0].tree")


# tree.conf: two 8-node leaves under a spine; NVLink domains of 18 nodes, so partial racks.
def test_switchname_lines_in_topology_conf_are_read_as_a_tree_of_partial_racks() -> None:
    topology = load_slurm_topology(FIXTURES / "tree.conf", cluster="c")
    assert [(r.id, r.pod, len(r.nodes)) for r in topology.racks] == [
        ("leaf1", "spine", 8),
        ("leaf2", "spine", 8),
    ]
    whole = load_slurm_topology(FIXTURES / "tree.conf", cluster="c", domain_nodes=8)
    assert whole == topology


def test_choosing_the_tree_topology_by_name_is_refused_too() -> None:
    with pytest.raises(TopologyFileError, match=NEEDS_BLOCK) as caught:
        load_slurm_topology(FIXTURES / "topology.yaml", cluster="c", name="fabric")
    assert caught.value.line == 17
    assert caught.value.got == "tree topology 'fabric'"


@pytest.mark.parametrize(
    ("name", "want"),
    [
        pytest.param(
            "bad_hostlist.conf",
            "bad_hostlist.conf:4: Nodes: expected a hostlist expression: "
            "range 008-005 runs backwards in hostlist 'gb[008-005]'",
            id="a backwards hostlist",
        ),
        pytest.param(
            "unknown_parameter.conf",
            "unknown_parameter.conf:3: Bandwidth: "
            "unknown parameter 'Bandwidth' (allowed: BlockName, Nodes, BlockSizes)",
            id="an unknown parameter",
        ),
        pytest.param(
            "duplicate_node.yaml",
            "duplicate_node.yaml:9: [0].block.blocks[1].nodes: expected each node in exactly "
            "one rack; 'gb004' is also in 'b01' at [0].block.blocks[0].nodes (line 7)",
            id="a node in two blocks",
        ),
        pytest.param(
            "bad_syntax.yaml",
            "bad_syntax.yaml:7: expected valid YAML",
            id="bad YAML syntax",
        ),
    ],
)
def test_a_broken_slurm_file_names_the_file_and_line(name: str, want: str) -> None:
    with pytest.raises(TopologyFileError) as caught:
        load_slurm_topology(FIXTURES / name, cluster="c")
    message = str(caught.value)
    assert message.startswith(str(FIXTURES / name))
    assert want in message, message


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param(
            "BlockSizes=4,6\nBlockName=b1 Nodes=a1\n",
            "t:1: BlockSizes: expected increasing block sizes, each a multiple of the one before "
            "(got 4, 6)",
            id="sizes that do not nest",
        ),
        pytest.param(
            "BlockSizes=4,x\nBlockName=b1 Nodes=a1\n",
            "t:1: BlockSizes: expected comma-separated positive block sizes such as 18,144 "
            "(got '4,x')",
            id="a size that is not a number",
        ),
        pytest.param(
            "BlockSizes=4\nBlockSizes=8\nBlockName=b1 Nodes=a1\n",
            "t:2: BlockSizes: expected one BlockSizes line (the first is on line 1)",
            id="two BlockSizes lines",
        ),
        pytest.param(
            "BlockName=b1\n",
            "t:1: BlockName: expected Nodes=<hostlist> on a BlockName line",
            id="a block without nodes",
        ),
        pytest.param(
            "Nodes=a1 BlockName=b1\n",
            "t:1: Nodes: expected a line to start with BlockName= or BlockSizes=",
            id="a line starting with Nodes",
        ),
        pytest.param(
            "BlockName=b1 Nodes=a1 stray\n",
            "t:1: expected Parameter=value (got 'stray')",
            id="a word without '='",
        ),
        pytest.param(
            "# nothing but comments\n\n",
            "t: expected a Slurm topology: BlockName= or SwitchName= lines",
            id="an empty file",
        ),
        pytest.param(
            "BlockSizes=4\n",
            "t: expected at least one 'BlockName=... Nodes=...' line",
            id="sizes but no blocks",
        ),
        pytest.param(
            "BlockName=b1 Nodes=a1\nBlockName=b1 Nodes=a2\n",
            "t:2: BlockName: expected a unique rack id; 'b1' is already used at BlockName (line 1)",
            id="a repeated block name",
        ),
        pytest.param(
            "- topology: t1\n  block: {blocks: [{block: b1, nodes: a1}]}\n  flat: true\n",
            "t:1: [0]: expected exactly one of 'block', 'tree' or 'flat' (found block, flat)",
            id="a topology of two kinds",
        ),
        pytest.param(
            "- topology: t1\n  block: {blocks: [{block: b1, nodez: a1}]}\n",
            "t:2: [0].block.blocks[0].nodez: unknown field 'nodez' (allowed: block, nodes)",
            id="a misspelt key in a block",
        ),
        pytest.param(
            "- topology: t1\n  block: {blocks: [{block: b1, nodes: a1}]}\n"
            "- topology: t2\n  block: {blocks: [{block: b2, nodes: a2}]}\n",
            "t: expected one topology with 'cluster_default: true', or a name to choose among "
            "the block topologies t1, t2",
            id="two block topologies and no way to choose",
        ),
        pytest.param(
            "topology: t1\nblock: {blocks: [{block: b1, nodes: a1}]}\n",
            "t:1: expected a list of topologies (Slurm topology.yaml)",
            id="a single topology not in a list",
        ),
    ],
)
def test_every_bad_slurm_topology_says_what_was_expected(text: str, want: str) -> None:
    with pytest.raises(TopologyFileError) as caught:
        parse_slurm_topology(text, "t", cluster="c")
    assert str(caught.value).startswith(want), str(caught.value)


def test_asking_for_a_topology_that_is_not_there_lists_those_that_are() -> None:
    with pytest.raises(TopologyFileError, match=r"named 'nope' \(found: nvlink, fabric, every"):
        load_slurm_topology(FIXTURES / "topology.yaml", cluster="c", name="nope")


# A typo in one hostlist: `n[01-81]` for `n[01-18]`.
#
#     b1: n[01-18]   one NVLink domain of 18 nodes
#     b2: m[01-81]   81 nodes: no NVLink domain is that large -> refused at its line
@pytest.mark.parametrize(
    ("text", "domain_nodes", "want"),
    [
        pytest.param(
            "BlockName=b1 Nodes=n[01-18]\nBlockName=b2 Nodes=m[01-81]\n",
            18,
            "t:2: Nodes: expected a block of at most 18 nodes, one NVLink domain "
            "(domain_nodes); block 'b2' has 81 (a typo in its hostlist?)",
            id="no block sizes: a block above the NVLink domain size",
        ),
        pytest.param(
            "BlockSizes=18,144\nBlockName=b1 Nodes=n[01-18]\nBlockName=b2 Nodes=m[01-81]\n",
            18,
            "t:3: Nodes: expected a block of at most 18 nodes, the base block size at "
            "BlockSizes (line 1); block 'b2' has 81 (a typo in its hostlist?)",
            id="a block above the base block size",
        ),
        pytest.param(
            "BlockSizes=4\nBlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=m[1-5]\n",
            18,
            "t:3: Nodes: expected a block of at most 4 nodes, the base block size at "
            "BlockSizes (line 1); block 'b2' has 5",
            id="a base block size below the domain size is the limit",
        ),
        pytest.param(
            "BlockSizes=36\nBlockName=b1 Nodes=n[01-36]\n",
            18,
            "t:1: BlockSizes: expected a base block size of at most 18 nodes, one NVLink "
            "domain (domain_nodes) (got 36)",
            id="a base block size above the NVLink domain size",
        ),
        pytest.param(
            "- topology: t1\n  block:\n    block_sizes: [8]\n    blocks:\n"
            "      - {block: b1, nodes: 'n[1-8]'}\n      - {block: b2, nodes: 'm[1-9]'}\n",
            18,
            "t:6: [0].block.blocks[1].nodes: expected a block of at most 8 nodes, the base "
            "block size at [0].block.block_sizes (line 3); block 'b2' has 9",
            id="topology.yaml: a block above its block_sizes",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[01-10]\n",
            8,
            "t:1: Nodes: expected a block of at most 8 nodes, one NVLink domain (domain_nodes); "
            "block 'b1' has 10",
            id="a smaller domain size given by the caller",
        ),
    ],
)
def test_a_block_larger_than_an_nvlink_domain_is_refused_at_its_line(
    text: str, domain_nodes: int, want: str
) -> None:
    with pytest.raises(TopologyFileError) as caught:
        parse_slurm_topology(text, "t", cluster="c", domain_nodes=domain_nodes)
    assert str(caught.value).startswith(want), str(caught.value)


@pytest.mark.parametrize(
    ("text", "domain_nodes", "want_nodes"),
    [
        pytest.param("BlockName=b1 Nodes=n[01-18]\n", 18, [18], id="a full NVL72 domain"),
        pytest.param(
            "BlockSizes=18\nBlockName=b1 Nodes=n[01-18]\nBlockName=b2 Nodes=m[01-17]\n",
            18,
            [18, 17],
            id="a block below the base size (a partial rack)",
        ),
        pytest.param(
            "BlockSizes=36\nBlockName=b1 Nodes=n[01-36]\n", 36, [36], id="a larger domain given"
        ),
    ],
)
def test_a_block_up_to_the_nvlink_domain_size_is_one_rack(
    text: str, domain_nodes: int, want_nodes: list[int]
) -> None:
    topology = parse_slurm_topology(text, "t", cluster="c", domain_nodes=domain_nodes)
    assert [len(r.nodes) for r in topology.racks] == want_nodes


def test_loading_a_block_file_checks_it_against_the_given_domain_size(tmp_path: Path) -> None:
    path = tmp_path / "topology.conf"
    path.write_text("BlockName=b1 Nodes=n[01-12]\n")
    assert len(load_slurm_topology(path, cluster="c", domain_nodes=12).racks[0].nodes) == 12
    with pytest.raises(TopologyFileError, match=r"topology.conf:1: Nodes: .* 'b1' has 12"):
        load_slurm_topology(path, cluster="c", domain_nodes=10)


def test_a_domain_size_below_one_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="domain_nodes must be at least 1"):
        parse_slurm_topology("BlockName=b1 Nodes=n1\n", "t", cluster="c", domain_nodes=0)
