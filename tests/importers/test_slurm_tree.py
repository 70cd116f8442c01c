"""Slurm topology/tree (topology.conf switch lines, `scontrol show topology`) as rackplane racks."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.importers import (
    SlurmTree,
    TopologyFileError,
    compress_hostlist,
    load_cluster_file,
    load_slurm_topology,
    load_slurm_topology_with_notes,
    parse_slurm_topology,
    parse_slurm_tree,
)
from rackplane.models import Pod, TopologyIndex

FIXTURES = Path(__file__).parents[1] / "fixtures" / "slurm"
CUT_HINT = (
    "scontrol cuts each line at SLURM_TOPO_LEN characters (default 512): run it as "
    "`SLURM_TOPO_LEN=65536 scontrol show topology`"
)

# Three NVL72 racks, each behind its own leaf switch, under one spine:
#
#                      spine
#           /            |            \
#       rack01         rack02         rack03
#    r01n[01-18]     r02n[01-18]    r03n[01-18]
THREE_RACKS_CONF = """\
# topology.conf, topology/tree
SwitchName=rack01 Nodes=r01n[01-18]
SwitchName=rack02 Nodes=r02n[01-18]  LinkSpeed=200
switchname=rack03 nodes=r03n[01-18]
SwitchName=spine Switches=rack[01-03]   # upper levels list switches
"""
# `scontrol show topology` of that topology.conf, as Slurm 22.05.8 (Debian) prints it.
THREE_RACKS_SCONTROL = """\
SwitchName=rack01 Level=0 LinkSpeed=1 Nodes=r01n[01-18]
SwitchName=rack02 Level=0 LinkSpeed=1 Nodes=r02n[01-18]
SwitchName=rack03 Level=0 LinkSpeed=1 Nodes=r03n[01-18]
SwitchName=spine Level=1 LinkSpeed=1 Nodes=r01n[01-18],r02n[01-18],r03n[01-18] Switches=rack[01-03]
"""


def tree(text: str, domain_nodes: int = 18) -> SlurmTree:
    return parse_slurm_tree(text, "t", cluster="c", domain_nodes=domain_nodes)


def switch_lines(*lines: str) -> str:
    return "".join(f"{line}\n" for line in lines)


def test_topology_conf_and_scontrol_output_of_one_tree_give_the_same_topology() -> None:
    from_conf = tree(THREE_RACKS_CONF)
    from_scontrol = tree(THREE_RACKS_SCONTROL)
    assert from_conf.topology == from_scontrol.topology
    assert (from_conf.notes, from_scontrol.notes) == ((), ())
    topology = from_conf.topology
    assert [(r.id, r.pod) for r in topology.racks] == [
        ("rack01", "spine"),
        ("rack02", "spine"),
        ("rack03", "spine"),
    ]
    assert topology.racks[2].nodes == tuple(f"r03n{i:02d}" for i in range(1, 19))
    assert (topology.node_count, topology.gpu_count) == (54, 216)
    assert topology.pods == ()  # no superpods: the pods are implied by the racks


def test_parse_slurm_topology_reads_a_tree_and_drops_the_notes() -> None:
    text = THREE_RACKS_SCONTROL.replace("r03n[01-18]", "r03n[01-16]")
    assert tree(text).notes  # rack03 is partial
    assert parse_slurm_topology(text, "t", cluster="c") == tree(text).topology


# A tree of three levels above the racks, and what each level becomes:
#
#                     core                      <- above the superpods: left out, noted
#                      |
#                    spine                      <- superpod
#               /            \
#            ib-a            ib-b               <- pods
#           /    \             |
#       nvl01   nvl02        nvl03              <- racks (leaf switches)
FOUR_LEVELS = switch_lines(
    "SwitchName=core Switches=spine",
    "SwitchName=spine Switches=ib-a,ib-b",
    "SwitchName=ib-a Switches=nvl[01-02]",
    "SwitchName=ib-b Switches=nvl03",
    "SwitchName=nvl01 Nodes=gb[001-018]",
    "SwitchName=nvl02 Nodes=gb[019-036]",
    "SwitchName=nvl03 Nodes=gb[037-054]",
)


@pytest.mark.parametrize(
    ("text", "want_pods", "want_superpods", "want_notes"),
    [
        pytest.param(
            THREE_RACKS_CONF,
            ["spine"] * 3,
            {"spine": None},
            (),
            id="parents become pods",
        ),
        pytest.param(
            FOUR_LEVELS.removeprefix("SwitchName=core Switches=spine\n"),
            ["ib-a", "ib-a", "ib-b"],
            {"ib-a": "spine", "ib-b": "spine"},
            (),
            id="grandparents become superpods",
        ),
        pytest.param(
            FOUR_LEVELS,
            ["ib-a", "ib-a", "ib-b"],
            {"ib-a": "spine", "ib-b": "spine"},
            (
                "t:1: switch 'core' is above the superpods: left out (rackplane's fabric has "
                "racks, pods and superpods)",
            ),
            id="a level above the superpods is left out",
        ),
        pytest.param(
            switch_lines("SwitchName=nvl01 Nodes=gb[01-18]", "SwitchName=nvl02 Nodes=gb[19-36]"),
            ["nvl01-pod", "nvl02-pod"],
            {"nvl01-pod": None, "nvl02-pod": None},
            (
                "t:1: leaf 'nvl01' has no parent switch: read as a pod of its own, 'nvl01-pod'",
                "t:2: leaf 'nvl02' has no parent switch: read as a pod of its own, 'nvl02-pod'",
            ),
            id="a leaf without a parent is a pod of its own",
        ),
    ],
)
def test_parents_become_pods_and_grandparents_superpods(
    text: str,
    want_pods: list[str],
    want_superpods: dict[str, str | None],
    want_notes: tuple[str, ...],
) -> None:
    topology, notes = tree(text)
    assert [r.pod for r in topology.racks] == want_pods
    assert {p.id: p.superpod for p in topology.pod_list()} == want_superpods
    assert notes == want_notes


def test_hops_follow_the_switches_of_the_tree() -> None:
    index = TopologyIndex(tree(FOUR_LEVELS).topology)
    assert index.topology.pods == (
        Pod(id="ib-a", superpod="spine"),
        Pod(id="ib-b", superpod="spine"),
    )
    assert (index.hops("nvl01", "nvl02"), index.hops("nvl01", "nvl03")) == (2, 4)


def test_a_leaf_smaller_than_an_nvlink_domain_is_a_partial_rack_with_a_note() -> None:
    topology, notes = tree(THREE_RACKS_CONF.replace("r02n[01-18]", "r02n[01-16]"))
    assert [len(r.nodes) for r in topology.racks] == [18, 16, 18]
    assert notes == (
        "t:3: leaf 'rack02' has 16 nodes, an NVLink domain has 18: read as a partial rack",
    )


# Two NVL72 racks cabled to one IB leaf: the leaf's 36 nodes are two NVLink domains, not one.
#
#          spine
#            |
#          ib01
#     r01n[01-18],r02n[01-18]
def test_a_leaf_spanning_two_racks_is_an_error_naming_the_leaf() -> None:
    text = switch_lines(
        "SwitchName=ib01 Nodes=r01n[01-18],r02n[01-18]", "SwitchName=spine Switches=ib01"
    )
    with pytest.raises(TopologyFileError) as caught:
        tree(text)
    assert str(caught.value) == (
        "t:1: Nodes: expected a leaf switch to serve one NVLink domain of at most 18 nodes "
        "(domain_nodes); leaf 'ib01' has 36: a leaf spanning several racks cannot be read "
        "as one rack"
    )
    wide = tree(text, domain_nodes=36).topology  # NVLink domains of 36 nodes: one rack
    assert [(r.id, len(r.nodes)) for r in wide.racks] == [("ib01", 36)]


def test_domain_nodes_below_one_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="domain_nodes must be at least 1"):
        tree(THREE_RACKS_CONF, domain_nodes=0)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param(
            "SwitchName=a Nodes=x[3-1]\n",
            "t:1: Nodes: expected a hostlist expression: range 3-1 runs backwards in hostlist "
            "'x[3-1]'",
            id="a bad hostlist of nodes",
        ),
        pytest.param(
            "SwitchName=a Nodes=x1\nSwitchName=s Switches=a[1-\n",
            "t:2: Switches: expected a hostlist expression: unbalanced '[' (no closing ']') in "
            "hostlist 'a[1-'",
            id="a bad hostlist of switches",
        ),
        pytest.param(
            "SwitchName=a Nodes=x[1-4]\nSwitchName=b Nodes=x[4-6]\n",
            "t:2: Nodes: expected each node in exactly one rack; 'x4' is also in 'a' at Nodes "
            "(line 1)",
            id="a node under two leaves",
        ),
        pytest.param(
            switch_lines(
                "SwitchName=a Nodes=x1",
                "SwitchName=s1 Switches=a",
                "SwitchName=s2 Switches=a",
            ),
            "t:3: Switches: expected each switch under one parent; 'a' is also under 's1' at "
            "line 2",
            id="a switch under two parents",
        ),
        pytest.param(
            "SwitchName=a Nodes=x1\nSwitchName=s Switches=a,a\n",
            "t:2: Switches: expected each switch once; 'a' is listed twice",
            id="a switch listed twice under one parent",
        ),
        pytest.param(
            switch_lines(
                "SwitchName=leaf Nodes=x1",
                "SwitchName=s2 Switches=s3",
                "SwitchName=s1 Switches=s2",
                "SwitchName=s3 Switches=s1",
            ),
            "t:2: Switches: expected a tree; the switches form a cycle: s2 -> s3 -> s1 -> s2",
            id="a cycle",
        ),
        pytest.param(
            "SwitchName=s Switches=s\n",
            "t:1: Switches: expected a tree; the switches form a cycle: s -> s",
            id="a switch under itself",
        ),
        pytest.param(
            "SwitchName=a Nodes=x1\nSwitchName=s Switches=a,b\n",
            "t:2: Switches: expected the names of switches in this file; 'b' has no SwitchName "
            "line",
            id="an unknown switch name",
        ),
        pytest.param(
            "SwitchName=a Nodes=x1 Bandwidth=400\n",
            "t:1: Bandwidth: unknown parameter 'Bandwidth' (allowed: SwitchName, Switches, "
            "Nodes, LinkSpeed, Level)",
            id="an unknown parameter",
        ),
        pytest.param(
            "SwitchName=a Nodes=x1\nSwitchName=a Nodes=x2\n",
            "t:2: SwitchName: expected a unique switch name; 'a' is already used at line 1",
            id="a repeated switch name",
        ),
        pytest.param(
            "SwitchName=a Nodes=x1\nSwitchName=s Nodes=x1 Switches=a\n",
            "t:2: Switches: expected Nodes= or Switches= on a topology.conf SwitchName line, "
            "not both (a switch has nodes or child switches)",
            id="nodes and switches on one topology.conf line",
        ),
        pytest.param(
            "SwitchName=a LinkSpeed=1\n",
            "t:1: SwitchName: expected Nodes=<hostlist> or Switches=<hostlist> on a SwitchName "
            "line",
            id="a switch with neither nodes nor switches",
        ),
        pytest.param(
            "Nodes=x1 SwitchName=a\n",
            "t:1: Nodes: expected a line to start with SwitchName=",
            id="a line starting with Nodes",
        ),
        pytest.param(
            "SwitchName=a Nodes=x1 LinkSpeed=fast\n",
            "t:1: LinkSpeed: expected a whole number (got 'fast')",
            id="a link speed that is not a number",
        ),
        pytest.param(
            "# SwitchName=a Nodes=x1\n\n",
            "t: expected topology/tree lines (SwitchName=...)",
            id="no switches at all",
        ),
        pytest.param(
            "SwitchName=a Nodes=x1\nBlockName=b1 Nodes=x2\n",
            "t:2: BlockName: expected SwitchName= lines only: the file has SwitchName= lines "
            "(topology/tree), and BlockName= belongs to topology/block",
            id="block lines in a tree file",
        ),
        pytest.param(
            switch_lines(
                "SwitchName=a Nodes=x1",
                "SwitchName=p Switches=a",
                "SwitchName=b Nodes=x2",
                "SwitchName=top Switches=p,b",
            ),
            "t:4: Switches: expected the switches under 'top' on one level (rackplane reads "
            "the levels as racks, pods, superpods); 'p' is 1 level above the leaves, 'b' a leaf",
            id="children on two levels",
        ),
        pytest.param(
            "SwitchName=a-pod Nodes=x1\nSwitchName=a Nodes=x2\n",
            "t:2: SwitchName: expected a parent switch, or no switch named 'a-pod' (line 1): "
            "a leaf without a parent is read as a pod of its own of that name",
            id="a pod of its own named like another switch",
        ),
        pytest.param(
            "SwitchName=a Level=x Nodes=x1\n",
            "t:1: Level: expected a whole number (got 'x')",
            id="scontrol: a level that is not a number",
        ),
        pytest.param(
            "SwitchName=a Level=0 Nodes=x1\nSwitchName=b Level=0 Switches=a\n",
            "t:2: Switches: expected no Switches= on a Level=0 switch (level 0 is a leaf)",
            id="scontrol: a leaf with switches",
        ),
        pytest.param(
            "SwitchName=a Level=0 Nodes=x1\nSwitchName=s Level=1 LinkSpeed=1 Nodes=x1\n",
            f"t:2: SwitchName: expected Switches= on a Level=1 switch; if this is `scontrol "
            f"show topology` output, {CUT_HINT}",
            id="scontrol: an upper switch cut before its switches",
        ),
        pytest.param(  # what scontrol 22.05.8 prints with SLURM_TOPO_LEN=70
            THREE_RACKS_SCONTROL.replace("r03n[01-18] Switches=rack[01-03]", "r03"),
            f"t:4: SwitchName: expected Switches= on a Level=1 switch; if this is `scontrol "
            f"show topology` output, {CUT_HINT}",
            id="scontrol: a line cut at SLURM_TOPO_LEN",
        ),
        pytest.param(
            "SwitchName=a Level=0 Nodes=x1\nSwitchName=s Level=1 Nodes=x[1-2] Switches=a\n",
            f"t:2: Nodes: expected the nodes of the leaves below 's'; 'x2' is under none of "
            f"them; if this is `scontrol show topology` output, {CUT_HINT}",
            id="scontrol: an upper switch listing a node no leaf below it has",
        ),
        pytest.param(
            switch_lines(
                "SwitchName=a Level=0 Nodes=x1",
                "SwitchName=b Level=0 Nodes=x2",
                "SwitchName=s Level=1 Nodes=x1 Switches=a,b",
            ),
            "t:3: Nodes: expected the nodes of the leaves below 's'; 'x2' (under 'b') is missing",
            id="scontrol: an upper switch missing a node of a leaf below it",
        ),
    ],
)
def test_every_bad_tree_says_what_was_expected_and_where(text: str, want: str) -> None:
    with pytest.raises(TopologyFileError) as caught:
        tree(text)
    assert str(caught.value) == want


def test_a_tree_file_loads_with_its_notes_and_a_block_file_without() -> None:
    loaded = load_slurm_topology_with_notes(FIXTURES / "tree.conf", cluster="c", domain_nodes=10)
    source = FIXTURES / "tree.conf"
    assert loaded.notes == (
        f"{source}:2: leaf 'leaf1' has 8 nodes, an NVLink domain has 10: read as a partial rack",
        f"{source}:3: leaf 'leaf2' has 8 nodes, an NVLink domain has 10: read as a partial rack",
    )
    assert loaded.topology == load_slurm_topology(source, cluster="c", domain_nodes=10)
    block = load_slurm_topology_with_notes(FIXTURES / "topology.conf", cluster="c")
    assert block == SlurmTree(load_slurm_topology(FIXTURES / "topology.conf", cluster="c"), ())


# --- property: any tree of 1-3 levels, written either way, reads back ----------------------


@st.composite
def trees(draw: st.DrawFn) -> tuple[int, int, list[list[list[int]]]]:
    """(domain_nodes, levels, superpods -> pods -> leaf sizes); one level: no parents."""
    domain_nodes = draw(st.integers(1, 18))
    levels = draw(st.integers(1, 3))
    sizes = st.integers(1, domain_nodes)
    leaves = st.lists(sizes, min_size=1, max_size=3)
    if levels == 1:
        return domain_nodes, levels, [[draw(leaves)]]
    pods = st.lists(leaves, min_size=1, max_size=3)
    if levels == 2:
        return domain_nodes, levels, [draw(pods)]
    return domain_nodes, levels, draw(st.lists(pods, min_size=1, max_size=3))


@settings(max_examples=60, deadline=None)
@given(trees(), st.randoms(use_true_random=False))
def test_any_tree_written_as_topology_conf_or_scontrol_output_reads_back(
    shape: tuple[int, int, list[list[list[int]]]], rng: random.Random
) -> None:
    domain_nodes, levels, superpods = shape
    want_racks: dict[str, tuple[tuple[str, ...], str]] = {}
    want_pods: dict[str, str | None] = {}
    conf: list[str] = []
    scontrol: list[list[str]] = [[], [], []]  # by level, as Slurm prints them: leaves first
    for s, pods in enumerate(superpods, start=1):
        superpod = f"sp{s}" if levels == 3 else None
        pod_names = []
        for p, leaves in enumerate(pods, start=1):
            pod = f"sp{s}-ib{p:02d}"
            leaf_names = []
            for size in leaves:
                leaf = f"nvl{len(want_racks) + 1:03d}"
                nodes = tuple(f"r{len(want_racks) + 1:03d}n{i:02d}" for i in range(1, size + 1))
                want_racks[leaf] = (nodes, pod if levels > 1 else f"{leaf}-pod")
                leaf_names.append(leaf)
                conf.append(f"SwitchName={leaf} Nodes={compress_hostlist(nodes)}")
                scontrol[0].append(
                    f"SwitchName={leaf} Level=0 LinkSpeed=1 Nodes={compress_hostlist(nodes)} "
                )
            if levels > 1:
                want_pods[pod] = superpod
                pod_names.append(pod)
                below = compress_hostlist(n for leaf in leaf_names for n in want_racks[leaf][0])
                conf.append(f"SwitchName={pod} Switches={compress_hostlist(leaf_names)}")
                scontrol[1].append(
                    f"SwitchName={pod} Level=1 LinkSpeed=1 Nodes={below} "
                    f"Switches={compress_hostlist(leaf_names)} "
                )
            else:
                want_pods.update({f"{leaf}-pod": None for leaf in leaf_names})
        if superpod is not None:
            below = compress_hostlist(
                n for leaf, (nodes, pod) in want_racks.items() if pod in pod_names for n in nodes
            )
            conf.append(f"SwitchName={superpod} Switches={','.join(pod_names)}")
            scontrol[2].append(
                f"SwitchName={superpod} Level=2 LinkSpeed=1 Nodes={below} "
                f"Switches={','.join(pod_names)} "
            )
    rng.shuffle(conf)  # topology.conf lines come in any order
    read = [
        tree("\n".join(conf) + "\n", domain_nodes),
        tree("\n".join(line for level in scontrol for line in level) + "\n", domain_nodes),
    ]
    for topology, notes in read:
        assert {r.id: (r.nodes, r.pod) for r in topology.racks} == want_racks
        assert {p.id: p.superpod for p in topology.pod_list()} == want_pods
        assert topology.node_count == sum(len(nodes) for nodes, _ in want_racks.values())
        partial = [nodes for nodes, _ in want_racks.values() if len(nodes) < domain_nodes]
        assert sum("read as a partial rack" in note for note in notes) == len(partial)
        assert sum("a pod of its own" in note for note in notes) == (
            len(want_racks) if levels == 1 else 0
        )


# --- the command line ------------------------------------------------------------------------

runner = CliRunner()


def test_the_cli_imports_a_tree_and_prints_its_notes(tmp_path: Path) -> None:
    source, out = FIXTURES / "tree.conf", tmp_path / "cluster.yaml"
    result = runner.invoke(
        app, ["topology", "import", "--slurm", str(source), "--cluster", "c", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert load_cluster_file(out).topology == load_slurm_topology(source, cluster="c")
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 2
    assert "leaf 'leaf1' has 8 nodes, an NVLink domain has 18: read as a partial rack" in notes[0]


def test_the_cli_refuses_a_leaf_wider_than_domain_nodes() -> None:
    source = FIXTURES / "tree.conf"
    result = runner.invoke(
        app, ["topology", "import", "--slurm", str(source), "--domain-nodes", "4"]
    )
    assert result.exit_code == 2
    assert "leaf 'leaf1' has 8" in result.stderr
    assert "Traceback" not in result.output


def test_the_cli_help_says_slurm_takes_a_block_or_a_tree() -> None:
    result = runner.invoke(app, ["topology", "import", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "topology/tree" in result.stdout
    assert "--domain-nodes" in result.stdout
