"""The production commands against a running worker: they print the events they caused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.importers import dump_cluster_file
from tests.streams.conftest import Pipeline, new_cluster, small_topology

pytestmark = pytest.mark.broker
runner = CliRunner()


def run(p: Pipeline, *args: str) -> tuple[int, dict[str, object] | str]:
    argv = [*args, "--broker", p.config.broker, "--prefix", p.config.prefix, "--json"]
    result = runner.invoke(app, argv)
    try:
        return result.exit_code, json.loads(result.stdout)
    except json.JSONDecodeError:
        return result.exit_code, result.output


def test_an_operator_registers_submits_cordons_and_reports_from_the_command_line(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    c = new_cluster()
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(dump_cluster_file(small_topology(c)))
    code, out = run(pipeline, "register", str(cluster_file), "--actor", "alice")
    assert code == 0, out
    assert [e["type"] for e in out["events"]] == ["TopologyRegistered"]  # type: ignore[index]

    code, out = run(
        pipeline,
        "submit",
        "--cluster",
        c,
        "--job",
        "j1",
        "--nodes",
        "4",
        "--slice-size",
        "4",
        "--actor",
        "alice",
    )
    assert code == 0, out
    event, placed = out["events"]  # type: ignore[index]  # the placement that followed too
    assert event["type"] == "JobSubmitted" and event["actor"] == "alice"
    assert event["id"] == f"{c}/2"
    assert placed["type"] == "JobPlaced" and placed["actor"] == "policy:tas"

    code, out = run(pipeline, "cordon", "--cluster", c, "--node", "r3-n0", "--reason", "fan")
    assert code == 0
    assert out["events"][0]["type"] == "NodeCordoned"  # type: ignore[index]

    code, out = run(
        pipeline,
        "health",
        "--cluster",
        c,
        "--node",
        "r3-n1",
        "--state",
        "failed",
        "--cause",
        "XID 79",
    )
    assert code == 0
    assert out["events"][0]["type"] == "NodeFailed"  # type: ignore[index]

    code, out = run(pipeline, "repair", "--cluster", c, "--node", "r3-n1", "--note", "reseated")
    assert code == 0, out
    assert out["events"][0]["type"] == "NodeRepaired"  # type: ignore[index]

    code, out = run(pipeline, "cancel", "--cluster", c, "--job", "nope")
    assert code == 1  # rejected: printed, and the exit status says so
    assert out["events"][0]["code"] == "unknown_job"  # type: ignore[index]


def test_a_bad_cluster_file_is_refused_before_anything_is_sent(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"cluster": "x", "racks": [{"id": "r1", "nodes": 3}]}))
    result = runner.invoke(app, ["register", str(bad), "--broker", pipeline.config.broker])
    assert result.exit_code == 2
    assert "bad.yaml" in result.stderr


def test_admin_commands_from_the_command_line_check_the_admin_list_from_the_environment(
    pipeline: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = new_cluster()
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(dump_cluster_file(small_topology(c)))
    monkeypatch.setenv("RACKPLANE_POLICY__ADMINS", '["operator:alice"]')
    code, out = run(pipeline, "register", str(cluster_file), "--actor", "operator:alice")
    assert code == 0, out
    (registered,) = out["events"]  # type: ignore[index]
    assert registered["settings"]["admins"] == ["operator:alice"]

    code, out = run(pipeline, "allow-interactive", "--cluster", c, "--reason", "mine")
    assert code == 1, out  # the default actor, operator:$USER, is no admin
    (rejected,) = out["events"]  # type: ignore[index]
    assert rejected["code"] == "not_authorized"

    monkeypatch.setenv("RACKPLANE_ACTOR", "operator:alice")
    code, out = run(pipeline, "allow-interactive", "--cluster", c, "--reason", "hero run")
    assert code == 0, out
    (configured,) = out["events"]  # type: ignore[index]
    assert configured["type"] == "PolicyConfigured"
    assert configured["settings"]["allow_interactive_preemption"] is True
    assert configured["settings"]["admins"] == ["operator:alice"]  # the rest is kept
    assert (configured["actor"], configured["reason"]) == ("operator:alice", "hero run")


def test_client_commands_as_processes_of_their_own_print_everything_and_their_status(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """`rackplane submit` and `status` as an operator runs them: a process each, its output a
    file (block-buffered), ended by `rackplane.cli.leave` without the interpreter's
    finalization. The whole JSON arrives, and a rejection's exit status too."""
    c = new_cluster()
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(dump_cluster_file(small_topology(c)))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    where = ["--broker", pipeline.config.broker, "--prefix", pipeline.config.prefix, "--json"]

    def rackplane(*argv: str) -> tuple[int, Any]:
        out = tmp_path / "out"
        with out.open("w") as o:
            done = subprocess.run(
                [sys.executable, "-m", "rackplane", *argv, *where],
                stdout=o, stderr=subprocess.PIPE, env=env, text=True, timeout=120,
            )  # fmt: skip
        return done.returncode, json.loads(out.read_text() or "null")

    assert rackplane("register", str(cluster_file))[0] == 0
    code, out = rackplane("submit", "--cluster", c, "--job", "p1", "--nodes", "4")
    assert code == 0, out
    assert [e["type"] for e in out["events"]] == ["JobSubmitted", "JobPlaced"]
    code, out = rackplane("cancel", "--cluster", c, "--job", "nope")
    assert code == 1
    assert out["events"][0]["code"] == "unknown_job"
    code, out = rackplane("status", "--cluster", c)
    assert code == 0, out
    assert (out["cluster"], out["seq"], out["jobs_placed"], out["allocated"]) == (c, 4, 1, 4)


_WHAT_IS_LEFT = """
import atexit, json, sys, threading
def noting(owner, name):  # the hooks registered through owner.name from now on, by name
    names, register = [], getattr(owner, name)
    def noted(f, *args, **kwargs):
        names.append(f"{f.__module__}.{f.__qualname__}")
        return register(f, *args, **kwargs)
    setattr(owner, name, noted)
    return names
hooks = noting(atexit, "register")
threading_hooks = noting(threading, "_register_atexit")
import rackplane.cli as cli
def leave(code):
    left = {"hooks": hooks, "threading_hooks": threading_hooks,
            "threads": [t.name for t in threading.enumerate()], "code": code}
    print(json.dumps(left), file=sys.stderr)
    sys.exit(0)
cli.leave = leave
sys.argv = ["rackplane", *sys.argv[1:]]
cli.main()
"""


def test_a_client_command_leaves_nothing_for_the_interpreter_s_exit(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """What `rackplane.cli.leave` skips: a client or read command, when it returns, has no
    thread still running and no exit hook but logging's (which `leave` runs itself)."""
    c = new_cluster()
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(dump_cluster_file(small_topology(c)))
    where = ["--broker", pipeline.config.broker, "--prefix", pipeline.config.prefix]
    for argv in (
        ["register", str(cluster_file)],
        ["submit", "--cluster", c, "--job", "t1", "--nodes", "4"],
        ["jobs", "--cluster", c],
        ["rack-health", "--cluster", c, "--rack", "r1", "--state", "degraded"],
    ):
        done = subprocess.run(
            [sys.executable, "-c", _WHAT_IS_LEFT, *argv, *where],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        left = json.loads(done.stderr.splitlines()[-1])
        assert left == {
            "hooks": ["logging.shutdown"],
            "threading_hooks": [],
            "threads": ["MainThread"],
            "code": 0,
        }, (argv, done.stderr[-2000:])
