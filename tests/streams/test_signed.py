"""Signed commands through a running worker: a cluster that trusts keys takes only commands
its keys signed; the worker's policies sign with the worker's key file; the CLI signs with
the operator's (`key_file`) and trusts a new key with `keys trust`.

Runs against the suite's broker (Tansu in `make test`, Apache Kafka in `make test-kafka`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.importers import dump_cluster_file
from rackplane.keyfiles import KeyFile
from rackplane.models import (
    CommandRejected,
    CordonNode,
    Event,
    JobPlaced,
    JobSpec,
    PolicySettings,
    RegisterTopology,
    Role,
    SubmitJob,
)
from tests.conftest import BrokerUnderTest
from tests.streams.conftest import Pipeline, new_cluster, small_topology, start_pipeline

pytestmark = pytest.mark.broker
runner = CliRunner()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Key files of an admin, an operator, a stranger and the worker."""
    where = tmp_path_factory.mktemp("keys")
    out = {}
    for name, actor in (
        ("alice", "operator:alice"),
        ("bob", "user:bob"),
        ("eve", "operator:eve"),
        ("worker", "worker:w1"),
    ):
        out[name] = where / f"{name}.key"
        KeyFile.new(actor).save(out[name])
    return out


@pytest.fixture(scope="module")
def signing(
    broker: BrokerUnderTest, tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Path]
) -> Iterator[Pipeline]:
    """A worker that signs its policies' commands with the worker key."""
    tmp = tmp_path_factory.mktemp("worker")
    p = start_pipeline(broker, tmp, worker_key_file=str(keys["worker"]))
    try:
        yield p
    finally:
        p.worker.stop()


def fetch(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return bytes(r.read())


def key(keys: dict[str, Path], name: str) -> KeyFile:
    from rackplane.keyfiles import load_key

    return load_key(keys[name])


def rejection(events: list[Event], command_id: str) -> CommandRejected | None:
    found = [e for e in events if isinstance(e, CommandRejected) and e.command_id == command_id]
    return found[0] if found else None


async def registered(p: Pipeline, keys: dict[str, Path]) -> str:
    c = new_cluster()
    alice, worker = key(keys, "alice"), key(keys, "worker")
    settings = PolicySettings(
        spares_per_rack=1, keys=(alice.trusted(Role.ADMIN), worker.trusted(Role.POLICY))
    )
    command = RegisterTopology(
        id=p.command_id("reg"),
        cluster=c,
        actor=alice.actor,
        topology=small_topology(c),
        settings=settings,
    )
    await p.send(alice.sign(command))
    await p.events(c, lambda es: any(e.type == "TopologyRegistered" for e in es))
    return c


def test_the_worker_signs_its_proposals_and_unsigned_commands_are_refused(
    signing: Pipeline, keys: dict[str, Path]
) -> None:
    async def go() -> None:
        c = await registered(signing, keys)
        alice, eve = key(keys, "alice"), key(keys, "eve")
        submit = SubmitJob(
            id=signing.command_id("submit"),
            cluster=c,
            actor=alice.actor,
            job=JobSpec(id="j1", nodes=4, slice_size=4, owner=alice.actor),
        )
        unsigned = CordonNode(id=signing.command_id("cordon"), cluster=c, actor=alice.actor,
                              node="r1-n0")  # fmt: skip
        stranger = eve.sign(
            CordonNode(id=signing.command_id("cordon"), cluster=c, actor=eve.actor, node="r1-n1")
        )
        await signing.send(alice.sign(submit), unsigned, stranger)
        events = await signing.events(
            c,
            lambda es: (
                any(isinstance(e, JobPlaced) for e in es) and rejection(es, stranger.id) is not None
            ),
        )
        (placed,) = [e for e in events if isinstance(e, JobPlaced)]
        assert placed.actor == "policy:tas"  # signed by the worker's key, and taken
        refused = rejection(events, unsigned.id)
        assert refused is not None and refused.code == "unauthenticated"
        assert "is not signed" in refused.reason
        foreign = rejection(events, stranger.id)
        assert foreign is not None and foreign.code == "unauthenticated"
        assert f"key {eve.id} is not one cluster" in foreign.reason
        assert not [e for e in events if e.type == "NodeCordoned"]

    asyncio.run(go())


def run(p: Pipeline, key_file: Path, *args: str) -> tuple[int, dict[str, object] | str]:
    argv = [*args, "--broker", p.config.broker, "--prefix", p.config.prefix, "--json"]
    result = runner.invoke(app, argv, env={"RACKPLANE_KEY_FILE": str(key_file)})
    try:
        return result.exit_code, json.loads(result.stdout)
    except json.JSONDecodeError:
        return result.exit_code, result.output


def test_the_command_line_signs_with_the_key_file_and_an_admin_trusts_a_new_key(
    signing: Pipeline, keys: dict[str, Path], tmp_path: Path
) -> None:
    c = new_cluster()
    cluster_file = tmp_path / "cluster.yaml"
    doc = yaml.safe_load(dump_cluster_file(small_topology(c)))
    roles = (("alice", Role.ADMIN), ("worker", Role.POLICY))
    doc["policy"] = {"keys": [key(keys, n).trusted(r).model_dump(mode="json") for n, r in roles]}
    cluster_file.write_text(yaml.safe_dump(doc))
    code, out = run(signing, keys["bob"], "register", str(cluster_file))  # not a key it brings
    assert code == 1 and out["events"][0]["code"] == "unauthenticated"  # type: ignore[index]
    code, out = run(signing, keys["alice"], "register", str(cluster_file))
    assert code == 0, out
    (registration,) = out["events"]  # type: ignore[index]
    assert registration["type"] == "TopologyRegistered"
    assert registration["actor"] == "operator:alice"

    code, out = run(signing, keys["bob"], "cordon", "--cluster", c, "--node", "r2-n0")
    assert code == 1, out  # bob's key is not trusted yet
    assert out["events"][0]["code"] == "unauthenticated"  # type: ignore[index]

    public = tmp_path / "bob.pub.json"
    shown = runner.invoke(app, ["keys", "show", str(keys["bob"]), "--json"])
    assert shown.exit_code == 0 and "private" not in shown.stdout
    public.write_text(shown.stdout)
    code, out = run(signing, keys["bob"], "keys", "trust", str(public), "--cluster", c,
                    "--role", "admin")  # fmt: skip
    assert code == 1 and out["events"][0]["code"] == "unauthenticated"  # type: ignore[index]
    code, out = run(signing, keys["alice"], "keys", "trust", str(public), "--cluster", c,
                    "--role", "operator", "--reason", "on call")  # fmt: skip
    assert code == 0, out
    (trusted,) = out["events"]  # type: ignore[index]
    assert trusted["type"] == "PolicyConfigured" and trusted["actor"] == "operator:alice"
    assert trusted["reason"].startswith(f"trusted key {key(keys, 'bob').id} now for 'user:bob'")

    code, out = run(signing, keys["bob"], "cordon", "--cluster", c, "--node", "r2-n0")
    assert code == 0, out
    (cordoned,) = out["events"]  # type: ignore[index]
    assert cordoned["type"] == "NodeCordoned" and cordoned["actor"] == "user:bob"
    code, out = run(signing, keys["bob"], "uncordon", "--cluster", c, "--node", "r2-n0")
    assert code == 1 and out["events"][0]["code"] == "not_authorized"  # type: ignore[index]
    code, out = run(signing, keys["bob"], "keys", "trust", str(public), "--cluster", c,
                    "--role", "admin")  # fmt: skip
    assert code == 1 and out["events"][0]["code"] == "not_authorized"  # type: ignore[index]

    code, out = run(signing, keys["alice"], "keys", "revoke", key(keys, "bob").id, "--cluster", c)
    assert code == 0, out
    code, out = run(signing, keys["bob"], "cordon", "--cluster", c, "--node", "r2-n1")
    assert code == 1 and "was revoked" in out["events"][0]["reason"]  # type: ignore[index]


def test_an_actor_flag_that_is_not_the_key_files_actor_is_one_line_of_error(
    keys: dict[str, Path],
) -> None:
    result = runner.invoke(
        app,
        ["cordon", "--cluster", "c", "--node", "n", "--actor", "operator:mallory"],
        env={"RACKPLANE_KEY_FILE": str(keys["bob"])},
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: the key file {keys['bob']} signs as 'user:bob', not 'operator:mallory': drop "
        "--actor (RACKPLANE_ACTOR) or use that actor's key file"
    ]


def test_a_worker_whose_key_file_is_open_to_others_refuses_to_start_in_one_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "worker.key"
    KeyFile.new("worker:w1").save(path)
    path.chmod(0o644)
    argv = ["worker", "--broker", "kafka://127.0.0.1:9", "--worker-key-file", str(path)]
    result = runner.invoke(app, argv)  # no broker there: refused before it is asked
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {path}: others can read or change this key file (mode 644): chmod 600 it"
    ]


def test_an_event_written_to_the_log_by_anyone_but_the_controller_is_ignored_by_every_reader(
    signing: Pipeline, keys: dict[str, Path]
) -> None:
    """Issue 16: an unsigned `PolicyConfigured` making mallory admin, appended straight to the
    events topic at the cluster's next seq, used to win the next rebuild (the controller then
    wrote its own event at that seq). Now the rebuild, the controller and the projections
    pass over it; a reader that trusts nothing would see the fork it makes."""
    from dataclasses import replace

    from aiokafka import AIOKafkaProducer

    from rackplane.logtrust import LogTrust
    from rackplane.models import PolicyConfigured
    from rackplane.streams.client import Client
    from rackplane.streams.codec import encode_event
    from rackplane.streams.eventlog import EventLog, ForkDetected

    async def go() -> None:
        c = await registered(signing, keys)
        alice, worker = key(keys, "alice"), key(keys, "worker")
        events = await signing.events(c, lambda es: bool(es))
        last = events[-1]
        assert last.signature is not None and last.signature.key == worker.id
        admins = PolicySettings(spares_per_rack=1, admins=("operator:mallory",))
        forged = PolicyConfigured(
            id=f"{c}-forged", cluster=c, seq=last.seq + 1, at=last.at, actor=alice.actor,
            settings=admins, reason="forged",
        )  # fmt: skip
        producer = AIOKafkaProducer(**signing.config.kafka_options())
        await producer.start()
        try:
            await producer.send_and_wait(
                signing.config.topic("events"), encode_event(forged), key=c.encode()
            )
        finally:
            await producer.stop()
        cordon = alice.sign(
            CordonNode(id=signing.command_id("cordon"), cluster=c, actor=alice.actor, node="r1-n0")
        )
        await signing.send(cordon)
        got = await signing.events(c, lambda es: any(e.type == "NodeCordoned" for e in es))
        (cordoned,) = [e for e in got if e.type == "NodeCordoned"]
        assert cordoned.seq == forged.seq  # the controller never folded the forged event

        trusting = EventLog(
            signing.config.kafka_options(), signing.config.topic("events"),
            trust=LogTrust.of([worker.public_key]),
        )  # fmt: skip
        naive = EventLog(signing.config.kafka_options(), signing.config.topic("events"))
        try:
            rebuilt = await trusting.rebuild(c)
            assert rebuilt.state.settings.admins is None
            assert rebuilt.state.seq == cordoned.seq
            assert "r1-n0" in {n.id for n in rebuilt.state.nodes.values() if n.cordoned}
            assert [e.id for e in rebuilt.events if e.seq == forged.seq] == [cordoned.id]
            with pytest.raises(ForkDetected):  # what the forged record does to a naive reader
                await naive.rebuild(c)
        finally:
            await trusting.stop()
            await naive.stop()
        # What the operator reads (`rackplane events`, the console) with the log keys set.
        seen = replace(signing.config, log_keys=(worker.public_key,))
        async with Client(seen) as client:
            read = []
            async for e in client.events():
                if e.cluster == c:
                    read.append(e)
                    if e.id == cordoned.id:
                        break
        assert forged.id not in {e.id for e in read} and client.forged == 1
        # The worker's agents were delivered the record and passed over it, and say so.
        url = f"http://127.0.0.1:{signing.worker.web_port}/metrics"
        wanted = [
            'rackplane_events_forged_total{reader="projections"} 1.0',
            'rackplane_events_forged_total{reader="tas"} 1.0',
        ]  # each agent reads at its own pace: wait for both, not for the first
        for _ in range(100):
            metrics = (await asyncio.to_thread(fetch, url)).decode()
            if all(w in metrics for w in wanted):
                break
            await asyncio.sleep(0.2)
        for w in wanted:
            assert w in metrics

    asyncio.run(go())
