"""deploy/compose and the Dockerfile, checked statically (no Docker engine runs here)."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.config import load_settings
from rackplane.importers import load_cluster_file
from tests.deploy._files import (
    COMPOSE,
    ROOT,
    compose,
    compose_errors,
    pod_specs,
)


def cli_commands() -> set[str]:
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    names |= {g.name for g in app.registered_groups if g.name}
    return names


def cli_errors(args: list[str]) -> str | None:
    """Parse a command line as `rackplane` would, down to the leaf command, without running it
    (`--help` is eager: it answers once every subcommand and option has parsed): None when
    they all exist, else the CLI's complaint."""
    result = CliRunner().invoke(app, [*args, "--help"])
    return None if result.exit_code == 0 else result.output


def test_the_compose_file_follows_the_compose_specification() -> None:
    assert compose_errors(compose()) == []


def test_the_schema_check_catches_a_misspelled_key() -> None:
    broken = copy.deepcopy(compose())
    broken["services"]["worker"]["comand"] = broken["services"]["worker"].pop("command")
    errors = compose_errors(broken)
    assert errors and "comand" in " ".join(errors)


def test_compose_runs_a_three_broker_kraft_kafka_cluster_with_tls_sasl_and_acls() -> None:
    services = compose()["services"]
    brokers = {n: s for n, s in services.items() if re.fullmatch(r"kafka-\d", n)}
    assert len(brokers) == 3
    ids = sorted(s["environment"]["NODE_ID"] for s in brokers.values())
    assert ids == ["1", "2", "3"]
    kafka = COMPOSE.parent / "kafka"
    template = (kafka / "server.properties.template").read_text()
    start = (kafka / "start.sh").read_text()
    assert "process.roles=broker,controller" in template  # KRaft: no ZooKeeper
    assert "listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL" in template
    assert "allow.everyone.if.no.acl.found=false" in template
    voters = re.search(r"QUORUM_VOTERS\}\|([^|]+)\|", start)
    assert voters and sorted(v.split("@")[0] for v in voters.group(1).split(",")) == ids
    assert "s|\\${MIN_ISR}|2|g" in start
    for name, s in brokers.items():
        assert s["command"] == ["/bin/sh", "/etc/kafka-compose/start.sh"], name
        for user in ("ADMIN", "WORKER", "CLIENT", "EXPORTER"):  # SCRAM users made at format
            assert s["environment"][f"KAFKA_{user}_PASSWORD"].startswith(
                f"${{KAFKA_{user}_PASSWORD:?"
            )
    acls = services["kafka-acls"]
    assert acls["command"] == ["/bin/sh", "/etc/kafka-compose/acls.sh"]
    assert set(acls["depends_on"]) == set(brokers)


def test_each_rackplane_service_connects_as_its_own_kafka_user_after_the_acls() -> None:
    services = compose()["services"]
    users = {"worker": "worker", "exporter": "exporter", "register": "client", "console": "client"}
    for name, user in users.items():
        env = services[name]["environment"]
        assert env["RACKPLANE_KAFKA_SASL_USERNAME"] == user, name
        password = env["RACKPLANE_KAFKA_SASL_PASSWORD"]
        assert password.startswith(f"${{KAFKA_{user.upper()}_PASSWORD:?"), name
        assert services[name]["depends_on"] == {
            "kafka-acls": {"condition": "service_completed_successfully"}
        }, name


def test_compose_workers_exporter_and_console_run_rackplane_commands() -> None:
    services = compose()["services"]
    known = cli_commands()
    for name in ("worker", "exporter", "register", "console"):
        command = services[name]["command"]
        assert command[0] in known, f"{name}: rackplane has no command {command[0]!r}"
        assert cli_errors(command) is None, f"{name}: {cli_errors(command)}"
    assert services["worker"]["deploy"]["replicas"] >= 2
    exporter = services["exporter"]["command"]
    assert exporter[:3] == ["exporter", "dcgm", "--scrape"]
    assert re.fullmatch(r"http://\S+:9400/metrics", exporter[3])
    console = services["console"]
    assert console["command"][0] == "tui"
    assert console["profiles"] == ["tools"]  # one-off: `docker compose run --rm console`
    assert console["stdin_open"] and console["tty"]


def test_the_compose_config_and_cluster_files_load(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = compose()
    files = {name: COMPOSE.parent / c["file"] for name, c in doc["configs"].items()}
    for path in files.values():
        assert path.is_file(), path
    for name in list(os.environ):
        if name.startswith("RACKPLANE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("RACKPLANE_KAFKA_SASL_USERNAME", "worker")  # what compose.yaml sets
    monkeypatch.setenv("RACKPLANE_KAFKA_SASL_PASSWORD", "what-compose-interpolates")
    settings = load_settings(files["rackplane-config"]).settings
    assert settings.stream_config().security.protocol == "SASL_SSL"
    assert settings.stream_config().security.ssl_cafile == "/etc/kafka-certs/ca.crt"
    assert "RACKPLANE_WEB_TOKEN" in str(settings.stream_config().web_problem())
    worker_env = doc["services"]["worker"]["environment"]
    assert worker_env["RACKPLANE_WEB_TOKEN"].startswith("${RACKPLANE_WEB_TOKEN:?")
    monkeypatch.setenv("RACKPLANE_WEB_TOKEN", "what-compose-interpolates-from-env")
    settings = load_settings(files["rackplane-config"]).settings
    assert settings.stream_config().web_problem() is None
    assert settings.replication == 3
    assert len(settings.stream_config().bootstrap.split(",")) == 3
    cluster = load_cluster_file(files["cluster-file"])
    assert cluster.policy.admins, "a deployed cluster keeps an admin list"
    assert settings.cluster_file == Path("/etc/rackplane/cluster.yaml")


DOCKERFILE = (ROOT / "Dockerfile").read_text()


def stages() -> list[list[str]]:
    """The Dockerfile's instructions per stage (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    out: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(line)
    return out


def test_the_image_is_built_in_stages_and_runs_as_an_unprivileged_user() -> None:
    build, runtime = stages()
    assert build[0].endswith(" AS build") and runtime[0].endswith(" AS runtime")
    user = [i.split()[1] for i in runtime if i.startswith("USER ")]
    assert user and user[-1].split(":")[0] not in ("0", "root")
    assert any(i.startswith("COPY --from=build ") for i in runtime)
    assert not any(i.startswith(("RUN pip", "RUN apt")) for i in runtime), "no installs at runtime"
    assert '["rackplane"]' in " ".join(runtime)


def test_the_image_installs_runtime_dependencies_only_from_files_that_exist() -> None:
    build = stages()[0]
    assert not any("[dev]" in i for i in build)
    for instruction in (i for i in build if i.startswith("COPY ")):
        *sources, _dest = instruction.split()[1:]
        for source in sources:
            assert (ROOT / source).exists(), source
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"tests", ".venv", ".git"} <= set(ignored)


def test_the_pods_run_as_the_images_user() -> None:
    uid = re.search(r"^USER (\d+)", DOCKERFILE, re.M)
    assert uid is not None
    for name, spec in pod_specs():
        assert spec["securityContext"]["runAsUser"] == int(uid.group(1)), name


def test_a_kafka_nodes_start_script_fills_in_every_placeholder_and_adds_the_users(
    tmp_path: Path,
) -> None:
    """deploy/compose/kafka/start.sh with stand-ins for the image's kafka-storage.sh and
    kafka-server-start.sh (they record their arguments): node 2's server.properties is whole,
    the storage is formatted with the four SCRAM users, and the broker runs that file."""
    import subprocess

    bin_dir = tmp_path / "kafka" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("kafka-storage.sh", "kafka-server-start.sh"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/{tool}.args"\n')
        script.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"], "KAFKA_HOME": str(tmp_path / "kafka"),
        "KAFKA_COMPOSE_DIR": str(COMPOSE.parent / "kafka"), "KAFKA_RUN_DIR": str(tmp_path),
        "NODE_ID": "2", "CLUSTER_ID": "abc", "KAFKA_ADMIN_PASSWORD": "pa",
        "KAFKA_WORKER_PASSWORD": "pw", "KAFKA_CLIENT_PASSWORD": "pc",
        "KAFKA_EXPORTER_PASSWORD": "pe",
    }  # fmt: skip
    done = subprocess.run(
        ["sh", str(COMPOSE.parent / "kafka" / "start.sh")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    props = (tmp_path / "server.properties").read_text()
    assert "${" not in props
    assert "node.id=2\n" in props and "advertised.listeners=CLIENT://kafka-2:9094," in props
    assert "controller.quorum.voters=1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093\n" in props
    assert "listeners=CLIENT://:9094,INTERNAL://:9092,CONTROLLER://:9093\n" in props
    fmt = (tmp_path / "kafka-storage.sh.args").read_text().splitlines()
    assert fmt[:6] == [
        "format",
        "--ignore-formatted",
        "-t",
        "abc",
        "-c",
        f"{tmp_path}/server.properties",
    ]
    users = [fmt[i + 1] for i, a in enumerate(fmt) if a == "--add-scram"]
    assert users == [f"SCRAM-SHA-512=[name={u},password=p{u[0]}]"
                     for u in ("admin", "worker", "client", "exporter")]  # fmt: skip
    started = (tmp_path / "kafka-server-start.sh.args").read_text().splitlines()
    assert started == [f"{tmp_path}/server.properties"]
    assert 'username="admin" password="pa";' in (tmp_path / "admin.properties").read_text()
    missing = subprocess.run(
        ["sh", str(COMPOSE.parent / "kafka" / "start.sh")],
        env={k: v for k, v in env.items() if k != "KAFKA_CLIENT_PASSWORD"}, capture_output=True,
        text=True,
    )  # fmt: skip
    assert missing.returncode != 0 and "KAFKA_CLIENT_PASSWORD" in missing.stderr
