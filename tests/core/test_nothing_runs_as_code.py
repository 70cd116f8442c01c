"""Nothing from a topic, a file or the environment is ever evaluated as code.

Bytes become messages only through pydantic TypeAdapters (JSON), files only through YAML's
safe loader. This test reads rackplane's source and refuses the calls that would run data:
eval/exec/compile, pickle/marshal/shelve, and YAML loaders that build Python objects.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rackplane.config import ConfigError, read_config_file
from rackplane.importers import TopologyFileError, load_cluster_file
from rackplane.models import COMMANDS

PACKAGE = Path(__file__).resolve().parents[2] / "rackplane"
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "marshal", "shelve", "jsonpickle"}
FORBIDDEN_YAML = {"load", "load_all", "unsafe_load", "unsafe_load_all", "full_load", "Loader"}


def offences(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        if call and node.func.id in FORBIDDEN_CALLS:  # type: ignore[attr-defined]
            found.append(f"{node.func.id}() at line {node.lineno}")  # type: ignore[attr-defined]
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names]
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else names
            for m in modules:
                if m.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"import {m} at line {node.lineno}")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "yaml"
            and node.attr in FORBIDDEN_YAML
        ):
            found.append(f"yaml.{node.attr} at line {node.lineno}")
    return found


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_module_evaluates_data_as_code(path: Path) -> None:
    assert offences(ast.parse(path.read_text(), filename=str(path))) == []


def test_the_scan_finds_what_it_forbids() -> None:
    bad = "import pickle\nyaml.load(x)\neval(s)\n"
    assert len(offences(ast.parse(bad))) == 3


PAYLOAD = "!!python/object/apply:os.system ['touch /tmp/rackplane-pwned']"


def test_a_cluster_file_with_a_python_tag_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text(f"cluster: {PAYLOAD}\n")
    with pytest.raises(TopologyFileError):
        load_cluster_file(path)


def test_a_config_file_with_a_python_tag_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text(f"broker: {PAYLOAD}\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_config_file(path)


def test_a_command_is_data_only() -> None:
    raw = b'{"type": "__import__(\'os\').system(\'id\')", "id": "c1", "cluster": "x", "actor": "a"}'
    with pytest.raises(ValueError, match="does not match any of the expected tags"):
        COMMANDS.validate_json(raw)
