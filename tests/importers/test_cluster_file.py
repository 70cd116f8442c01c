"""The rackplane cluster file: parsing, errors that point at lines, and the dump round trip."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackplane.importers import (
    TopologyFileError,
    dump_cluster_file,
    load_cluster_file,
    parse_cluster_file,
)
from rackplane.models import Pod, PolicySettings, Rack, Topology, TopologyIndex

FIXTURES = Path(__file__).parents[1] / "fixtures" / "cluster"


def rack(rack_id: str, nodes: int, *, pod: str = "pod-default", gpus: int = 4) -> Rack:
    return Rack(
        id=rack_id,
        pod=pod,
        nodes=tuple(f"{rack_id}-n{i:02d}" for i in range(1, nodes + 1)),
        gpus_per_node=gpus,
    )


# small.yaml / small.json:
#
#              core
#            /      \
#         sp1        sp2
#        /   \         \
#    pod-a   pod-b    pod-c
#      |       |        |
#     r1      r2       r3        (4, 4 and 2 nodes; r3 has 8 GPUs a node)
@pytest.mark.parametrize("name", ["small.yaml", "small.json"])
def test_a_cluster_file_gives_its_racks_pods_and_policy(name: str) -> None:
    got = load_cluster_file(FIXTURES / name)
    topology = got.topology
    assert topology.cluster == "lab"
    assert [r.id for r in topology.racks] == ["r1", "r2", "r3"]
    assert topology.racks[0].nodes == ("n01", "n02", "n03", "n04")
    assert topology.racks[1].nodes == ("n05", "n06", "n07", "n08")
    assert [r.gpus_per_node for r in topology.racks] == [4, 4, 8]
    assert topology.pods == (
        Pod(id="pod-a", superpod="sp1"),
        Pod(id="pod-b", superpod="sp1"),
        Pod(id="pod-c", superpod="sp2"),
    )
    index = TopologyIndex(topology)
    assert (index.hops("r1", "r2"), index.hops("r1", "r3")) == (4, 6)
    assert got.policy.spares_per_rack == 1
    assert got.policy.restart_overhead == timedelta(minutes=5)
    assert got.policy.slice_size == PolicySettings().slice_size


def test_a_file_without_policy_gets_the_default_policy() -> None:
    got = parse_cluster_file("cluster: c\nracks:\n  - {id: r1, nodes: 'n[1-2]'}\n", "p.yaml")
    assert got.policy == PolicySettings()
    assert got.topology.racks[0].pod == "pod-default"


@pytest.mark.parametrize(
    ("name", "want"),
    [
        pytest.param(
            "unknown_key.yaml",
            "unknown_key.yaml:6: racks[1].podd: "
            "unknown field 'podd' (allowed: id, pod, nodes, gpus_per_node)",
            id="an unknown key is named with the allowed ones",
        ),
        pytest.param(
            "wrong_type.yaml",
            "wrong_type.yaml:7: racks[1].gpus_per_node: expected an integer (got 'four')",
            id="a wrong type names the line of the value",
        ),
        pytest.param(
            "bad_syntax.yaml",
            "bad_syntax.yaml:5: expected valid YAML: did not find expected ',' or '}' "
            "(while parsing a flow mapping started on line 4)",
            id="a syntax error names the line the parser stopped at",
        ),
    ],
)
def test_a_broken_cluster_file_is_refused_at_the_right_line(name: str, want: str) -> None:
    with pytest.raises(TopologyFileError) as caught:
        load_cluster_file(FIXTURES / name)
    assert str(caught.value).endswith(want), str(caught.value)
    assert caught.value.source.endswith(name)


@pytest.mark.parametrize(
    ("text", "want_line", "want_field", "want_words"),
    [
        pytest.param(
            "cluster: c\nracks:\n  - {id: r1, nodes: 42}\n",
            3,
            "racks[0].nodes",
            "expected a hostlist expression or a list of node names (got 42)",
            id="nodes that are neither a hostlist nor a list",
        ),
        pytest.param(
            "cluster: c\nracks:\n  - {id: r1, nodes: 'n[3-1]'}\n",
            3,
            "racks[0].nodes",
            "range 3-1 runs backwards",
            id="a backwards hostlist",
        ),
        pytest.param(
            "cluster: c\nracks:\n  - {id: r1, nodes: 'n[1-3]'}\n  - {id: r2, nodes: 'n[3-4]'}\n",
            4,
            "racks[1].nodes",
            "'n3' is also in 'r1' at racks[0].nodes (line 3)",
            id="a node in two racks",
        ),
        pytest.param(
            "cluster: c\nracks:\n  - {id: r1, nodes: a}\n  - {id: r1, nodes: b}\n",
            4,
            "racks[1]",
            "expected a unique rack id; 'r1' is already used at racks[0] (line 3)",
            id="a repeated rack id",
        ),
        pytest.param(
            "cluster: c\npods: [{id: p1}]\nracks:\n  - {id: r1, pod: p2, nodes: a}\n",
            4,
            "racks[0].pod",
            "expected one of the listed pods (p1) (got 'p2')",
            id="a rack naming an unlisted pod",
        ),
        pytest.param(
            "cluster: c\nracks:\n  - {id: 'bad id', nodes: a}\n",
            3,
            "racks[0].id",
            "expected an id",
            id="an id with a space",
        ),
        pytest.param(
            "cluster: c\nracks: []\n",
            2,
            "racks",
            "expected at least 1 item",
            id="no racks",
        ),
        pytest.param(
            "cluster: c\nracks:\n  - {id: r1, nodes: a}\npolicy:\n  restart_overhead: soon\n",
            5,
            "policy.restart_overhead",
            "expected a duration: seconds, or ISO 8601 such as PT10M (got 'soon')",
            id="a duration in words",
        ),
        pytest.param(
            "cluster: c\nracks:\n  - {id: r1, nodes: a}\npolicy:\n  spare_per_rack: 1\n",
            5,
            "policy.spare_per_rack",
            "unknown field 'spare_per_rack' (allowed: slice_size, spares_per_rack,",
            id="a misspelt policy knob",
        ),
        pytest.param(
            "cluster: c\nracks:\n  - {id: r1, nodes: 'n[01-18]'}\npolicy:\n  slice_size: 20\n",
            5,
            "policy.slice_size",
            "at most 16 (the largest rack has 18 nodes, 2 kept as spares)",
            id="a slice size no rack can hold outside its spares",
        ),
        pytest.param(
            "cluster: c\nracks:\n  - {id: r1, nodes: 'n[01-18]'}\n"
            "policy:\n  spares_per_rack: 3\n  slice_size: 16\n",
            6,
            "policy.slice_size",
            "at most 15 (the largest rack has 18 nodes, 3 kept as spares)",
            id="a slice size the spares leave no room for",
        ),
        pytest.param(
            "cluster: c\nracks:\n  - {id: r1, nodes: 'n[01-18]'}\npolicy:\n  spares_per_rack: 18\n",
            5,
            "policy.spares_per_rack",
            "with 18 every node is a spare and no job can ever run",
            id="spares that take every node",
        ),
        pytest.param(
            "- cluster: c\n",
            1,
            None,
            "expected a mapping with 'cluster' and 'racks'",
            id="a list instead of a mapping",
        ),
    ],
)
def test_every_bad_cluster_file_names_the_line_and_what_was_expected(
    text: str, want_line: int, want_field: str | None, want_words: str
) -> None:
    with pytest.raises(TopologyFileError) as caught:
        parse_cluster_file(text, "c.yaml")
    assert (caught.value.line, caught.value.field) == (want_line, want_field)
    assert want_words in str(caught.value)


def test_a_default_slice_size_larger_than_small_racks_is_not_judged() -> None:
    text = "cluster: c\nracks:\n  - {id: r1, nodes: 'n[1-6]'}\npolicy: {spares_per_rack: 1}\n"
    got = parse_cluster_file(text, "c.yaml")
    assert got.policy.slice_size == 16  # larger than the rack: its jobs say their slices


@pytest.mark.parametrize(
    ("duration", "want"),
    [
        pytest.param("600", timedelta(minutes=10), id="seconds"),
        pytest.param("'PT10M'", timedelta(minutes=10), id="ISO 8601"),
        pytest.param("90.5", timedelta(seconds=90.5), id="fractional seconds"),
    ],
)
def test_policy_durations_accept_seconds_and_iso_8601(duration: str, want: timedelta) -> None:
    text = f"cluster: c\nracks: [{{id: r1, nodes: a}}]\npolicy: {{restart_overhead: {duration}}}"
    assert parse_cluster_file(text, "d.yaml").policy.restart_overhead == want


def test_a_dump_is_compact_and_reads_back_to_the_same_topology() -> None:
    topology = Topology(cluster="c", racks=(rack("r1", 18, pod="p1"), rack("r2", 18, pod="p2")))
    text = dump_cluster_file(topology)
    assert "nodes: 'r1-n[01-18]'" in text
    assert "pods:" not in text
    assert text.count("gpus_per_node") == 1
    assert parse_cluster_file(text, "dump.yaml").topology == topology


def test_a_dump_lists_pods_with_superpods_and_per_rack_gpus_when_racks_differ() -> None:
    topology = Topology(
        cluster="c",
        racks=(rack("r1", 2, pod="p1"), rack("r2", 2, pod="p2", gpus=8)),
        pods=(Pod(id="p1", superpod="s1"), Pod(id="p2", superpod="s2")),
    )
    policy = PolicySettings(spares_per_rack=0, slice_size=2, restart_overhead=timedelta(seconds=90))
    text = dump_cluster_file(topology, policy)
    assert "- {id: p1, superpod: s1}" in text
    assert "gpus_per_node: 8}" in text
    back = parse_cluster_file(text, "dump.yaml")
    assert (back.topology, back.policy) == (topology, policy)


_IDS = st.text(alphabet="abz019-", min_size=1, max_size=4).map(lambda s: f"x{s}")


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    rack_ids = draw(st.lists(_IDS, min_size=1, max_size=6, unique=True))
    pod_ids = draw(st.lists(_IDS, min_size=1, max_size=3, unique=True))
    racks = []
    for rack_id in rack_ids:
        names = draw(st.lists(st.integers(0, 40), min_size=1, max_size=6, unique=True))
        width = draw(st.integers(1, 3))
        racks.append(
            Rack(
                id=rack_id,
                pod=draw(st.sampled_from(pod_ids)),
                nodes=tuple(f"{rack_id}.n{n:0{width}d}" for n in names),
                gpus_per_node=draw(st.sampled_from([4, 4, 8])),
            )
        )
    pods: tuple[Pod, ...] = ()
    if draw(st.booleans()):
        pods = tuple(
            Pod(id=p, superpod=draw(st.none() | st.sampled_from(["s1", "s2"]))) for p in pod_ids
        )
    return Topology(cluster=draw(_IDS), racks=tuple(racks), pods=pods)


@settings(max_examples=60)
@given(topologies())
def test_any_topology_survives_a_dump_and_a_parse(topology: Topology) -> None:
    assert parse_cluster_file(dump_cluster_file(topology), "rt.yaml").topology == topology
