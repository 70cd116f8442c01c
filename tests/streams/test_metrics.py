"""What `/metrics` shows without a broker: per-rack nodes, fragmentation, blocked jobs, event and
rejection counters, command->event latency; held clusters only, idle ones too.

The cluster of these tests (4 racks x 6 nodes, 2 pods, 1 spare per rack, slices of 4):

    pod p0: r0 [......]  r1 [......]      pod p1: r2 [......]  r3 [......]
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from rackplane.engine import Engine
from rackplane.models import (
    CordonNode,
    Event,
    Health,
    JobPlaced,
    JobSpec,
    PolicySettings,
    RackHealth,
    RegisterTopology,
    ReportNodeHealth,
    ReportRackHealth,
    SubmitJob,
)
from rackplane.policies import TopologyAwareScheduler
from rackplane.projections import rack_occupancy
from rackplane.streams._latency import TimedAppender
from rackplane.streams._metrics import CountingSender, fragmentation, reason_class
from rackplane.streams.codec import encode_event
from rackplane.streams.eventlog import partition_for
from rackplane.streams.projection_agent import Metrics, Projections
from rackplane.streams.replicas import Replicas
from tests.streams.conftest import small_topology
from tests.streams.test_controller import (
    PARTITIONS,
    MemoryLog,
    Rejected,
    cluster_on,
    register,
    rig,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)


class Story:
    """A cluster driven by the in-process engine, its events written to a `MemoryLog`."""

    def __init__(self, cluster: str, log: MemoryLog) -> None:
        self.cluster = cluster
        self.log = log
        self.now = T0
        self.engine = Engine(cluster, clock=lambda: self.now, policies=[TopologyAwareScheduler()])
        self.ids = iter(range(1, 10**6))
        self.pending: list[Event] = []

    def _command_fields(self) -> dict[str, Any]:
        self.now += timedelta(seconds=10)
        return {"id": f"cmd-{next(self.ids)}", "cluster": self.cluster, "actor": "operator:t"}

    def run(self, command: Any) -> list[Event]:
        events = self.engine.handle(command)
        p = partition_for(self.cluster, PARTITIONS)
        for e in events:
            self.log.records[p].append((self.cluster.encode(), encode_event(e)))
        self.pending.extend(events)
        return events

    def register(self) -> None:
        self.run(
            RegisterTopology(
                **self._command_fields(),
                topology=small_topology(self.cluster),
                settings=PolicySettings(spares_per_rack=1, slice_size=4),
            )
        )

    def submit(self, job: str, nodes: int) -> list[Event]:
        spec = JobSpec(id=job, nodes=nodes, slice_size=4)
        return self.run(SubmitJob(**self._command_fields(), job=spec))

    def fail(self, node: str) -> None:
        self.run(ReportNodeHealth(**self._command_fields(), node=node, health=Health.FAILED))

    def messages(self) -> list[Any]:
        """The events not yet handed to the projections, as consumed records."""
        p = partition_for(self.cluster, PARTITIONS)
        start = len(self.log.records[p]) - len(self.pending)
        out = [
            SimpleNamespace(
                message=SimpleNamespace(
                    key=self.cluster.encode(), value=v, partition=p, offset=start + i, headers=[]
                )
            )
            for i, (_, v) in enumerate(self.log.records[p][start:])
        ]
        self.pending = []
        return out


def projections(log: MemoryLog, sent: Rejected | None = None) -> Projections:
    """The projections agent over `log`; what it rejects goes to `sent`, counted."""
    replicas = Replicas(log, partitions=PARTITIONS)  # type: ignore[arg-type]
    metrics = Metrics()
    rejected = metrics.rejections(sent if sent is not None else Rejected())
    return Projections(
        replicas, {}, {}, rejected, topic="t.events", limit=1_048_576, metrics=metrics
    )


def samples(p: Projections) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of `/metrics` as (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(p.metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def series(p: Projections, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of `name` whose labels include `labels`."""
    return {k: v for (n, k), v in samples(p).items() if n == name and set(labels.items()) <= set(k)}


@pytest.mark.parametrize(
    ("free", "size", "want_index", "want_slices"),
    [
        pytest.param([], 4, 0.0, 0, id="nothing free: not fragmented"),
        pytest.param([8, 4], 4, 0.0, 3, id="every free node in a full slice"),
        pytest.param([3, 3, 3], 4, 1.0, 0, id="9 free, no rack holds a slice"),
        pytest.param([5, 1], 4, 1 / 3, 1, id="one slice of 6 free nodes"),
    ],
)
def test_fragmentation_is_the_share_of_free_nodes_outside_full_slices(
    free: list[int], size: int, want_index: float, want_slices: int
) -> None:
    index, slices = fragmentation(free, size)
    assert index == pytest.approx(want_index) and slices == want_slices


async def test_metrics_show_each_rack_pod_fragmentation_and_blocked_jobs() -> None:
    log = MemoryLog()
    c = cluster_on(0)
    story = Story(c, log)
    story.register()
    placed = [e for e in story.submit("a", 4) if isinstance(e, JobPlaced)]
    rack_of_a = placed[0].slices[0].racks[0]
    story.fail(f"{'r3' if rack_of_a != 'r3' else 'r2'}-n0")
    story.submit("big", 20)  # 5 slices of 4; 4 racks of room: waits
    p = projections(log)
    await p.process(story.messages())

    state = story.engine.state
    for row in rack_occupancy(state):
        for role in ("free", "allocated", "spare", "failed", "unavailable"):
            got = series(p, "rackplane_rack_nodes", cluster=c, rack=row.rack, role=role)
            assert list(got.values()) == [getattr(row, role)], (row.rack, role)
            assert dict(next(iter(got))).get("pod") == row.pod
    allocated = series(p, "rackplane_rack_nodes", cluster=c, rack=rack_of_a, role="allocated")
    assert list(allocated.values()) == [4]

    # free nodes beyond spares, per rack: 6 - 1 spare, less a's 4 and the failed node
    frees = {r.rack: r.free for r in rack_occupancy(state)}
    for pod, racks in (("p0", ("r0", "r1")), ("p1", ("r2", "r3"))):
        want_index, want_slices = fragmentation([frees[r] for r in racks], 4)
        got = series(p, "rackplane_pod_fragmentation_ratio", cluster=c, pod=pod)
        assert list(got.values()) == [pytest.approx(want_index)]
        assert list(series(p, "rackplane_pod_placeable_slices", cluster=c, pod=pod).values()) == [
            want_slices
        ]
    want_cluster = fragmentation(list(frees.values()), 4)[0]
    assert 0 < want_cluster < 1  # a's rack and the failed node strand some free nodes
    assert list(series(p, "rackplane_cluster_fragmentation_ratio", cluster=c).values()) == [
        pytest.approx(want_cluster)
    ]

    big = state.jobs["big"]
    assert big.blocked is not None
    reason = big.blocked.reason
    since = series(p, "rackplane_blocked_job_since_timestamp_seconds", cluster=c, job="big")
    assert list(since.values()) == [big.blocked.since.timestamp()]
    assert dict(next(iter(since)))["reason"] == reason
    assert list(series(p, "rackplane_blocked_job_nodes", cluster=c, job="big").values()) == [20]
    assert not series(p, "rackplane_blocked_job_nodes", cluster=c, job="a")  # placed: not shown


async def test_metrics_count_the_degraded_racks_and_show_them_not_healthy() -> None:
    log = MemoryLog()
    c = cluster_on(0)
    story = Story(c, log)
    story.register()
    for rack, health in (("r1", RackHealth.DEGRADED), ("r2", RackHealth.DEGRADED)):
        story.run(ReportRackHealth(**story._command_fields(), rack=rack, health=health))
    story.run(ReportRackHealth(**story._command_fields(), rack="r3", health=RackHealth.FAILED))
    p = projections(log)
    await p.process(story.messages())
    assert list(series(p, "rackplane_racks_degraded", cluster=c).values()) == [2]
    healthy = {
        dict(k)["rack"]: v for k, v in series(p, "rackplane_rack_healthy", cluster=c).items()
    }
    assert healthy == {"r0": 1.0, "r1": 0.0, "r2": 0.0, "r3": 0.0}
    degraded = series(p, "rackplane_rack_degraded", cluster=c)
    assert {dict(k)["rack"]: v for k, v in degraded.items()} == {
        "r0": 0.0,
        "r1": 1.0,
        "r2": 1.0,
        "r3": 0.0,
    }


async def test_events_rejections_and_health_changes_are_counted_as_they_arrive() -> None:
    log = MemoryLog()
    c = cluster_on(0)
    p = projections(log)
    p.hold(range(PARTITIONS))
    await p.show(range(PARTITIONS))  # taken before the cluster's first event
    story = Story(c, log)
    story.register()
    story.submit("a", 4)
    await p.process(story.messages())
    story.submit("a", 4)  # the same job id again: CommandRejected duplicate_job
    story.fail("r3-n1")
    await p.process(story.messages())

    kinds = Counter(e.type for e in log.events(c))
    for kind, n in kinds.items():
        assert series(p, "rackplane_events_total", cluster=c, type=kind) == {
            (("cluster", c), ("type", kind)): n
        }
    rejected = series(p, "rackplane_commands_rejected_total", cluster=c)
    assert rejected == {(("cluster", c), ("code", "duplicate_job"), ("command", "SubmitJob")): 1.0}
    health = series(p, "rackplane_node_health_changes_total", cluster=c)
    assert len(health) == 24  # every node, from zero
    assert {dict(k)["node"]: v for k, v in health.items() if v} == {"r3-n1": 1.0}
    # a redelivery of the whole log changes no count
    before = samples(p)
    p2 = story.log.records[partition_for(c, PARTITIONS)]
    redelivered = [
        SimpleNamespace(
            message=SimpleNamespace(
                key=k, value=v, partition=partition_for(c, PARTITIONS), offset=i, headers=[]
            )
        )
        for i, (k, v) in enumerate(p2)
    ]
    await p.process(redelivered)
    assert samples(p) == before


async def test_a_held_idle_cluster_is_shown_at_once_and_a_revoked_one_goes() -> None:
    log = MemoryLog()
    here, there = cluster_on(0), cluster_on(1)
    for c in (here, there):
        story = Story(c, log)
        story.register()
        story.submit("a", 4)
    p = projections(log)
    p.hold({0, 1})
    await p.show({0, 1})  # no event delivered: both loaded from the log
    assert sorted(row["cluster"] for row in p.clusters()) == sorted([here, there])
    for c in (here, there):
        assert series(p, "rackplane_nodes", cluster=c, role="allocated") == {
            (("cluster", c), ("role", "allocated")): 4.0
        }
        assert series(p, "rackplane_rack_nodes", cluster=c)

    # only `here` gets new events: `there` is idle and keeps its figures
    story = Story(here, log)
    story.engine = Engine(
        here,
        clock=lambda: story.now,
        policies=[TopologyAwareScheduler()],
        state=p.replicas.states[here],
    )
    story.now, story.ids = T0 + timedelta(hours=1), iter(range(1_000, 2_000))
    story.submit("b", 4)
    await p.process(story.messages())
    assert series(p, "rackplane_nodes", cluster=here, role="allocated") == {
        (("cluster", here), ("role", "allocated")): 8.0
    }
    assert series(p, "rackplane_nodes", cluster=there, role="allocated") == {
        (("cluster", there), ("role", "allocated")): 4.0
    }
    assert series(p, "rackplane_events_total", cluster=here)

    # a rebalance leaves this worker partition 0 only: `there` leaves /metrics at once
    p.replicas.forget()
    p.hold({0})
    got = samples(p)
    assert not [k for k in got if ("cluster", there) in k[1]]
    assert [k for k in got if ("cluster", here) in k[1]]  # kept until reloaded, never stale
    await p.show({0})
    assert [row["cluster"] for row in p.clusters()] == [here]
    assert series(p, "rackplane_nodes", cluster=here, role="allocated") == {
        (("cluster", here), ("role", "allocated")): 8.0
    }


async def test_a_partition_revoked_during_its_load_is_not_shown() -> None:
    log = MemoryLog()
    c = cluster_on(1)
    story = Story(c, log)
    story.register()
    p = projections(log)
    p.hold({0, 1})
    load = p.replicas.load

    async def revoked_meanwhile(partition: int) -> None:
        await load(partition)
        p.hold({0})

    p.replicas.load = revoked_meanwhile  # type: ignore[method-assign]
    await p.show({1})
    assert p.clusters() == [] and not series(p, "rackplane_nodes", cluster=c)


REASONS = {
    "size": ("message of 70,000 bytes exceeds the 65,536-byte limit", "too_large"),
    "event key": ("keyed b'x', not by its cluster: not an event", "wrong_key"),
    "command key": ("record key b'x' is not the command's cluster 'c'", "wrong_key"),
    "partition": ("cluster 'c' lives in partition 1, not 0: commands go", "wrong_partition"),
    "telemetry node": ("node n9 is not in cluster 'c'", "unknown_node"),
    "cluster": ("cluster 'c' does not exist: register its topology first", "unknown_cluster"),
    "seq": ("out of sequence: cluster 'c' is at seq 3", "out_of_sequence"),
    "unregistered": ("cluster 'c' is not registered: not one of its events", "not_registered"),
    "fork": ("events[0] of 'c' forks at seq 4: not decided", "broken_log"),
    "json": ("message: Invalid JSON: expected value at line 1", "invalid"),
}


@pytest.mark.parametrize(("reason", "want"), list(REASONS.values()), ids=list(REASONS))
def test_a_rejection_reason_falls_in_one_bounded_class(reason: str, want: str) -> None:
    assert reason_class(reason) == want


async def test_rejected_input_is_counted_by_agent_source_and_reason_class() -> None:
    log = MemoryLog()
    c = cluster_on(0)
    story = Story(c, log)
    story.register()
    sent = Rejected()
    p = projections(log, sent)
    good = story.messages()
    garbage = SimpleNamespace(
        message=SimpleNamespace(
            key=c.encode(), value=b"{not json", partition=0, offset=9, headers=[]
        )
    )
    miskeyed = SimpleNamespace(
        message=SimpleNamespace(
            key=b"other", value=good[0].message.value, partition=0, offset=10, headers=[]
        )
    )
    await p.process([*good, garbage, miskeyed])
    assert len(sent.records) == 2
    assert series(p, "rackplane_rejected_input_total") == {
        (("agent", "projections"), ("reason", "invalid"), ("source", "t.events")): 1.0,
        (("agent", "projections"), ("reason", "wrong_key"), ("source", "t.events")): 1.0,
    }


async def test_latency_runs_from_the_command_record_to_its_first_event_once() -> None:
    r = rig(fail=1)  # the first append fails: the retry's wait counts too
    observed: list[float] = []
    clock = iter([1_000.5, 1_001.0, 1_002.0, 1_003.0])
    timed = TimedAppender(r.appender, observed.append, clock=lambda: next(clock))
    r.controller.appender = timed
    c = cluster_on(0)
    first = r.message(register(c))
    first.message.timestamp = 1_000.0
    timed.arrived([first])
    await r.send(first)
    timed.decided([first])
    assert observed == [pytest.approx(0.5)]  # one observation: the failed append made none

    again = r.message(register(c))  # a second registration of the same cluster
    again.message.timestamp = 1_000.75
    nobody = r.message(register(cluster_on(1)), partition=0)  # mis-partitioned: no event
    nobody.message.timestamp = 1_000.8
    redelivered = SimpleNamespace(message=SimpleNamespace(**vars(first.message)))
    batch = [redelivered, again, nobody]
    timed.arrived(batch)
    await r.send(*batch)
    timed.decided(batch)
    assert observed == [pytest.approx(0.5), pytest.approx(0.25)]
    assert timed.written == {}

    m = Metrics()
    m.latency.observe(0.02)
    text = m.render().decode()
    assert 'rackplane_command_latency_seconds_bucket{le="0.025"} 1.0' in text
    assert "rackplane_command_latency_seconds_count 1.0" in text


async def test_a_load_the_broker_refuses_leaves_the_cluster_to_its_next_event() -> None:
    log = MemoryLog()
    c = cluster_on(0)
    story = Story(c, log)
    story.register()
    p = projections(log)
    p.hold({0, 1})

    async def away(partition: int) -> None:
        raise KafkaConnectionError("broker went away")

    load = p.replicas.load
    p.replicas.load = away  # type: ignore[method-assign]
    await p.show({0})  # no exception: the worker goes on
    assert p.clusters() == []
    p.replicas.load = load  # type: ignore[method-assign]
    await p.process(story.messages())
    assert [row["cluster"] for row in p.clusters()] == [c]


async def test_the_alerting_rules_use_only_metrics_a_worker_shows() -> None:
    log = MemoryLog()
    c = cluster_on(0)
    story = Story(c, log)
    p = projections(log)
    p.hold({0, 1})
    await p.show({0, 1})
    story.register()
    story.submit("a", 4)
    story.submit("big", 20)  # waits: 5 slices of 4, 16 nodes free beyond spares
    story.fail("r0-n0")
    await p.process(story.messages())
    garbage = SimpleNamespace(
        message=SimpleNamespace(key=c.encode(), value=b"{", partition=0, offset=99, headers=[])
    )
    await p.process([garbage])  # rejected input
    shown = {name for name, _ in samples(p)}
    rules = (
        Path(__file__).parents[2] / "deploy" / "prometheus" / "rackplane-rules.yml"
    ).read_text()
    used = set(re.findall(r"\brackplane_[a-z_]+", rules))
    assert used and used <= shown, used - shown


async def test_the_controllers_refusals_fall_in_their_classes() -> None:
    r = rig()
    counts: Counter[tuple[str, str, str]] = Counter()
    r.controller.rejected = CountingSender(r.rejected, counts)
    c = cluster_on(0)
    await r.send(
        r.message(register(c), key=b"someone-else"),
        r.message(register(c), partition=1),
        r.message(register(c)),
    )
    ghost = CordonNode(id="x-1", cluster=cluster_on(0, 1), actor="operator:t", node="r0-n0")
    await r.send(r.message(ghost))  # a cluster never registered
    topic = "t.commands"
    assert counts == {
        ("controller", topic, "wrong_key"): 1,
        ("controller", topic, "wrong_partition"): 1,
        ("controller", topic, "unknown_cluster"): 1,
    }
