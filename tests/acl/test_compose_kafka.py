"""The compose stack's Kafka security, run for real without Docker: its own
`deploy/compose/kafka/server.properties.template` on one node on 127.0.0.1, with the
certificates `deploy/compose/init.sh` makes and the ACLs of `deploy/compose/kafka/acls.sh`
(applied with Kafka's `AclCommand`, as the stack's one-off `kafka-acls` service runs them).

Shown: TLS and SCRAM on the client listener work for a worker, a client and an exporter,
each as itself; the client listener refuses a connection without SASL; the controller and
broker-to-broker listeners refuse a TLS client without the brokers' certificate; each
component is refused outside its ACLs.
"""

from __future__ import annotations

import asyncio
import shlex
import socket
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from rackplane.streams.acls import command_lines
from rackplane.streams.config import KafkaSecurity, StreamConfig
from rackplane.streams.process import WorkerProcess
from rackplane.streams.topics import ensure_topics
from tests.acl._clients import pipeline, write_marker
from tests.faults._kafka import kafka_server
from tests.streams.conftest import new_cluster, small_topology

pytestmark = pytest.mark.acl

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose"
PREFIX = "rackplane"
"""The compose stack's topic prefix and app id (deploy/compose/rackplane.yaml)."""


@dataclass
class ComposeKafka:
    server: Any
    certs: Path
    users: dict[str, str]
    admin_config: Path

    @property
    def client_port(self) -> int:
        return int(self.server.sasl_port)

    def config(self, user: str, **kw: Any) -> StreamConfig:
        security = KafkaSecurity(
            protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=user,
            sasl_password=self.users[user],
            ssl_cafile=str(self.certs / "ca.crt"),
        )
        return StreamConfig(
            broker=f"kafka://127.0.0.1:{self.client_port}", prefix=PREFIX, app_id=PREFIX,
            partitions=2, security=security, **kw,
        )  # fmt: skip


def render(certs: Path) -> Any:
    template = (COMPOSE / "kafka" / "server.properties.template").read_text()

    def make(port: int, controller_port: int, sasl_port: int, data: Path) -> str:
        values = {
            "NODE_ID": "1", "QUORUM_VOTERS": f"1@127.0.0.1:{controller_port}",
            "BIND": "127.0.0.1", "HOST": "127.0.0.1", "CLIENT_PORT": str(sasl_port),
            "INTERNAL_PORT": str(port), "CONTROLLER_PORT": str(controller_port),
            "CERTS": str(certs), "DATA": str(data), "REPLICATION": "1", "MIN_ISR": "1",
        }  # fmt: skip
        text = template
        for name, value in values.items():
            text = text.replace("${" + name + "}", value)
        assert "${" not in text, "a placeholder start.sh fills in is not filled in here"
        return text

    return make


@pytest.fixture(scope="module")
def compose_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeKafka]:
    home = tmp_path_factory.mktemp("compose")
    subprocess.run(["sh", str(COMPOSE / "init.sh"), str(home)], check=True, capture_output=True)
    certs = home / "certs"
    ks = kafka_server()
    server = ks.KafkaServer(ks.fetch_jars(), render=render(certs))
    server.start()
    admin_config = home / "admin.properties"
    admin_config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{ks.ACL_USERS["admin"]}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs / 'ca.crt'}\n"
    )
    try:
        yield ComposeKafka(server, certs, dict(ks.ACL_USERS), admin_config)
    finally:
        server.stop()


def acls_sh() -> list[list[str]]:
    """The argument lists of `deploy/compose/kafka/acls.sh`'s kafka-acls.sh lines."""
    out = []
    for line in (COMPOSE / "kafka" / "acls.sh").read_text().splitlines():
        if line.startswith("kafka-acls.sh "):
            out.append(shlex.split(line)[1:])
    return out


def test_acls_sh_is_what_rackplane_config_acls_prints_for_the_stack() -> None:
    want = [
        shlex.split(line)[1:] for line in command_lines(PREFIX, PREFIX, bootstrap="kafka-1:9094")
    ]
    got = [[w.replace("$ADMIN_CONFIG", "admin.properties") for w in a] for a in acls_sh()]
    assert got == want, "run `rackplane config acls --bootstrap kafka-1:9094` into acls.sh"


@pytest.fixture(scope="module")
def with_acls(compose_kafka: ComposeKafka) -> ComposeKafka:
    ks = kafka_server()
    bootstrap = f"127.0.0.1:{compose_kafka.client_port}"

    def apply(args: list[str]) -> None:
        args = [
            {"kafka-1:9094": bootstrap, "$ADMIN_CONFIG": str(compose_kafka.admin_config)}.get(w, w)
            for w in args
        ]
        command = ["java", "-cp", str(ks.fetch_jars() / "*"), "org.apache.kafka.tools.AclCommand"]
        done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{args}:\n{done.stdout}{done.stderr}"

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(apply, acls_sh()))
    asyncio.run(ensure_topics(compose_kafka.config("worker")))
    return compose_kafka


def tls_verdict(port: int, context: ssl.SSLContext) -> str:
    """'open' when a TLS connection to `port` is made and stays up; 'refused' when the
    handshake fails or the broker closes it at once."""
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=3) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.settimeout(2)  # TLS 1.3: a refused certificate shows as an alert on reading
            return "refused" if not tls.recv(1) else "open"
    except TimeoutError:
        return "open"  # up and waiting for a request
    except (ssl.SSLError, OSError):
        return "refused"


def test_the_internal_and_controller_listeners_take_only_the_brokers_certificate(
    compose_kafka: ComposeKafka,
) -> None:
    anyone = ssl.create_default_context(cafile=str(compose_kafka.certs / "ca.crt"))
    broker = ssl.create_default_context(cafile=str(compose_kafka.certs / "ca.crt"))
    broker.load_cert_chain(str(compose_kafka.certs / "broker.pem"))
    internal, controller, _ = compose_kafka.server._ports
    assert [tls_verdict(p, anyone) for p in (internal, controller)] == ["refused", "refused"]
    assert [tls_verdict(p, broker) for p in (internal, controller)] == ["open", "open"]


def test_the_client_listener_takes_no_connection_without_sasl(compose_kafka: ComposeKafka) -> None:
    plain = replace(
        compose_kafka.config("client"),
        security=KafkaSecurity(protocol="SSL", ssl_cafile=str(compose_kafka.certs / "ca.crt")),
    )

    async def send() -> None:
        producer = AIOKafkaProducer(**plain.kafka_options(), request_timeout_ms=5_000)
        try:
            await asyncio.wait_for(producer.start(), 15)
        finally:
            await producer.stop()

    with pytest.raises((KafkaError, TimeoutError, OSError)):
        asyncio.run(send())


def test_over_tls_each_component_writes_only_its_topics(with_acls: ComposeKafka) -> None:
    async def matrix() -> dict[tuple[str, str], str]:
        return {
            (u, t): await write_marker(with_acls.config(u), t)
            for u, t in (("worker", "events"), ("client", "commands"), ("client", "events"),
                         ("exporter", "telemetry"), ("exporter", "commands"))
        }  # fmt: skip

    assert asyncio.run(matrix()) == {
        ("worker", "events"): "ok", ("client", "commands"): "ok", ("client", "events"): "refused",
        ("exporter", "telemetry"): "ok", ("exporter", "commands"): "refused",
    }  # fmt: skip


def test_the_stack_runs_over_tls_and_scram_each_component_as_itself(
    with_acls: ComposeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "RACKPLANE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "RACKPLANE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "RACKPLANE_KAFKA_SASL_USERNAME": "worker",
        "RACKPLANE_KAFKA_SASL_PASSWORD": with_acls.users["worker"],
        "RACKPLANE_KAFKA_SSL_CAFILE": str(with_acls.certs / "ca.crt"),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cluster = f"{new_cluster()}-{uuid.uuid4().hex[:4]}"
    client, exporter = with_acls.config("client"), with_acls.config("exporter")
    with WorkerProcess(with_acls.config("worker"), data_dir=tmp_path) as worker:
        try:
            registered, failed = asyncio.run(pipeline(client, exporter, cluster))
        except Exception:
            print(worker.log_tail(80))
            raise
    assert [e.type for e in registered] == ["TopologyRegistered"]
    first = small_topology(cluster).racks[0].nodes[0]
    assert (failed.node, failed.actor) == (first, "gpu_manager")
