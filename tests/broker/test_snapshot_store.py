"""The snapshot store on a real broker: checkpoints saved and loaded, chunked, cut off half
way, corrupted, and (on Apache Kafka) compacted.

Runs against the embedded Tansu (`make test`) and Apache Kafka 4.x (`make test-kafka`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from rackplane.keyfiles import KeyFile
from rackplane.logtrust import LogTrust
from rackplane.models import CordonNode, PolicySettings, RegisterTopology, SubmitJob
from rackplane.projections import ClusterState, SeenCommands, initial_state
from rackplane.projections.snapshot import encode_state
from rackplane.streams._snapshot_records import (
    CheckpointRecord,
    checkpoint_key,
    checkpoint_value,
    chunks,
    read_checkpoint,
)
from rackplane.streams.eventlog import is_marker
from rackplane.streams.snapshots import (
    Checkpoint,
    Snapshot,
    SnapshotStore,
    SnapshotTopicError,
    ensure_snapshots_topic,
    snapshot_topic_configs,
)
from tests.builders import Harness, cmd, job, rack, topology
from tests.conftest import BrokerUnderTest

pytestmark = pytest.mark.broker

SMALL_MESSAGES = 8_192
"""The tests' `max.message.bytes`: a state with a few thousand command ids takes chunks."""
PARTITIONS = 2

TopicMaker = Callable[..., Awaitable[str]]
StoreMaker = Callable[..., Awaitable[SnapshotStore]]


@pytest.fixture
async def snapshots_topic(broker: BrokerUnderTest) -> TopicMaker:
    """`await snapshots_topic()`: a new snapshots topic made by `ensure_snapshots_topic`."""

    async def make(max_message_bytes: int = SMALL_MESSAGES) -> str:
        name = f"rackplane.test.snapshots.{uuid.uuid4().hex[:12]}"
        created = await ensure_snapshots_topic(
            {"bootstrap_servers": broker.bootstrap},
            name,
            partitions=PARTITIONS,
            replication=1,
            max_message_bytes=max_message_bytes,
        )
        assert created
        return name

    return make


@pytest.fixture
async def new_store(broker: BrokerUnderTest) -> AsyncIterator[StoreMaker]:
    """`await new_store(topic)`: a started store, stopped at teardown."""
    started: list[SnapshotStore] = []

    async def make(
        topic: str, max_message_bytes: int = SMALL_MESSAGES, **signing: Any
    ) -> SnapshotStore:
        store = SnapshotStore(
            {"bootstrap_servers": broker.bootstrap},
            topic,
            max_message_bytes=max_message_bytes,
            **signing,
        )
        await store.start()
        started.append(store)
        return store

    try:
        yield make
    finally:
        for store in started:
            await store.stop()


def cluster_state(name: str, *, commands: int = 3, ids: int = 0) -> ClusterState:
    """A small cluster after `commands` commands, with `ids` more command ids remembered."""
    h = Harness(initial_state(name))
    shape = topology(rack("r01", 6), rack("r02", 6), cluster=name)
    h.given(cmd(RegisterTopology, cluster=name, topology=shape, settings=PolicySettings()))
    for i in range(commands):
        if i % 2:
            h.given(cmd(CordonNode, cluster=name, node=f"r02-n{i % 6 + 1:02d}"))
        else:
            h.given(cmd(SubmitJob, cluster=name, job=job(f"{name}-j{i}", 2, slice_size=2)))
    if ids:
        rng = random.Random(name)
        extra = {f"cli-{rng.getrandbits(64):016x}": h.state.seq + i for i in range(ids)}
        seen = SeenCommands(h.state.seen.recent.update(extra), h.state.seen.older)
        h.state = replace(h.state, seen=seen)
    return h.state


def checkpoint(partition: int, covers: int, *states: ClusterState) -> Checkpoint:
    return Checkpoint(
        partition, covers, {s.cluster: Snapshot(s.cluster, s, events_offset=covers) for s in states}
    )


async def records_of(broker: BrokerUnderTest, topic: str, partition: int) -> list[Any]:
    """Every record of a partition up to a marker written now (markers left out)."""
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        end = await producer.send_and_wait(
            topic,
            key=b"marker/t",
            value=b"",
            partition=partition,
            headers=[("rackplane-marker", b"t")],
        )
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=1 << 21,
    )
    await consumer.start()
    tp = TopicPartition(topic, partition)
    out: list[Any] = []
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            batch = (await consumer.getmany(tp, timeout_ms=200)).get(tp, [])
            for r in batch:
                if r.offset >= end.offset:
                    return out
                if not is_marker(r.headers):
                    out.append(r)
        pytest.fail(f"did not reach the marker at {end.offset}")
    finally:
        await consumer.stop()


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The store's log records (aiokafka warns of leader elections on a new topic)."""
    return [r for r in caplog.records if r.name == "rackplane.snapshots"]


def chunk_records(records: list[Any], cluster: str) -> list[Any]:
    return [
        r for r in records if r.value and (r.key or b"").startswith(f"chunk/{cluster}/".encode())
    ]


def checkpoint_records(records: list[Any]) -> list[tuple[int, CheckpointRecord]]:
    return [
        (r.offset, read_checkpoint(r.value))
        for r in records
        if r.value and (r.key or b"").startswith(b"checkpoint/")
    ]


# -- round trips --------------------------------------------------------------------------


async def test_a_saved_checkpoint_loads_back_equal_on_its_partition(
    snapshots_topic: TopicMaker, new_store: StoreMaker, broker: BrokerUnderTest
) -> None:
    topic = await snapshots_topic()
    a, b = cluster_state("c-ams"), cluster_state("c-fra", commands=6)
    await (await new_store(topic)).save(checkpoint(1, 40, a, b))

    loaded = await (await new_store(topic)).load(1)

    assert loaded == checkpoint(1, 40, a, b)
    assert await (await new_store(topic)).load(0) is None  # the other partition has nothing
    assert {r.partition for r in await records_of(broker, topic, 1)} == {1}


async def test_a_snapshot_larger_than_one_message_is_cut_into_chunks_within_the_limit(
    snapshots_topic: TopicMaker, new_store: StoreMaker, broker: BrokerUnderTest
) -> None:
    topic = await snapshots_topic()
    big = cluster_state("c-big", ids=4_000)
    size = len(encode_state(big))
    assert size > 3 * SMALL_MESSAGES

    await (await new_store(topic)).save(checkpoint(0, 7, big))
    loaded = await (await new_store(topic)).load(0)

    assert loaded is not None and loaded.snapshots["c-big"].state == big
    parts = chunk_records(await records_of(broker, topic, 0), "c-big")
    assert len(parts) >= 4
    # Apache Kafka refuses a batch over the topic's max.message.bytes: there, the save itself
    # says the chunks fit; here, their sizes do.
    assert all(len(r.key) + len(r.value) + 100 < SMALL_MESSAGES for r in parts)


async def test_only_the_snapshots_that_changed_are_written_again(
    snapshots_topic: TopicMaker, new_store: StoreMaker, broker: BrokerUnderTest
) -> None:
    topic = await snapshots_topic()
    a1, b = cluster_state("c-a", commands=2), cluster_state("c-b", ids=2_000)
    a2 = cluster_state("c-a", commands=5)
    store = await new_store(topic)
    await store.save(checkpoint(0, 10, a1, b))
    first = len(chunk_records(await records_of(broker, topic, 0), "c-b"))

    await store.save(
        Checkpoint(0, 20, {"c-a": Snapshot("c-a", a2, 20), "c-b": Snapshot("c-b", b, 10)})
    )

    records = await records_of(broker, topic, 0)
    assert len(chunk_records(records, "c-b")) == first  # b's chunks are not written twice
    loaded = await (await new_store(topic)).load(0)
    assert loaded == Checkpoint(
        0, 20, {"c-a": Snapshot("c-a", a2, 20), "c-b": Snapshot("c-b", b, 10)}
    )


async def test_a_store_that_did_not_load_continues_the_chain_of_checkpoints(
    snapshots_topic: TopicMaker, new_store: StoreMaker, broker: BrokerUnderTest
) -> None:
    topic = await snapshots_topic()
    await (await new_store(topic)).save(checkpoint(0, 5, cluster_state("c-a", commands=1)))
    await (await new_store(topic)).save(checkpoint(0, 9, cluster_state("c-a", commands=4)))

    [(first, one), (_, two)] = checkpoint_records(await records_of(broker, topic, 0))
    assert (one.save, two.save, two.previous) == (0, 1, first)
    assert checkpoint_key(0, one.save) != checkpoint_key(0, two.save)  # both survive compaction


# -- saves cut off, chunks corrupted ------------------------------------------------------


async def test_a_save_cut_off_before_its_checkpoint_loads_the_previous_checkpoint(
    snapshots_topic: TopicMaker,
    new_store: StoreMaker,
    broker: BrokerUnderTest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await snapshots_topic()
    old = cluster_state("c-lhr", commands=2, ids=1_000)
    await (await new_store(topic)).save(checkpoint(0, 30, old))
    newer = cluster_state("c-lhr", commands=7, ids=1_500)
    data = encode_state(newer)
    digest = hashlib.sha256(data).hexdigest()
    parts = chunks("c-lhr", newer.seq, digest, data, SMALL_MESSAGES)
    assert len(parts) > 2
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False)
    await producer.start()
    try:  # the worker dies after two chunks of its next save
        for key, value in parts[:2]:
            await producer.send_and_wait(topic, key=key, value=value, partition=0)
    finally:
        await producer.stop()

    store = await new_store(topic)
    with caplog.at_level(logging.WARNING, logger="rackplane.snapshots"):
        loaded = await store.load(0)
    assert loaded == checkpoint(0, 30, old)
    assert ours(caplog) == []  # nothing is wrong: the newest complete checkpoint is there

    # The next save (of a later state) tombstones the orphaned chunks.
    newest = cluster_state("c-lhr", commands=9, ids=1_500)
    await store.save(checkpoint(0, 60, newest))
    records = await records_of(broker, topic, 0)
    tombstoned = {r.key for r in records if r.value is None}
    assert {key for key, _ in parts[:2]} <= tombstoned
    assert (await (await new_store(topic)).load(0)) == checkpoint(0, 60, newest)


async def _forge(
    broker: BrokerUnderTest, topic: str, record: CheckpointRecord, *, bad_chunk: bool
) -> None:
    """Write a checkpoint record as a buggy writer would: its first chunk offset names a
    record that is a chunk of the right snapshot with its bytes flipped."""
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        snapshots = dict(record.snapshots)
        if bad_chunk:
            cluster, ref = next(iter(snapshots.items()))
            records = await records_of(broker, topic, record.partition)
            original = next(r for r in records if r.offset == ref.offsets[0])
            head, _, data = original.value.partition(b"\n")
            flipped = head + b"\n" + bytes(b ^ 0x5A for b in data)
            meta = await producer.send_and_wait(
                topic, key=original.key, value=flipped, partition=record.partition
            )
            snapshots[cluster] = ref.model_copy(update={"offsets": (meta.offset, *ref.offsets[1:])})
        forged = record.model_copy(update={"snapshots": snapshots})
        await producer.send_and_wait(
            topic,
            key=checkpoint_key(record.partition, record.save),
            value=checkpoint_value(forged),
            partition=record.partition,
        )
    finally:
        await producer.stop()


async def test_a_corrupted_chunk_falls_back_to_the_previous_checkpoint_with_one_warning(
    snapshots_topic: TopicMaker,
    new_store: StoreMaker,
    broker: BrokerUnderTest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await snapshots_topic()
    first = cluster_state("c-nrt", commands=2, ids=500)
    second = cluster_state("c-nrt", commands=5, ids=900)
    store = await new_store(topic)
    await store.save(checkpoint(0, 11, first))
    await store.save(checkpoint(0, 22, second))
    [_, (two_at, two)] = checkpoint_records(await records_of(broker, topic, 0))
    await _forge(
        broker, topic, two.model_copy(update={"save": 2, "previous": two_at}), bad_chunk=True
    )

    with caplog.at_level(logging.WARNING, logger="rackplane.snapshots"):
        loaded = await (await new_store(topic)).load(0)

    assert loaded == checkpoint(0, 22, second)  # the checkpoint before the bad one
    [warning] = ours(caplog)
    assert "do not match its digest" in warning.getMessage()
    assert "trying the checkpoint before it" in warning.getMessage()


async def test_a_corrupted_only_checkpoint_loads_none_with_one_warning(
    snapshots_topic: TopicMaker,
    new_store: StoreMaker,
    broker: BrokerUnderTest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await snapshots_topic()
    await (await new_store(topic)).save(checkpoint(0, 11, cluster_state("c-sjc", ids=700)))
    [(_, one)] = checkpoint_records(await records_of(broker, topic, 0))
    await _forge(
        broker, topic, one.model_copy(update={"save": 1, "previous": None}), bad_chunk=True
    )

    with caplog.at_level(logging.WARNING, logger="rackplane.snapshots"):
        loaded = await (await new_store(topic)).load(0)

    assert loaded is None
    [warning] = ours(caplog)
    assert "the events are read from offset 0" in warning.getMessage()


async def test_a_checkpoint_naming_the_wrong_record_as_a_chunk_falls_back(
    snapshots_topic: TopicMaker,
    new_store: StoreMaker,
    broker: BrokerUnderTest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await snapshots_topic()
    state = cluster_state("c-iad", ids=300)
    store = await new_store(topic)
    await store.save(checkpoint(0, 3, state))
    [(at, one)] = checkpoint_records(await records_of(broker, topic, 0))
    ref = one.snapshots["c-iad"]
    gone = ref.model_copy(
        update={"offsets": (*ref.offsets[:-1], at)}
    )  # the checkpoint's own offset
    await _forge(
        broker,
        topic,
        one.model_copy(update={"save": 1, "previous": at, "snapshots": {"c-iad": gone}}),
        bad_chunk=False,
    )

    with caplog.at_level(logging.WARNING, logger="rackplane.snapshots"):
        loaded = await (await new_store(topic)).load(0)

    assert loaded == checkpoint(0, 3, state)
    [warning] = ours(caplog)
    assert "is not chunk" in warning.getMessage()


async def test_an_empty_partition_loads_none_without_a_warning(
    snapshots_topic: TopicMaker, new_store: StoreMaker, caplog: pytest.LogCaptureFixture
) -> None:
    topic = await snapshots_topic()
    with caplog.at_level(logging.WARNING, logger="rackplane.snapshots"):
        assert await (await new_store(topic)).load(1) is None
    assert ours(caplog) == []


async def test_a_checkpoint_that_contradicts_itself_is_refused_before_anything_is_written(
    snapshots_topic: TopicMaker, new_store: StoreMaker, broker: BrokerUnderTest
) -> None:
    topic = await snapshots_topic()
    store = await new_store(topic)
    a = cluster_state("c-a")
    with pytest.raises(ValueError, match=r"events offset 9 is not within 0\.\.covers"):
        await store.save(Checkpoint(0, 5, {"c-a": Snapshot("c-a", a, 9)}))
    with pytest.raises(ValueError, match="is of 'c-a'"):
        await store.save(Checkpoint(0, 5, {"c-b": Snapshot("c-b", a, 1)}))
    assert await records_of(broker, topic, 0) == []


# -- the topic ------------------------------------------------------------------------------


async def test_the_snapshots_topic_is_created_compacted_once_and_checked_after(
    broker: BrokerUnderTest,
) -> None:
    kafka = {"bootstrap_servers": broker.bootstrap}
    name = f"rackplane.test.snapshots.{uuid.uuid4().hex[:12]}"
    assert await ensure_snapshots_topic(
        kafka, name, partitions=3, replication=1, max_message_bytes=65_536
    )
    assert not await ensure_snapshots_topic(
        kafka, name, partitions=3, replication=1, max_message_bytes=65_536
    )
    with pytest.raises(SnapshotTopicError, match="has 3 partitions; the events topic has 4"):
        await ensure_snapshots_topic(
            kafka, name, partitions=4, replication=1, max_message_bytes=65_536
        )
    admin = AIOKafkaAdminClient(**kafka)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        [(_, _, _, _, entries)] = response.resources
        configs = {entry[0]: entry[1] for entry in entries}
    finally:
        await admin.close()
    assert configs["cleanup.policy"] == "compact"
    assert configs["max.message.bytes"] == "65536"


# -- compaction (Apache Kafka) ------------------------------------------------------------

COMPACT_NOW = {
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "100",
}


@pytest.mark.kafka_only
async def test_after_real_compaction_the_newest_checkpoint_still_loads(
    broker: BrokerUnderTest, new_store: StoreMaker
) -> None:
    if broker.kind == "tansu":
        pytest.fail("Tansu never compacts: run through `make test-kafka` (scripts/kafka)")
    name = f"rackplane.test.snapshots.{uuid.uuid4().hex[:12]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        configs = snapshot_topic_configs(SMALL_MESSAGES) | COMPACT_NOW
        await admin.create_topics([NewTopic(name, 1, 1, topic_configs=configs)])
    finally:
        await admin.close()
    store = await new_store(name)
    # Shrinking snapshots (fewer chunks each time), six saves: every checkpoint slot and most
    # chunks get superseded or tombstoned.
    states = [cluster_state("c-fra", commands=k, ids=3_000 - 400 * k) for k in range(1, 7)]
    for k, state in enumerate(states):
        await store.save(checkpoint(0, 10 * (k + 1), state))
        await asyncio.sleep(0.2)  # each save in a segment of its own
    before = await records_of(broker, name, 0)

    deadline = time.monotonic() + 90  # the log cleaner wakes every 15 s by default
    while True:
        await asyncio.sleep(2)
        after = await records_of(broker, name, 0)  # the marker it writes rolls the segment
        if len(checkpoint_records(after)) == 2 and len(after) < len(before) // 2:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"no compaction in 90 s: {len(before)} records, then {len(after)}")

    loaded = await (await new_store(name)).load(0)
    assert loaded == checkpoint(0, 60, states[-1])
    # What is left: the two checkpoints and the chunks they name, nothing else of substance.
    kept = {r.key for r in after if r.value}
    named = set()
    for _, record in checkpoint_records(after):
        for cluster, ref in record.snapshots.items():
            named |= set(ref.ident(cluster).chunk_keys())
    assert {k for k in kept if k.startswith(b"chunk/")} == named


async def test_a_store_that_trusts_log_keys_loads_only_checkpoints_they_signed(
    snapshots_topic: TopicMaker, new_store: StoreMaker, caplog: pytest.LogCaptureFixture
) -> None:
    """A forged checkpoint (newer, unsigned, or signed by another key) is passed over as if it
    were not there: the worker's newest signed checkpoint is the one loaded."""
    worker, other = KeyFile.new("worker:w1"), KeyFile.new("worker:w2")
    trust = LogTrust.of([worker.public_key])
    topic = await snapshots_topic()
    mine = cluster_state("c-a", commands=2)
    await (await new_store(topic, sign=worker.signature)).save(checkpoint(0, 5, mine))
    signed = await (await new_store(topic, trust=trust)).load(0)
    assert signed is not None and signed.signed and signed.snapshots["c-a"].state == mine

    forged = cluster_state("c-a", commands=5)
    await (await new_store(topic)).save(checkpoint(0, 9, forged))  # unsigned
    await (await new_store(topic, sign=other.signature)).save(checkpoint(0, 11, forged))
    assert (await (await new_store(topic)).load(0)).covers == 11  # type: ignore[union-attr]
    with caplog.at_level(logging.ERROR, logger="rackplane.snapshots"):
        loaded = await (await new_store(topic, trust=trust)).load(0)
    assert loaded is not None and loaded.covers == 5 and loaded.snapshots["c-a"].state == mine
    refused = [r.getMessage() for r in caplog.records]
    assert any("which this reader does not trust" in m and other.id in m for m in refused)
