"""The broker enforces who writes what (issue 16): Apache Kafka with SASL/SCRAM and an
authorizer, the ACLs of `rackplane.streams.acls` applied with Kafka's own `kafka-acls`
(`AclCommand`), exactly as docs/OPERATIONS.md gives them.

Shown: a worker, a client and an exporter, each with its own principal, run the pipeline
(a registration, a command, telemetry that fails a node); and each principal is refused
every write outside its part: the client cannot append to the log or the snapshots, the
exporter cannot send commands, nobody but the worker writes events, and neither the client
nor the exporter can create topics.

Runs in `make test-acl` (`scripts/kafka/kafka_server.py run --acl`), part of `.ci/run`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAuthorizationFailedError

from rackplane.models import (
    TopologyRegistered,
)
from rackplane.streams.acls import acls
from rackplane.streams.config import KafkaSecurity, StreamConfig
from rackplane.streams.process import WorkerProcess
from rackplane.streams.topics import ensure_topics
from tests.acl._clients import pipeline, write_marker
from tests.streams.conftest import new_cluster, small_topology

pytestmark = pytest.mark.acl

TOPICS = ("commands", "events", "rejected", "snapshots", "telemetry")
MAY_WRITE = {
    "worker": {"commands", "events", "rejected", "snapshots"},
    "client": {"commands"},
    "exporter": {"telemetry"},
}


def _needed(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run through `make test-acl` (scripts/kafka)")
    return value


@dataclass(frozen=True)
class AclBroker:
    url: str
    users: dict[str, str]
    jars: Path

    @property
    def bootstrap(self) -> str:
        return self.url.removeprefix("kafka://")

    def config(self, user: str, prefix: str) -> StreamConfig:
        security = KafkaSecurity(
            protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=user,
            sasl_password=self.users[user],
        )
        return StreamConfig(
            broker=self.url, prefix=prefix, app_id=prefix, partitions=2, security=security
        )

    def env(self, user: str) -> dict[str, str]:
        """The RACKPLANE_* variables a process of `user` runs with."""
        return {
            "RACKPLANE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "RACKPLANE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "RACKPLANE_KAFKA_SASL_USERNAME": user,
            "RACKPLANE_KAFKA_SASL_PASSWORD": self.users[user],
        }

    def kafka_acls(self, args: list[str], admin_config: Path) -> None:
        """Run Kafka's `kafka-acls` (`AclCommand`) as the admin."""
        command = [
            "java", "-cp", str(self.jars / "*"), "org.apache.kafka.tools.AclCommand",
            "--bootstrap-server", self.bootstrap, "--command-config", str(admin_config), *args,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"kafka-acls {' '.join(args)}:\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
def acl_broker() -> AclBroker:
    return AclBroker(
        url=_needed("RACKPLANE_TEST_ACL_BROKER"),
        users=json.loads(_needed("RACKPLANE_TEST_ACL_USERS")),
        jars=Path(_needed("RACKPLANE_TEST_KAFKA_JARS")),
    )


@pytest.fixture(scope="module")
def prefix(acl_broker: AclBroker, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A topic prefix (and app id) with the deployment's ACLs, its topics made by the worker."""
    name = f"acl{uuid.uuid4().hex[:8]}"
    admin_config = tmp_path_factory.mktemp("acl") / "admin.properties"
    admin_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{acl_broker.users["admin"]}";\n'
    )
    with ThreadPoolExecutor(max_workers=4) as pool:  # one JVM per ACL: 4 at a time
        list(pool.map(lambda a: acl_broker.kafka_acls(a.args(), admin_config), acls(name, name)))
    asyncio.run(ensure_topics(acl_broker.config("worker", name)))  # the worker's Create ACL
    return name


async def _read(config: StreamConfig, topic: str) -> str:
    """Read from the start of `topic`'s partition 0, which holds a record, as `config`'s
    user: 'ok' when it comes back; 'refused' when the broker says so (a topic it may describe)
    or the topic stays hidden (one it may not: aiokafka then only logs and waits)."""
    consumer = AIOKafkaConsumer(**config.kafka_options(), group_id=None, enable_auto_commit=False)
    await consumer.start()
    tp = TopicPartition(config.topic(topic), 0)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        for _ in range(6):
            if (await consumer.getmany(tp, timeout_ms=500)).get(tp):
                return "ok"
    except TopicAuthorizationFailedError:
        return "refused"
    finally:
        await consumer.stop()
    return "refused"


def test_each_principal_may_write_its_own_topics_and_is_refused_everywhere_else(
    acl_broker: AclBroker, prefix: str
) -> None:
    async def matrix() -> dict[tuple[str, str], str]:
        out = {}
        for user in MAY_WRITE:
            for topic in TOPICS:
                out[(user, topic)] = await write_marker(acl_broker.config(user, prefix), topic)
        return out

    got = asyncio.run(matrix())
    want = {
        (user, topic): "ok" if topic in MAY_WRITE[user] else "refused"
        for user in MAY_WRITE
        for topic in TOPICS
    }
    assert got == want


def test_the_client_reads_the_log_and_the_exporter_reads_nothing(
    acl_broker: AclBroker, prefix: str
) -> None:
    async def reads() -> dict[tuple[str, str], str]:
        for topic in ("events", "rejected", "commands"):  # something to read
            assert await write_marker(acl_broker.config("worker", prefix), topic) == "ok"
        return {
            (user, topic): await _read(acl_broker.config(user, prefix), topic)
            for user in ("client", "exporter")
            for topic in ("events", "rejected", "commands")
        }

    assert asyncio.run(reads()) == {
        ("client", "events"): "ok", ("client", "rejected"): "ok",
        ("client", "commands"): "refused",
        ("exporter", "events"): "refused", ("exporter", "rejected"): "refused",
        ("exporter", "commands"): "refused",
    }  # fmt: skip


def test_only_the_worker_creates_topics(acl_broker: AclBroker, prefix: str) -> None:
    async def create(user: str) -> Any:
        admin = AIOKafkaAdminClient(**acl_broker.config(user, prefix).kafka_options())
        await admin.start()
        try:
            response = await admin.create_topics(
                [NewTopic(f"{prefix}.extra-{user}", num_partitions=1, replication_factor=1)]
            )
        finally:
            await admin.close()
        return {t[0]: t[1] for t in response.topic_errors}

    assert asyncio.run(create("client")) == {f"{prefix}.extra-client": 29}  # not authorized
    assert asyncio.run(create("exporter")) == {f"{prefix}.extra-exporter": 29}
    assert asyncio.run(create("worker")) == {f"{prefix}.extra-worker": 0}


def test_a_worker_a_client_and_an_exporter_run_the_pipeline_each_as_itself(
    acl_broker: AclBroker, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ACL set is enough: the worker (Faust's group and changelogs, the telemetry and
    snapshot readers, the controller) decides the client's registration, and the GPU Manager
    fails a node on the exporter's telemetry."""
    for k, v in acl_broker.env("worker").items():
        monkeypatch.setenv(k, v)  # the worker subprocess's credentials
    worker_config = replace(acl_broker.config("worker", prefix), checkpoint_every=5)
    cluster = new_cluster()
    client, exporter = (acl_broker.config(u, prefix) for u in ("client", "exporter"))
    with WorkerProcess(worker_config, data_dir=tmp_path) as worker:
        try:
            registered, failed = asyncio.run(pipeline(client, exporter, cluster))
            seen = asyncio.run(_live_health(client, cluster, failed.node))
        except Exception:
            print(worker.log_tail(80))
            raise
        denied = [line for line in worker.log_tail(400).splitlines() if "uthoriz" in line]
    assert [type(e) for e in registered] == [TopologyRegistered]
    first = small_topology(cluster).racks[0].nodes[0]
    assert (failed.node, failed.actor) == (first, "gpu_manager")
    assert seen == "failed"  # the client's read commands see it: read-only credentials do
    assert denied == []


async def _live_health(config: StreamConfig, cluster: str, node: str) -> str:
    """The node's health as `rackplane status|rack` read it (`LiveLog`), as `config`'s user."""
    from rackplane.streams.live import LiveLog

    async with LiveLog(config) as live:
        view = await live.cluster(cluster)
    assert view is not None
    return str(view.state.nodes[node].health.value)
