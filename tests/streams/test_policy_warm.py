"""A policy runner lets its policy build its tables when a replica is rebuilt or first seen,
so the policy's first decision after a worker starts costs what later ones do (issue 21: a
cold defrag plan at 4,096 racks took 134-192 ms where a warm one takes ~40-70)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rackplane.models import Command, Event
from rackplane.projections import ClusterState
from rackplane.streams.agents import PolicyRunner
from rackplane.streams.replicas import Replicas
from tests.streams.test_controller import PARTITIONS, cluster_on, cordon, register, rig
from tests.streams.test_following import EventsTopic, Sent, decided


class Warmed:
    """A policy that proposes nothing and notes the seq of every state it warmed on."""

    name = "warmed"

    def __init__(self) -> None:
        self.warmed: list[int] = []
        self.offered: list[int] = []

    def warm(self, state: ClusterState) -> None:
        self.warmed.append(state.seq)

    def propose(
        self, state: ClusterState, events: Sequence[Event], *, now: datetime
    ) -> Sequence[Command]:
        self.offered.append(state.seq)
        return []


async def test_a_policy_warms_once_on_a_replica_rebuilt_and_again_after_a_rebalance() -> None:
    r = rig()
    c = cluster_on(0)
    await decided(r, register(c), cordon(c, "r0-n1"))
    topic = EventsTopic(r.log)
    policy = Warmed()
    replicas = Replicas(r.log, partitions=PARTITIONS)  # type: ignore[arg-type]
    runner = PolicyRunner(policy, replicas, Sent())
    await runner.process(topic.records(0))  # the partition is read: a rebuild
    assert policy.warmed == [2] and policy.offered == [2]
    await decided(r, cordon(c, "r0-n2"))
    await runner.process(topic.records(0)[2:])
    assert policy.warmed == [2] and policy.offered == [2, 3]  # a fold, not a rebuild
    replicas.forget()  # a rebalance: the partition is read again
    await decided(r, cordon(c, "r0-n3"))
    await runner.process(topic.records(0)[3:])
    assert policy.warmed == [2, 4] and policy.offered == [2, 3, 4]


async def test_a_policy_that_fails_to_warm_still_decides() -> None:
    r = rig()
    c = cluster_on(0)
    await decided(r, register(c))
    policy = Warmed()

    def broken(state: ClusterState) -> None:
        raise RuntimeError("no tables today")

    policy.warm = broken  # type: ignore[method-assign]
    runner = PolicyRunner(policy, Replicas(r.log, partitions=PARTITIONS), Sent())  # type: ignore[arg-type]
    await runner.process(EventsTopic(r.log).records(0))
    assert policy.offered == [1]
