"""File errors read like compiler messages; YAML is loaded safely and remembers its lines."""

from __future__ import annotations

import pickle

import pytest
from pydantic import BaseModel, ConfigDict

from rackplane.importers import TopologyFileError
from rackplane.importers._yaml import format_path, load_document, validate


def test_a_file_error_reads_file_line_field_expected_and_got() -> None:
    err = TopologyFileError(
        "examples/x.yaml",
        "expected a hostlist expression or a list of node names",
        line=12,
        field="racks[3].nodes",
        got="42",
    )
    want = (
        "examples/x.yaml:12: racks[3].nodes: "
        "expected a hostlist expression or a list of node names (got 42)"
    )
    assert str(err) == want
    assert isinstance(err, ValueError)
    assert (err.source, err.line, err.field) == ("examples/x.yaml", 12, "racks[3].nodes")


@pytest.mark.parametrize(
    ("err", "want"),
    [
        pytest.param(
            TopologyFileError("t.conf", "expected a value", line=3),
            "t.conf:3: expected a value",
            id="without a field the line stands alone",
        ),
        pytest.param(
            TopologyFileError("t.json", "expected an integer", field="racks[0].gpus_per_node"),
            "t.json: racks[0].gpus_per_node: expected an integer",
            id="without a line the field stands alone",
        ),
    ],
)
def test_a_file_error_leaves_out_what_it_does_not_know(err: TopologyFileError, want: str) -> None:
    assert str(err) == want


def test_a_file_error_survives_pickling_with_its_attributes() -> None:
    err = TopologyFileError("a.yaml", "expected x", line=2, field="f", got="'y'")
    back = pickle.loads(pickle.dumps(err))
    assert (back.source, back.line, back.field, back.expected, back.got) == (
        "a.yaml",
        2,
        "f",
        "expected x",
        "'y'",
    )


_NESTED = """\
cluster: c
racks:
  - id: r1
    nodes: [a, b]
  - {id: r2,
     nodes: c}
"""


@pytest.mark.parametrize(
    ("path", "want_line"),
    [
        pytest.param(("cluster",), 1, id="a top-level key"),
        pytest.param(("racks", 0), 3, id="a block sequence item"),
        pytest.param(("racks", 0, "nodes", 1), 4, id="an item of a flow sequence"),
        pytest.param(("racks", 1, "nodes"), 6, id="a key of a multi-line flow mapping"),
        pytest.param(("racks", 1, "gpus_per_node"), 5, id="a missing key falls back to its parent"),
        pytest.param(("nothing", 3), 1, id="an unknown path falls back to the document"),
    ],
)
def test_every_key_and_item_remembers_its_line(path: tuple[str | int, ...], want_line: int) -> None:
    _, lines = load_document(_NESTED, "n.yaml")
    assert lines.line_of(path) == want_line


def test_merge_keys_and_aliases_load_like_safe_load() -> None:
    text = "base: &b {gpus: 4}\nrack:\n  <<: *b\n  id: r1\nsame: *b\n"
    data, lines = load_document(text, "m.yaml")
    assert data == {"base": {"gpus": 4}, "rack": {"gpus": 4, "id": "r1"}, "same": {"gpus": 4}}
    assert lines.line_of(("rack", "id")) == 4


def test_a_python_tag_is_refused_rather_than_constructed() -> None:
    with pytest.raises(TopologyFileError, match="could not determine a constructor") as caught:
        load_document("x: !!python/object/apply:os.system ['true']\n", "evil.yaml")
    assert caught.value.line == 1


def test_json_with_tab_indentation_loads_with_lines_and_json_numbers() -> None:
    text = '{\n\t"a": 1e3,\n\t"b": [\n\t\t"x"\n\t]\n}\n'
    data, lines = load_document(text, "t.json")
    assert data == {"a": 1000.0, "b": ["x"]}
    assert lines.line_of(("b", 0)) == 4


@pytest.mark.parametrize(
    ("text", "want_line", "want_words"),
    [
        pytest.param("a: [1, 2\nb: 3\n", 2, "expected valid YAML", id="an unclosed flow list"),
        pytest.param("a: 1\n b: 2\n", 2, "mapping values are not allowed", id="a bad indent"),
        pytest.param('{"a": 1,,}', 1, "expected valid YAML", id="broken JSON is reported too"),
    ],
)
def test_a_syntax_error_names_its_line(text: str, want_line: int, want_words: str) -> None:
    with pytest.raises(TopologyFileError) as caught:
        load_document(text, "bad.yaml")
    assert caught.value.line == want_line
    assert want_words in str(caught.value)


def test_an_empty_file_is_refused_as_such() -> None:
    with pytest.raises(TopologyFileError, match="the file is empty"):
        load_document("# only a comment\n", "empty.yaml")


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int
    name: str = "x"


class _Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: tuple[_Inner, ...]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param(
            "items:\n  - {size: 1}\n  - {size: big}\n",
            "v.yaml:3: items[1].size: expected an integer (got 'big')",
            id="a wrong type",
        ),
        pytest.param(
            "items:\n  - size: 1\n    nmae: y\n",
            "v.yaml:3: items[0].nmae: unknown field 'nmae' (allowed: size, name)",
            id="an unknown field lists the allowed ones",
        ),
        pytest.param(
            "items:\n  - name: y\n",
            "v.yaml:2: items[0].size: required field 'size' is missing",
            id="a missing field points at its parent's line",
        ),
        pytest.param(
            "items:\n  - sise: 1\n",
            "v.yaml:2: items[0].sise: unknown field 'sise' (allowed: size, name)",
            id="a misspelt required field is reported as the typo, not as missing",
        ),
        pytest.param(
            "items: 3\n",
            "v.yaml:1: items: expected a list (got 3)",
            id="a scalar where a list belongs",
        ),
    ],
)
def test_a_validation_error_becomes_a_located_human_sentence(text: str, want: str) -> None:
    data, lines = load_document(text, "v.yaml")
    with pytest.raises(TopologyFileError) as caught:
        validate(_Outer, data, "v.yaml", lines)
    assert str(caught.value) == want


def test_odd_keys_are_quoted_in_field_paths() -> None:
    path = ("items", 2, "metadata", "labels", "nvidia.com/gpu.clique")
    assert format_path(path) == 'items[2].metadata.labels["nvidia.com/gpu.clique"]'


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param(
            "racks:\n  - id: r1\n    pod: a\n    pod: b\n",
            "d.yaml:4: racks[0].pod: expected each key once in a mapping; 'pod' is repeated "
            "(first on line 3)",
            id="in YAML",
        ),
        pytest.param(
            '{\n  "cluster": "a",\n  "cluster": "b"\n}\n',
            "d.yaml:3: cluster: expected each key once in a mapping; 'cluster' is repeated "
            "(first on line 2)",
            id="in JSON",
        ),
    ],
)
def test_a_repeated_key_is_refused_instead_of_silently_overridden(text: str, want: str) -> None:
    with pytest.raises(TopologyFileError) as caught:
        load_document(text, "d.yaml")
    assert str(caught.value) == want


def test_a_key_overriding_a_merged_one_is_not_a_repeat() -> None:
    data, lines = load_document("a: &a {x: 1, y: 2}\nb:\n  <<: *a\n  x: 3\n", "m.yaml")
    assert data == {"a": {"x": 1, "y": 2}, "b": {"x": 3, "y": 2}}
    assert lines.line_of(("b", "x")) == 4
