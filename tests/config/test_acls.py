"""`rackplane config acls`: the broker's ACLs of a deployment, printed for an admin to run.
What the broker makes of them is the ACL tier's business (tests/acl, `make test-acl`); here:
what the list says, that the CLI prints it for the configured prefix, and that
docs/OPERATIONS.md gives exactly what the CLI prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.streams.acls import Principals, acls, command_lines

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def writers(prefix: str, topic: str) -> set[str]:
    name = f"{prefix}.{topic}"
    return {
        a.principal
        for a in acls(prefix, prefix)
        if a.resource == "topic" and a.name == name and {"Write", "All"} & set(a.operations)
    }


def test_only_the_worker_writes_the_log_and_each_component_writes_its_own_topics() -> None:
    assert writers("p", "events") == {"worker"}
    assert writers("p", "snapshots") == {"worker"}
    assert writers("p", "rejected") == {"worker"}
    assert writers("p", "commands") == {"worker", "client"}
    assert writers("p", "telemetry") == {"exporter"}
    prefixed = [a for a in acls("p", "app") if a.pattern == "prefixed"]
    assert {(a.principal, a.name) for a in prefixed} == {
        ("worker", "p."), ("worker", "app-"), ("worker", "app"),
    }  # fmt: skip


def test_the_cli_prints_the_acls_of_the_configured_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RACKPLANE_TOPIC_PREFIX", "prod")
    monkeypatch.setenv("RACKPLANE_APP_ID", "prod-app")
    out = runner.invoke(app, ["config", "acls", "--bootstrap", "k:9094", "--worker", "w1"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines == command_lines("prod", "prod-app", acls_principals("w1"), bootstrap="k:9094")
    assert "--allow-principal User:w1 --operation Read --operation Write" in lines[1]
    assert "--topic prod.events" in lines[1]
    listed = json.loads(runner.invoke(app, ["config", "acls", "--json"]).stdout)
    ops = ["Read", "Write", "Describe", "DescribeConfigs"]
    assert listed[0] == {
        "principal": "worker", "resource": "topic", "name": "prod.commands",
        "pattern": "literal", "operations": ops,
    }  # fmt: skip


def acls_principals(worker: str) -> Principals:
    return Principals(worker=worker)


def test_operations_md_gives_exactly_what_the_cli_prints_for_the_defaults() -> None:
    doc = (ROOT / "docs" / "OPERATIONS.md").read_text()
    block = re.search(r"For the defaults:\n\n```\n(.*?)```", doc, re.S)
    assert block is not None
    assert block.group(1).splitlines() == command_lines(
        "rackplane", "rackplane", bootstrap="BROKER:9092"
    ), "paste `rackplane config acls` into docs/OPERATIONS.md"
