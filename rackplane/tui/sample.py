"""A seeded story for the console without a broker (`rackplane tui --demo`, tests, benchmarks).

The in-process engine runs the production policies over a synthetic cluster in virtual time:
a hero run and smaller jobs are placed; nodes of the hero run fail (hot swaps, then the rack is
out of spares); jobs finish so free nodes scatter; a 16-node job arrives (Auto Defrag makes room
when needed), a low-priority 32-node job stays blocked by topology and a huge one by capacity;
in the last hour a node degrades, two are cordoned, a rack spends both spares on swaps, a node
flaps, and an operator's bad command is rejected. Same seed, same events (any hash seed).
`demo_source` adds queues (`_share`: a small quota tree, a few jobs in it, one borrowing, some
waiting) and goes on from there: the operator's commands go through the same engine.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from rackplane.engine import Engine
from rackplane.models import (
    CancelJob,
    Command,
    CompleteJob,
    ConfigurePolicy,
    CordonNode,
    Event,
    Health,
    JobKind,
    JobSpec,
    PolicySettings,
    QueueSpec,
    Rack,
    RegisterTopology,
    RepairNode,
    ReportNodeHealth,
    StartJob,
    SubmitJob,
    Topology,
)
from rackplane.policies import default_policies
from rackplane.tui.sources import EngineSource

START = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def sample_topology(racks: int, nodes: int = 18, per_pod: int = 8, cluster: str = "") -> Topology:
    """`racks` racks of `nodes` nodes, `per_pod` racks per pod (ids r000, r000n00)."""
    return Topology(
        cluster=cluster or f"demo-{racks}",
        racks=tuple(
            Rack(
                id=f"r{r:03d}",
                pod=f"p{r // per_pod:02d}",
                nodes=tuple(f"r{r:03d}n{i:02d}" for i in range(nodes)),
            )
            for r in range(racks)
        ),
    )


class _Story:
    def __init__(self, racks: int, defrag: bool) -> None:
        self.now = START
        self.topology = sample_topology(racks)
        policies = [p for p in default_policies() if defrag or p.name != "defrag"]
        self.engine = Engine(self.topology.cluster, clock=lambda: self.now, policies=policies)
        self.ids = itertools.count(1)
        self.events: list[Event] = []

    def send(
        self, make: type[Command], actor: str = "operator:demo", **fields: object
    ) -> list[Event]:
        command = make(
            id=f"demo-{next(self.ids)}", cluster=self.topology.cluster, actor=actor, **fields
        )
        events = self.engine.handle(command)
        self.events += events
        self.now += timedelta(seconds=30)
        return events

    def start_placed(self) -> None:
        jobs = self.engine.state.jobs.values()
        for job in sorted(j.id for j in jobs if j.status.value == "placed"):
            self.send(StartJob, actor="runtime", job=job)

    def health(self, node: str, health: Health, cause: str) -> None:
        self.send(ReportNodeHealth, actor="gpu_manager", node=node, health=health, cause=cause)


def sample_events(racks: int = 16, seed: int = 7, *, defrag: bool = True) -> list[Event]:
    """The story's events on `racks` racks (at least 8); without Auto Defrag (`defrag=False`)
    the jobs blocked by topology stay blocked, for an operator to defrag."""
    return _told(racks, seed, defrag).events


def demo_source(
    racks: int = 16, seed: int = 7, *, clock: Callable[[], datetime] | None = None
) -> EngineSource:
    """The story, then the in-process engine where it ends, for the console's commands
    (`rackplane tui --demo`): a cordon or a rack fault is decided and applied, the policies
    react as in the pipeline, and the console shows it.

    Args:
        racks: the story's racks (at least 8).
        seed: the story's seed.
        clock: "now" for the operator's commands; by default time goes on from the story's
            end at the wall clock's pace.
    """
    s = _told(racks, seed, defrag=True)
    _share(s)
    if clock is None:
        end, started = s.now, time.monotonic()

        def clock() -> datetime:
            return end + timedelta(seconds=time.monotonic() - started)

    s.engine.clock = clock
    return EngineSource(s.engine, s.events, description=f"demo ({racks} racks, in-process engine)")


def _told(racks: int, seed: int, defrag: bool) -> _Story:
    s = _Story(racks, defrag)
    rng = random.Random(seed)
    ckpt = timedelta(minutes=30)
    s.send(RegisterTopology, topology=s.topology, settings=PolicySettings(spares_per_rack=2))
    specs = [
        JobSpec(id="hero", nodes=16 * max(2, racks // 4), priority=10, checkpoint_interval=ckpt)
    ]
    specs += [JobSpec(id=f"mid-{i:02d}", nodes=16, priority=5, checkpoint_interval=ckpt)
              for i in range(max(1, racks // 4))]  # fmt: skip
    specs += [
        JobSpec(id=f"small-{i:02d}", nodes=rng.randint(1, 8), slice_size=8, priority=1,
                checkpoint_interval=timedelta(minutes=20))
        for i in range(racks * 2)
    ]  # fmt: skip
    specs += [JobSpec(id=f"dev-{i}", nodes=2, slice_size=2, kind=JobKind.INTERACTIVE, priority=3)
              for i in range(3)]  # fmt: skip
    specs += [JobSpec(id="serve-0", nodes=4, slice_size=4, kind=JobKind.INFERENCE, priority=8)]
    for spec in specs:
        s.send(SubmitJob, actor=f"user:{spec.owner}", job=spec)
    s.start_placed()
    for k, cause in enumerate(("XID 79: GPU fell off the bus", "XID 48: double-bit ECC error",
                               "XID 94: contained ECC error")):  # fmt: skip
        node = s.engine.state.jobs["hero"].slices[0].nodes[5 + k]
        s.health(node, Health.FAILED, cause)
    s.start_placed()
    small = sorted(j for j in s.engine.state.jobs if j.startswith("small-"))
    for job in rng.sample(small, k=len(small) // 2):
        if job in s.engine.state.jobs:
            s.send(CompleteJob, actor="runtime", job=job)
    s.send(SubmitJob, actor="user:research", job=JobSpec(id="late-16", nodes=16, priority=6,
                                                         checkpoint_interval=ckpt))  # fmt: skip
    s.send(SubmitJob, actor="user:intern", job=JobSpec(id="wait-32", nodes=32, priority=0))
    big = JobSpec(id="wait-big", nodes=16 * (racks // 2), priority=-1, checkpoint_interval=ckpt)
    s.send(SubmitJob, actor="user:llm-team", job=big)
    s.start_placed()
    # The last hour: a degraded node, cordons, a rack that spends both spares, a flapping node,
    # an operator's typo; then a quiet quarter of an hour.
    mids = sorted(n.id for n in s.engine.state.nodes.values() if (n.job or "").startswith("mid-"))
    s.health(mids[3], Health.DEGRADED, "XID 63: ECC page retirement pending")
    free = sorted(n for r in s.engine.state.racks.values() for n in r.free)
    s.send(CordonNode, node=free[0], reason="fan noise: ticket 4711")
    for node, cause in ((mids[-2], "XID 79: GPU fell off the bus"), (mids[-3], "XID 48: ECC")):
        s.health(node, Health.FAILED, cause)
    flapper = free[-1]
    for _ in range(2):
        s.health(flapper, Health.FAILED, "XID 79: GPU fell off the bus")
        s.send(RepairNode, actor="operator:demo", node=flapper, note="reseated")
    s.send(CancelJob, job="no-such-job", reason="typo")
    s.now += timedelta(minutes=15)
    s.send(CordonNode, node=free[1], reason="firmware update")
    return s


DEMO_QUEUES = (
    QueueSpec(name="research"),
    QueueSpec(name="pretrain", parent="research", nominal_nodes=8),
    QueueSpec(name="rl", parent="research", nominal_nodes=4, borrowing_limit=4),
    QueueSpec(name="prod"),
    QueueSpec(name="serving", parent="prod", nominal_nodes=4, lending_limit=2, weight=2,
              kinds=(JobKind.INFERENCE,)),
)  # fmt: skip
"""The demo's queue tree (in nodes): the story's jobs stay outside it (they name no queue);
new ones, the console's submissions too, go to `rl` unless they name a queue."""


def _share(s: _Story) -> None:
    """Set the queues and submit a few jobs into them: on 16 racks pretrain borrows 4 nodes
    above its quota, rl waits for room, and jobs past a borrowing limit wait for quota."""
    settings = s.engine.state.settings
    s.send(ConfigurePolicy, settings=settings.model_copy(
        update={"queues": DEMO_QUEUES, "default_queue": "rl"}))  # fmt: skip
    ckpt = timedelta(minutes=30)
    for spec in (
        JobSpec(id="pt-a", nodes=8, slice_size=2, priority=4, queue="pretrain",
                checkpoint_interval=ckpt),
        JobSpec(id="pt-b", nodes=4, slice_size=2, priority=4, queue="pretrain",
                checkpoint_interval=ckpt),
        JobSpec(id="rl-a", nodes=4, slice_size=2, priority=2, queue="rl",
                checkpoint_interval=ckpt),
        JobSpec(id="rl-b", nodes=8, slice_size=2, priority=2, queue="rl",
                checkpoint_interval=ckpt),
        JobSpec(id="serve-q", nodes=2, slice_size=2, kind=JobKind.INFERENCE, priority=8,
                queue="serving"),
        JobSpec(id="pt-big", nodes=32, priority=3, queue="pretrain", checkpoint_interval=ckpt),
    ):  # fmt: skip
        s.send(SubmitJob, actor=f"user:{spec.queue}", job=spec)
    s.start_placed()
