"""The GPU Manager's reports around a repair, when its view of the log is behind or rebuilt.

The failure of CI's `make test-kafka` (stop 31): after the operator's repair, the repaired
node failed again on the evidence of before the repair. The manager had reported the node
degraded, then failed; when the event of the degrade reached it (its events side behind its
telemetry side), it took it for news, forgot that it had said failed since, and said failed
again. That report was decided after the repair.

Three guards, each tested here on the controller of `test_controller`'s rig: the manager does
not take the events of its own reports for news (another worker's manager's it does); the
controller ignores a report made on a view from before
the node's last repair (`ReportNodeHealth.seen`); and the manager reads a repair from the view
itself, however the view learnt of it.
"""

from __future__ import annotations

from typing import Any

from rackplane.models import CommandIgnored, Health, ReportNodeHealth
from rackplane.streams.codec import decode_event
from tests.streams.test_controller import cluster_on, register, rig
from tests.streams.test_following import (
    EventsTopic,
    decided,
    manager_of,
    repair,
    sample,
)

N = "r0-n0"


def reports(sent: Any) -> list[tuple[Health, int | None]]:
    return [(c.health, c.seen) for c in sent.commands if isinstance(c, ReportNodeHealth)]


def sick_then_failed(c: str) -> list[Any]:
    """Clean, two readings with NVLink links down (degraded), two with XID 79 (failed)."""
    return [
        sample(c, N, 0),
        sample(c, N, 20, nvlink_down=2), sample(c, N, 30, nvlink_down=2),
        sample(c, N, 40, xid=79), sample(c, N, 50, xid=79),
    ]  # fmt: skip


def hot(c: str, *seconds: int) -> list[Any]:
    """A hot GPU, still showing DCGM's sticky XID 79 of before the repair."""
    return [sample(c, N, s, xid=79, temperature_c=95.0) for s in seconds]


async def test_its_own_degrade_arriving_late_does_not_make_it_say_failed_again() -> None:
    r = rig()
    c = cluster_on(0)
    await decided(r, register(c))
    topic = EventsTopic(r.log)
    manager, sent = manager_of(r.log)
    await manager.on_telemetry(sick_then_failed(c))  # the first sample reads the partition
    registered = manager.replicas.states[c].seq
    assert reports(sent) == [(Health.DEGRADED, registered), (Health.FAILED, registered)]
    first = len(r.log.records[0])
    await decided(r, *sent.commands, repair(c, N))
    records = topic.records(0)[first:]
    types = [decode_event(x.value).type for x in records]
    assert types == ["NodeDegraded", "NodeFailed", "NodeRepaired"]

    # Its events side is behind: only the degrade has reached it.
    await manager.on_events(records[:1])
    await manager.on_telemetry(hot(c, 60, 70))
    assert len(sent.commands) == 2, reports(sent)  # the old code said failed a third time here

    # Had it said so, on its view from before the repair, the controller would ignore it.
    behind = manager.replicas.states[c].seq
    stale = ReportNodeHealth(
        id="stale", cluster=c, actor="gpu_manager", node=N, health=Health.FAILED, seen=behind
    )
    start = len(r.log.records[0])
    await decided(r, stale)
    (ignored,) = [decode_event(x.value) for x in topic.records(0)[start:]]
    assert isinstance(ignored, CommandIgnored) and "predates the repair" in ignored.reason

    # The rest arrives: the repaired node runs hot, which is news, on a view with the repair.
    await manager.on_events(topic.records(0)[first + 1 :])
    repaired_at = manager.replicas.states[c].repairs[N]
    await manager.on_telemetry(hot(c, 80, 90))
    (degraded,) = reports(sent)[2:]
    assert degraded[0] is Health.DEGRADED and degraded[1] is not None
    assert degraded[1] >= repaired_at


async def test_a_repair_folded_by_a_rebuilt_replica_starts_the_node_over() -> None:
    """No event of the node reached the manager's events side: its replica was dropped (a
    rebalance) and rebuilt from the log, repair included, on the next sample."""
    r = rig()
    c = cluster_on(0)
    await decided(r, register(c))
    manager, sent = manager_of(r.log)
    await manager.on_telemetry(sick_then_failed(c))
    await decided(r, *sent.commands, repair(c, N))
    manager.replicas.forget()
    await manager.on_telemetry(hot(c, 60, 70))
    # The old code kept its own verdict of failed (the controller never said failed to it)
    # and, having said failed, said nothing: the repaired node's heat went unreported.
    assert [h for h, _ in reports(sent)] == [Health.DEGRADED, Health.FAILED, Health.DEGRADED]
    assert reports(sent)[-1][1] == manager.replicas.states[c].seq


async def test_another_managers_report_is_news() -> None:
    """Another worker's manager (the telemetry's partition moved and came back) said the node
    recovered: that is the controller's view now, though its actor is `gpu_manager` too, and
    this manager's degraded verdict is reported again."""
    r = rig()
    c = cluster_on(0)
    await decided(r, register(c))
    topic = EventsTopic(r.log)
    manager, sent = manager_of(r.log)
    degraded = [sample(c, N, s, nvlink_down=2) for s in (0, 10)]
    await manager.on_telemetry(degraded)
    first = len(r.log.records[0])
    other = ReportNodeHealth(
        id=f"gpu_manager:{N}:elsewhere", cluster=c, actor="gpu_manager", node=N,
        health=Health.HEALTHY, seen=manager.replicas.states[c].seq,
    )  # fmt: skip
    await decided(r, *sent.commands, other)
    await manager.on_events(topic.records(0)[first:])
    assert manager.replicas.states[c].nodes[N].health is Health.HEALTHY
    await manager.on_telemetry([sample(c, N, 20, nvlink_down=2)])
    assert [h for h, _ in reports(sent)] == [Health.DEGRADED, Health.DEGRADED]
