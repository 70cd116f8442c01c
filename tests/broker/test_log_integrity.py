"""The log refuses to lie, on a real broker: a rebuild names forks and gaps by offset, tells a
retried copy from a second decision, and an appender notices a record it did not write.

Runs on the embedded Tansu broker (`make test`) and on Apache Kafka (`make test-kafka`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rackplane.models import (
    EVENTS,
    CordonNode,
    Event,
    PolicySettings,
    Rack,
    RegisterTopology,
    Topology,
    UncordonNode,
)
from rackplane.policies import decide
from rackplane.projections import evolve, fold, initial_state
from rackplane.streams._append import EventAppender, ForeignWrite
from rackplane.streams.eventlog import EventLog, ForkDetected, GapDetected
from rackplane.streams.senders import SharedProducer
from tests.broker._log import ProducerFactory, TopicFactory
from tests.conftest import BrokerUnderTest

pytestmark = pytest.mark.broker


T0 = datetime(2026, 12, 1, tzinfo=UTC)


def cluster_events(cluster: str, count: int) -> list[Event]:
    """A log the core wrote: a registration, then a node cordoned and uncordoned in turn."""
    topology = Topology(cluster=cluster, racks=(Rack(id="r0", pod="p0", nodes=("n0", "n1", "n2")),))
    state, events = initial_state(cluster), []
    commands = [
        RegisterTopology(
            id=f"{cluster}-reg", cluster=cluster, actor="operator:test", topology=topology,
            settings=PolicySettings(spares_per_rack=0),
        )
    ]  # fmt: skip
    for i in range(1, count):
        kind = CordonNode if i % 2 else UncordonNode
        commands.append(kind(id=f"{cluster}-{i}", cluster=cluster, actor="admin", node="n1"))
    for i, command in enumerate(commands):
        for e in decide(state, command, now=T0 + timedelta(seconds=i)):
            state = evolve(state, e)
            events.append(e)
    assert len(events) == count
    return events


async def _write(producer_factory: ProducerFactory, topic: str, events: list[Event]) -> None:
    producer = await producer_factory()
    for e in events:
        await producer.send_and_wait(
            topic, EVENTS.dump_json(e), key=e.cluster.encode(), partition=0
        )


def _log(broker: BrokerUnderTest, topic: str) -> EventLog:
    return EventLog({"bootstrap_servers": broker.bootstrap}, topic, fetch_wait_ms=20)


async def test_a_rebuild_reads_every_cluster_of_a_partition_and_counts_retried_copies(
    broker: BrokerUnderTest, new_topic: TopicFactory, new_producer: ProducerFactory
) -> None:
    topic = await new_topic(partitions=1)
    a, b = cluster_events("c-a", 6), cluster_events("c-b", 4)
    # c-a's seq 3 lands twice, byte for byte (a retry without an idempotent producer).
    await _write(new_producer, topic, [a[0], b[0], a[1], a[2], a[2], b[1], *a[3:], *b[2:]])
    log = _log(broker, topic)
    try:
        read = await log.rebuild_partition(0)
    finally:
        await log.stop()
    assert read.broken == {}
    assert {c: f.state.seq for c, f in read.clusters.items()} == {"c-a": 6, "c-b": 4}
    assert read.clusters["c-a"].duplicates == 1
    assert [e.seq for e in read.clusters["c-a"].events] == [1, 2, 3, 4, 5, 6]


async def test_two_different_events_with_one_seq_stop_that_cluster_and_name_both_offsets(
    broker: BrokerUnderTest, new_topic: TopicFactory, new_producer: ProducerFactory
) -> None:
    topic = await new_topic(partitions=1)
    a, b = cluster_events("c-a", 5), cluster_events("c-b", 3)
    other = a[2].model_copy(update={"actor": "operator:mallory"})  # seq 3, different
    # offsets:                  0     1     2     3     4      5     6     7
    await _write(new_producer, topic, [a[0], a[1], a[2], b[0], other, a[3], b[1], b[2]])
    log = _log(broker, topic)
    try:
        read = await log.rebuild_partition(0)
    finally:
        await log.stop()
    err = read.broken["c-a"]
    assert isinstance(err, ForkDetected)
    assert (err.seq, err.first, err.second) == (3, 2, 4)
    assert "seq 3 at offset 2" in str(err) and "at offset 4" in str(err)
    assert read.clusters["c-a"].state.seq == 3  # its last good event, nothing after the fork
    assert read.clusters["c-b"].state.seq == 3  # the other cluster is untouched
    assert "c-b" not in read.broken


async def test_a_missing_seq_stops_that_cluster_and_names_where(
    broker: BrokerUnderTest, new_topic: TopicFactory, new_producer: ProducerFactory
) -> None:
    topic = await new_topic(partitions=1)
    a = cluster_events("c-a", 6)
    await _write(new_producer, topic, [a[0], a[1], a[3], a[4]])  # seq 3 lost
    log = _log(broker, topic)
    try:
        read = await log.rebuild_partition(0)
        with pytest.raises(GapDetected, match=r"seq 2 \(at offset 1\) is followed by seq 4"):
            await log.rebuild("c-a")
    finally:
        await log.stop()
    assert isinstance(read.broken["c-a"], GapDetected)
    assert read.clusters["c-a"].state.seq == 2


async def test_a_rebuild_from_a_checkpoint_reads_only_the_tail(
    broker: BrokerUnderTest, new_topic: TopicFactory, new_producer: ProducerFactory
) -> None:
    topic = await new_topic(partitions=1)
    a = cluster_events("c-a", 10)
    await _write(new_producer, topic, a)
    log = _log(broker, topic)
    try:
        head = await log.rebuild_partition(0)
        at6 = fold(initial_state("c-a"), a[:6])
        tail = await log.rebuild_partition(0, start=6, states={"c-a": at6})
    finally:
        await log.stop()
    assert tail.clusters["c-a"].state == head.clusters["c-a"].state
    assert [e.seq for e in tail.clusters["c-a"].events] == [7, 8, 9, 10]


async def test_an_appender_notices_an_event_it_did_not_write_between_its_batches(
    broker: BrokerUnderTest, new_topic: TopicFactory, new_producer: ProducerFactory
) -> None:
    topic = await new_topic(partitions=1)
    a = cluster_events("c-a", 4)
    log = _log(broker, topic)
    shared = SharedProducer({"bootstrap_servers": broker.bootstrap}, idempotent=False)
    appender = EventAppender(shared, topic, log, max_batch_bytes=1_048_576)
    decision = [[(b"c-a", EVENTS.dump_json(e))] for e in a]
    try:
        ends = await appender.append(0, decision[:2], lambda: None)
        assert ends == [0, 1]
        _, marker = await log.end_of(0)  # a reader's marker in between is fine
        producer = await new_producer()
        for junk in (b"not json", EVENTS.dump_json(a[3])):  # garbage, an event keyed c-b
            await producer.send_and_wait(topic, junk, key=b"c-b", partition=0)
        ends = await appender.append(0, decision[2:3], lambda: None)  # no reader folds those
        assert ends == [marker + 3]
        await _write(new_producer, topic, [a[3]])  # someone else writes an event of the log
        with pytest.raises(ForeignWrite, match=rf"at offsets \[{marker + 4}\]"):
            await appender.append(0, decision[3:], lambda: None)
    finally:
        await shared.stop()
        await log.stop()


async def test_an_appender_passes_over_the_events_of_a_cluster_without_a_log_but_not_a_new_log(
    broker: BrokerUnderTest, new_topic: TopicFactory, new_producer: ProducerFactory
) -> None:
    """Readers skip an event of a cluster the partition holds no log of, unless it opens one
    (a registration): the appender judges so without a reload (the hostile fault case wrote
    100 of them in 15 s, and each reload read the whole partition)."""
    topic = await new_topic(partitions=1)
    a = cluster_events("c-a", 4)
    ghost = cluster_events("c-ghost", 2)  # its registration, then one of its events
    log = _log(broker, topic)
    shared = SharedProducer({"bootstrap_servers": broker.bootstrap}, idempotent=False)
    appender = EventAppender(
        shared, topic, log, max_batch_bytes=1_048_576, holds=lambda c: c == "c-a"
    )
    decision = [[(b"c-a", EVENTS.dump_json(e))] for e in a]
    try:
        await appender.append(0, decision[:2], lambda: None)
        await _write(new_producer, topic, [ghost[1]])  # no log of c-ghost: readers skip it
        ends = await appender.append(0, decision[2:3], lambda: None)
        assert ends == [3]
        await _write(new_producer, topic, [ghost[0]])  # a registration opens a log
        with pytest.raises(ForeignWrite, match=r"at offsets \[4\]"):
            await appender.append(0, decision[3:], lambda: None)
        read = await log.rebuild_partition(0)
    finally:
        await shared.stop()
        await log.stop()
    assert read.clusters["c-a"].state.seq == 4
    assert read.clusters["c-ghost"].state.seq == 1  # what the reload after the raise sees


async def test_one_decision_is_one_record_batch_and_lands_whole(
    broker: BrokerUnderTest, new_topic: TopicFactory
) -> None:
    topic = await new_topic(partitions=1)
    a = cluster_events("c-a", 30)
    log = _log(broker, topic)
    shared = SharedProducer({"bootstrap_servers": broker.bootstrap}, idempotent=False)
    appender = EventAppender(shared, topic, log, max_batch_bytes=4_000)
    decisions = [[(b"c-a", EVENTS.dump_json(e)) for e in a[i : i + 3]] for i in range(0, 30, 3)]
    try:
        ends = await appender.append(0, decisions, lambda: None)
        read = await log.rebuild_partition(0)
    finally:
        await shared.stop()
        await log.stop()
    assert ends == [i + 2 for i in range(0, 30, 3)]
    assert appender.batches > 1  # 4,000 bytes hold a few decisions, never a part of one
    assert read.clusters["c-a"].state.seq == 30


async def test_an_event_that_cannot_apply_or_is_keyed_by_another_cluster_never_enters_a_state(
    broker: BrokerUnderTest, new_topic: TopicFactory, new_producer: ProducerFactory
) -> None:
    topic = await new_topic(partitions=1)
    a = cluster_events("c-a", 3)
    ghost = a[1].model_copy(update={"seq": 4, "id": "c-a/4", "node": "no-such-node"})
    producer = await new_producer()
    await _write(new_producer, topic, a)
    await producer.send_and_wait(topic, EVENTS.dump_json(a[2]), key=b"c-b", partition=0)
    await producer.send_and_wait(topic, EVENTS.dump_json(ghost), key=b"c-a", partition=0)
    log = _log(broker, topic)
    try:
        read = await log.rebuild_partition(0)
    finally:
        await log.stop()
    assert read.skipped == 1  # keyed c-b, names c-a: not an event of this log
    assert set(read.clusters) == {"c-a"}
    err = read.broken["c-a"]
    assert "seq 4 at offset 4" in str(err) and "does not apply (KeyError" in str(err)
    assert read.clusters["c-a"].state.seq == 3
