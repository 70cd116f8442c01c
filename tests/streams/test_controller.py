"""The controller agent without a broker: a log in memory that can refuse appends, lose them
half way, or hold a fork, and commands that arrive mis-keyed, mis-partitioned or for no cluster.

The log below has 2 partitions; clusters are chosen by the partition their id hashes to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from rackplane.keyfiles import KeyFile
from rackplane.logtrust import LogTrust
from rackplane.models import (
    EVENTS,
    REJECTIONS,
    Command,
    CommandRejected,
    CordonNode,
    Event,
    PolicyConfigured,
    PolicySettings,
    RegisterTopology,
    Rejection,
)
from rackplane.projections import fold, initial_state
from rackplane.streams._append import Decision, Fence, ForeignWrite, Revoked
from rackplane.streams._fatal import Unavailable
from rackplane.streams.agents import Controller
from rackplane.streams.codec import decode_event, encode_command, encode_event
from rackplane.streams.eventlog import PartitionLog, _Reading, partition_for
from rackplane.streams.replicas import Replicas
from tests.streams.conftest import small_topology

PARTITIONS = 2
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def cluster_on(partition: int, n: int = 0) -> str:
    """The n-th cluster id (c0, c1, ...) whose commands and events live in `partition`."""
    found = [c for c in (f"c{i}" for i in range(1000)) if partition_for(c, PARTITIONS) == partition]
    return found[n]


@dataclass
class MemoryLog:
    """An events topic in memory: records (key, value) per partition; markers are not needed
    (nothing is written concurrently)."""

    records: dict[int, list[tuple[bytes, bytes]]] = field(
        default_factory=lambda: {p: [] for p in range(PARTITIONS)}
    )
    loads: int = 0
    trust: LogTrust | None = None

    def initial(self, cluster: str) -> Any:
        return initial_state(cluster)

    async def rebuild_partition(
        self,
        partition: int,
        *,
        start: int = 0,
        states: Any = None,
        timeout: float = 0,
        signed: bool = False,
    ) -> PartitionLog:
        self.loads += 1
        reading = _Reading(
            partition, f"events[{partition}]", dict(states or {}), initial_state, self.trust, signed
        )
        kept = self.records[partition]
        reading.take(
            [
                SimpleNamespace(key=k, value=v, offset=i, headers=[])
                for i, (k, v) in enumerate(kept)
                if i >= start
            ]
        )
        return reading.finish(len(kept))

    def events(self, cluster: str) -> list[Event]:
        p = partition_for(cluster, PARTITIONS)
        return [decode_event(v) for k, v in self.records[p] if k == cluster.encode()]


@dataclass
class FlakyAppender:
    """Appends to a `MemoryLog`; the first `fail` calls raise, after landing `land` decisions."""

    log: MemoryLog
    fail: int = 0
    land: int = 0
    during: Callable[[], None] = lambda: None
    calls: int = 0

    def expect(self, partition: int, offset: int) -> None:
        pass

    async def append(
        self, partition: int, decisions: Sequence[Decision], check: Callable[[], None]
    ) -> list[int]:
        self.calls += 1
        self.during()
        check()
        kept = self.log.records[partition]
        if self.calls <= self.fail:
            for decision in decisions[: self.land]:
                kept.extend(decision)
            raise KafkaConnectionError("broker went away")
        ends = []
        for decision in decisions:
            kept.extend(decision)
            ends.append(len(kept) - 1)
        return ends


@dataclass
class Rejected:
    records: list[Rejection] = field(default_factory=list)

    async def send(self, *, key: Any = None, value: Any = None) -> Any:
        self.records.append(REJECTIONS.validate_json(value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


@dataclass
class Rig:
    log: MemoryLog
    appender: FlakyAppender
    rejected: Rejected
    controller: Controller
    fence: Fence
    offsets: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(PARTITIONS), 0))

    def message(
        self, command: Command, *, key: bytes | None = None, partition: int | None = None
    ) -> Any:
        p = partition_for(command.cluster, PARTITIONS) if partition is None else partition
        offset = self.offsets[p]
        self.offsets[p] += 1
        return SimpleNamespace(
            message=SimpleNamespace(
                key=command.cluster.encode() if key is None else key,
                value=encode_command(command),
                partition=p,
                offset=offset,
                headers=[],
            )
        )

    async def send(self, *messages: Any) -> None:
        await self.controller.process(list(messages))


def rig(
    *, fail: int = 0, land: int = 0, outage_limit: float = 30.0, key: KeyFile | None = None
) -> Rig:
    """`key`: the worker's key, which signs every event; the log then trusts only it."""
    log = MemoryLog(trust=LogTrust.of([key.public_key]) if key is not None else None)
    appender = FlakyAppender(log, fail=fail, land=land)
    rejected = Rejected()
    fence = Fence(stall_after=60.0)
    fence.assign(set(range(PARTITIONS)))
    replicas = Replicas(log, partitions=PARTITIONS)  # type: ignore[arg-type]
    controller = Controller(
        replicas,
        appender,
        rejected,
        topic="t.commands",
        limit=1_048_576,
        max_decision_bytes=200_000,
        fence=fence,
        clock=lambda: NOW,
        outage_limit=outage_limit,
        seal=key.sign_event if key is not None else None,
    )
    return Rig(log, appender, rejected, controller, fence)


_ids = iter(range(1, 10**9))


def register(cluster: str) -> RegisterTopology:
    return RegisterTopology(
        id=f"reg-{next(_ids)}",
        cluster=cluster,
        actor="operator:test",
        topology=small_topology(cluster),
        settings=PolicySettings(spares_per_rack=1),
    )


def cordon(cluster: str, node: str = "r0-n1", **fields: Any) -> CordonNode:
    return CordonNode(
        id=f"cordon-{next(_ids)}", cluster=cluster, actor="operator:test", node=node, **fields
    )


def assert_one_decision_each(log: MemoryLog, cluster: str, commands: Sequence[Command]) -> None:
    events = log.events(cluster)
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "seq gapless, no fork"
    for command in commands:
        seqs = [e.seq for e in events if e.causation_id == command.id]
        assert seqs, f"{command.id} never decided"
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"{command.id} decided twice"


async def test_a_failed_append_is_retried_from_the_log_and_nothing_is_decided_twice() -> None:
    r = rig(fail=2, land=1)  # each failed append lands the first decision, then breaks
    c = cluster_on(0)
    commands: list[Command] = [register(c), *(cordon(c, f"r0-n{i}") for i in range(4))]
    await r.send(*(r.message(x) for x in commands))
    assert r.appender.calls == 3
    assert_one_decision_each(r.log, c, commands)
    # The replica is what the log folds to, not what the failed attempts had decided.
    assert r.controller.replicas.states[c] == fold(initial_state(c), r.log.events(c))
    assert r.log.loads == 3  # the first read, then one after each failure


async def test_an_old_redelivery_is_recognised_by_its_position_with_its_id_forgotten() -> None:
    r = rig()
    c = cluster_on(1)
    first = [register(c), cordon(c)]
    messages = [r.message(x) for x in first]
    await r.send(*messages)
    r.controller.replicas.forget()  # a restart: the state comes back from the log
    await r.send(*messages)  # the same records again, at the same offsets
    assert_one_decision_each(r.log, c, first)
    again = cordon(c, "r1-n1")  # a new id at an old offset: a stale record, not decided
    stale = r.message(again)
    stale.message.offset = 0
    await r.send(stale)
    assert all(e.causation_id != again.id for e in r.log.events(c))


async def test_commands_keyed_by_another_cluster_or_in_another_partition_are_rejected() -> None:
    r = rig()
    c0, c1 = cluster_on(0), cluster_on(1)
    await r.send(r.message(register(c0)), r.message(register(c1)))
    mis_keyed = cordon(c0)
    wrong_partition = cordon(c1)
    await r.send(
        r.message(mis_keyed, key=c1.encode(), partition=partition_for(c0, PARTITIONS)),
        r.message(wrong_partition, partition=partition_for(c0, PARTITIONS)),
    )
    reasons = [x.reason for x in r.rejected.records]
    assert len(reasons) == 2
    assert "is not the command's cluster" in reasons[0]
    assert f"lives in partition {partition_for(c1, PARTITIONS)}" in reasons[1]
    decided = {e.causation_id for e in r.log.events(c0) + r.log.events(c1)}
    assert mis_keyed.id not in decided and wrong_partition.id not in decided


async def test_commands_for_clusters_that_do_not_exist_cost_no_read_and_leave_no_event() -> None:
    r = rig()
    real = cluster_on(0)
    await r.send(r.message(register(real)))
    ghosts = [cluster_on(p, n) for p in range(PARTITIONS) for n in range(1, 76)]
    await r.send(*(r.message(cordon(g)) for g in ghosts))
    assert r.log.loads == PARTITIONS  # one read per partition, whatever the names
    assert len(r.rejected.records) == len(ghosts) == 150
    assert all("does not exist" in x.reason for x in r.rejected.records)
    written = {decode_event(v).cluster for p in range(PARTITIONS) for _, v in r.log.records[p]}
    assert written == {real}
    assert set(r.controller.replicas.states) == {real}


async def test_a_decision_too_large_for_one_batch_is_rejected_whole_before_it_is_sent() -> None:
    r = rig()
    c = cluster_on(0)
    await r.send(r.message(register(c)))
    big = cordon(c, reason="x" * 1_000)
    r.controller.max_decision_bytes = 900  # the cordon's event would not fit
    await r.send(r.message(big))
    (event,) = [e for e in r.log.events(c) if e.causation_id == big.id]
    assert isinstance(event, CommandRejected) and event.code == "event_too_large"
    assert not any(e.type == "NodeCordoned" for e in r.log.events(c))


async def test_appends_failing_past_the_outage_limit_stop_the_worker() -> None:
    r = rig(fail=10**6, outage_limit=0.5)
    c = cluster_on(0)
    with pytest.raises(Unavailable, match="refused or lost appends"):
        await r.send(r.message(register(c)))
    assert r.controller.replicas.states == {}  # nothing kept that the broker did not take


async def test_a_partition_revoked_while_it_is_written_stops_the_writer() -> None:
    r = rig()
    c = cluster_on(1)
    r.appender.during = r.fence.revoke  # a rebalance that did not wait for the batch
    with pytest.raises(Revoked):
        await r.send(r.message(register(c)))
    assert r.log.records[partition_for(c, PARTITIONS)] == []


async def test_a_forked_log_takes_no_more_commands_and_says_where() -> None:
    r = rig()
    c = cluster_on(0)
    await r.send(r.message(register(c)), r.message(cordon(c)))
    kept = r.log.records[0]
    key, value = kept[-1]
    forged = decode_event(value).model_copy(update={"actor": "operator:mallory"})
    kept.append((key, EVENTS.dump_json(forged)))  # seq 2 again, different
    r.controller.replicas.forget()
    late = cordon(c, "r2-n2")
    await r.send(r.message(late))
    (why,) = [x.reason for x in r.rejected.records]
    assert "is forked: seq 2 at offset 1" in why and "at offset 2" in why
    assert late.id not in {e.causation_id for e in r.log.events(c)}


async def test_an_event_someone_else_wrote_among_the_batches_makes_the_controller_reload() -> None:
    r = rig()
    c = cluster_on(0)
    await r.send(r.message(register(c)))
    original = r.appender.append
    raised: list[bool] = []

    async def once(partition: int, decisions: Any, check: Any) -> list[int]:
        ends = await original(partition, decisions, check)  # landed, then found a stranger
        if not raised:
            raised.append(True)
            raise ForeignWrite("events this writer did not write lie between its batches")
        return ends

    r.appender.append = once  # type: ignore[method-assign]
    loads = r.log.loads
    command = cordon(c)
    await r.send(r.message(command))  # no exception: the worker goes on
    assert r.log.loads == loads + 1  # the partition was read again, and judged
    assert_one_decision_each(r.log, c, [command])


async def test_with_a_worker_key_every_event_is_signed_and_a_forged_one_never_folded() -> None:
    """Issue 16: an event someone else appended at the next seq used to win the next rebuild
    (a fork the running controller did not see). Signed, the reload passes over it."""
    key = KeyFile.new("worker:w1")
    r = rig(key=key)
    c = cluster_on(0)
    await r.send(r.message(register(c)))
    written = r.log.events(c)
    assert written and all(e.signature is not None and e.signature.key == key.id for e in written)
    forged = PolicyConfigured(
        id=f"{c}-forged", cluster=c, seq=written[-1].seq + 1, at=NOW, actor="operator:test",
        settings=PolicySettings(admins=("operator:mallory",)),
    )  # fmt: skip
    r.log.records[0].append((c.encode(), encode_event(forged)))
    r.controller.replicas.forget()  # a restart: the next command reloads the partition
    await r.send(r.message(cordon(c, "r0-n1")))
    state = r.controller.replicas.states[c]
    assert state.settings.admins is None and state.nodes["r0-n1"].cordoned
    seqs = [(e.seq, e.type) for e in r.log.events(c)]
    assert seqs[-2:] == [(forged.seq, "PolicyConfigured"), (forged.seq, "NodeCordoned")]
    assert r.controller.replicas.forged == 1
