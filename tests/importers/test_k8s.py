"""Kubernetes nodes grouped into NVLink domains by their nvidia.com/gpu.clique label."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rackplane.importers import (
    CLIQUE_LABEL,
    POD_LABEL,
    SUPERPOD_LABEL,
    TopologyFileError,
    load_k8s_nodes,
    parse_k8s_nodes,
)
from rackplane.models import Pod, TopologyIndex

FIXTURES = Path(__file__).parents[1] / "fixtures" / "k8s"
UUID = "5a1f0c3e-9b7d-4e2a-8c61-2f4b7d9e0a13"


def nodes_json() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / "nodes.json").read_text())
    return copy.deepcopy(loaded)


def item(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(i for i in doc["items"] if i["metadata"]["name"] == name)
    return found


# nodes.json:
#
#                  spine-1
#                 /       \
#           leaf-01        leaf-02
#              |              |
#        <uuid>.1          <uuid>.2            cpu-01: no GPUs (ignored)
#   gb-a01 gb-a02 gb-a03  gb-b01 gb-b02 gb-b03  gb-x01: GPUs, no clique (skipped)
def test_each_clique_becomes_a_rack_in_its_leaf_pod_under_its_spine() -> None:
    got = load_k8s_nodes(FIXTURES / "nodes.json")
    topology = got.topology
    assert topology.cluster == UUID
    assert [r.id for r in topology.racks] == [f"{UUID}.1", f"{UUID}.2"]
    assert [r.nodes for r in topology.racks] == [
        ("gb-a01", "gb-a02", "gb-a03"),
        ("gb-b01", "gb-b02", "gb-b03"),
    ]
    assert {r.gpus_per_node for r in topology.racks} == {4}
    assert topology.pods == (
        Pod(id="leaf-01", superpod="spine-1"),
        Pod(id="leaf-02", superpod="spine-1"),
    )
    assert TopologyIndex(topology).hops(f"{UUID}.1", f"{UUID}.2") == 4


def test_a_gpu_node_without_a_clique_is_skipped_and_reported_and_a_cpu_node_is_not() -> None:
    got = load_k8s_nodes(FIXTURES / "nodes.json")
    assert got.skipped == (("gb-x01", f"no {CLIQUE_LABEL} label"),)
    assert "cpu-01" not in set(TopologyIndex(got.topology).nodes())


def test_a_node_without_the_pod_label_puts_every_rack_in_the_default_pod() -> None:
    doc = nodes_json()
    del item(doc, "gb-b02")["metadata"]["labels"][POD_LABEL]
    topology = parse_k8s_nodes(json.dumps(doc), "nodes.json").topology
    assert {r.pod for r in topology.racks} == {"pod-default"}
    assert topology.pods == ()


def test_pod_and_superpod_labels_can_be_other_labels() -> None:
    doc = nodes_json()
    for node in doc["items"]:
        labels = node["metadata"]["labels"]
        labels["example.com/row"] = "row a" if node["metadata"]["name"] < "gb-b" else "row b"
    got = parse_k8s_nodes(
        json.dumps(doc), "nodes.json", pod_label="example.com/row", superpod_label="absent"
    )
    assert [r.pod for r in got.topology.racks] == ["row-a", "row-b"]
    assert got.topology.pods == ()


@pytest.mark.parametrize(
    ("cliques", "source", "cluster", "want_cluster"),
    [
        pytest.param([f"{UUID}.1", f"{UUID}.2"], "n.json", None, UUID, id="one uuid names it"),
        pytest.param(["u1.1", "u2.1"], "dumps/gb-east.json", None, "gb-east", id="uuids differ"),
        pytest.param(["1", "2"], "nodes.json", None, "nodes", id="cliques without a uuid"),
        pytest.param([f"{UUID}.1", f"{UUID}.2"], "n.json", "mine", "mine", id="an argument wins"),
    ],
)
def test_the_cluster_id_comes_from_the_clique_uuid_else_the_file_name(
    cliques: list[str], source: str, cluster: str | None, want_cluster: str
) -> None:
    doc = nodes_json()
    for prefix, clique in zip(["gb-a", "gb-b"], cliques, strict=True):
        for n in (1, 2, 3):
            item(doc, f"{prefix}0{n}")["metadata"]["labels"][CLIQUE_LABEL] = clique
    got = parse_k8s_nodes(json.dumps(doc), source, cluster=cluster)
    assert got.topology.cluster == want_cluster


@pytest.mark.parametrize(
    ("clique", "want_rack"),
    [
        pytest.param("uuid 7.clique#1", "uuid-7.clique-1", id="odd characters become dashes"),
        pytest.param("#1", "clique--1", id="an id must start with a letter or digit"),
    ],
)
def test_a_clique_value_becomes_a_valid_rack_id(clique: str, want_rack: str) -> None:
    doc = nodes_json()
    for n in (1, 2, 3):
        item(doc, f"gb-a0{n}")["metadata"]["labels"][CLIQUE_LABEL] = clique
    topology = parse_k8s_nodes(json.dumps(doc), "n.json").topology
    assert topology.racks[0].id == want_rack


def test_mismatched_gpu_counts_in_a_clique_are_refused_at_the_node() -> None:
    with pytest.raises(TopologyFileError) as caught:
        load_k8s_nodes(FIXTURES / "mismatched_gpus.json")
    err = caught.value
    assert err.line == 137
    assert err.field == 'items[3].status.capacity["nvidia.com/gpu"]'
    assert "'gb-a03' to have 4 GPUs like 'gb-a01'" in str(err)
    assert err.got == "2"


@pytest.mark.parametrize(
    ("change", "want_field", "want_words"),
    [
        pytest.param(
            lambda doc: item(doc, "gb-a02")["metadata"]["labels"].update({POD_LABEL: "leaf-09"}),
            f'items[2].metadata.labels["{POD_LABEL}"]',
            "expected node 'gb-a02' in pod 'leaf-01' like the rest of its NVLink domain",
            id="two pods in one clique",
        ),
        pytest.param(
            lambda doc: item(doc, "gb-b02")["metadata"]["labels"].update({SUPERPOD_LABEL: "s9"}),
            f'items[5].metadata.labels["{SUPERPOD_LABEL}"]',
            "expected node 'gb-b02' under superpod 'spine-1' like 'gb-b01', which is in the same",
            id="one pod under two spines",
        ),
        pytest.param(
            lambda doc: item(doc, "gb-a01")["status"]["capacity"].update({"nvidia.com/gpu": "4k"}),
            'items[1].status.capacity["nvidia.com/gpu"]',
            "expected a whole number of GPUs on node 'gb-a01' (got '4k')",
            id="a GPU count that is not a number",
        ),
        pytest.param(
            lambda doc: item(doc, "gb-b03")["metadata"].update({"name": "gb-b01"}),
            "items[6].metadata.name",
            "expected unique node names; 'gb-b01' is also items[4]",
            id="a node listed twice",
        ),
        pytest.param(
            lambda doc: doc["items"][2]["metadata"].pop("name"),
            "items[2].metadata.name",
            "required field 'name' is missing",
            id="a node without a name",
        ),
    ],
)
def test_inconsistent_nodes_are_refused_naming_the_node_and_the_field(
    change: Any, want_field: str, want_words: str
) -> None:
    doc = nodes_json()
    change(doc)
    with pytest.raises(TopologyFileError) as caught:
        parse_k8s_nodes(json.dumps(doc, indent=2), "nodes.json")
    assert caught.value.field == want_field
    assert caught.value.line is not None
    assert want_words in str(caught.value)


def test_a_file_without_usable_gpu_nodes_says_so() -> None:
    doc = nodes_json()
    doc["items"] = [item(doc, "cpu-01"), item(doc, "gb-x01")]
    with pytest.raises(TopologyFileError, match=r"at least one GPU node with a nvidia\.com/gpu"):
        parse_k8s_nodes(json.dumps(doc), "nodes.json")


def test_something_that_is_not_a_node_list_is_refused() -> None:
    with pytest.raises(TopologyFileError, match="required field 'items' is missing"):
        parse_k8s_nodes('{"kind": "Node", "metadata": {"name": "x"}}', "node.json")


def test_kubectl_yaml_output_works_as_well_as_json() -> None:
    import yaml

    text = yaml.safe_dump(nodes_json())
    assert parse_k8s_nodes(text, "nodes.yaml").topology == (
        load_k8s_nodes(FIXTURES / "nodes.json").topology
    )
