"""`rackplane demo`: a short story on the example cluster, in-process (no broker).

The story, in virtual time: register the cluster; submit a hero run, mid-size, small,
interactive and inference jobs; fail nodes under the hero run (swaps, then a migration);
finish jobs so free nodes scatter; a 16-node job arrives and Auto Defrag makes room for it.
Each step prints what the control plane decided and why; the end prints the occupancy.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rackplane.cli._render import console, fail, occupancy_table, pod_table, summary_table
from rackplane.engine import Engine
from rackplane.importers import TopologyFileError, load_cluster_file
from rackplane.models import (
    Command,
    CompleteJob,
    DefragPlanned,
    Event,
    Health,
    JobKind,
    JobSpec,
    RegisterTopology,
    ReportNodeHealth,
    StartJob,
    SubmitJob,
)
from rackplane.policies import default_policies
from rackplane.projections import cluster_summary, rack_occupancy

DEFAULT_CLUSTER = Path("examples/gb200-128.yaml")
START = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class _Story:
    def __init__(self, engine: Engine, clock: _Clock) -> None:
        self.engine = engine
        self.clock = clock
        self.ids = itertools.count(1)
        self.counts: Counter[str] = Counter()
        self.planned: list[DefragPlanned] = []

    def send(
        self, make: type[Command], actor: str = "operator:demo", **fields: object
    ) -> list[Event]:
        command = make(
            id=f"demo-{next(self.ids)}", cluster=self.engine.state.cluster, actor=actor, **fields
        )
        events = self.engine.handle(command)
        self.counts.update(e.type for e in events)
        self.planned += [e for e in events if isinstance(e, DefragPlanned)]
        self.clock.now += timedelta(seconds=30)
        return events

    def start_placed(self) -> None:
        for job in [j for j in self.engine.state.jobs.values() if j.status.value == "placed"]:
            self.send(StartJob, actor="runtime", job=job.id)

    def say(self, step: str, events: list[Event], *kinds: str) -> None:
        console.print(f"[bold cyan]{step}[/]")
        for e in events:
            if e.type in kinds:
                text = getattr(e, "explanation", "") or getattr(e, "reason", "")
                who = getattr(e, "job", None) or getattr(e, "node", "")
                console.print(f"  [green]{e.type}[/] {who}: {text}", highlight=False)


def _workload(rng: random.Random) -> Iterator[JobSpec]:
    ckpt = timedelta(minutes=30)
    yield JobSpec(
        id="hero-512",
        name="pretrain 512 nodes",
        owner="llm-team",
        nodes=512,
        priority=10,
        checkpoint_interval=ckpt,
    )
    for i in range(54):
        yield JobSpec(
            id=f"mid-{i:02d}",
            owner="research",
            nodes=rng.choice([16, 16, 16, 32]),
            priority=5,
            checkpoint_interval=ckpt,
        )
    for i in range(80):
        yield JobSpec(
            id=f"small-{i:02d}",
            owner="research",
            nodes=rng.randint(1, 8),
            slice_size=8,
            priority=1,
            checkpoint_interval=timedelta(minutes=20),
        )
    for i in range(6):
        yield JobSpec(
            id=f"dev-{i}",
            owner=f"user{i}",
            nodes=rng.choice([1, 2, 4]),
            kind=JobKind.INTERACTIVE,
            slice_size=4,
            priority=3,
        )
    for i in range(3):
        yield JobSpec(
            id=f"serve-{i}",
            owner="inference",
            nodes=4,
            slice_size=4,
            kind=JobKind.INFERENCE,
            priority=8,
        )


def demo(
    cluster: Annotated[Path, typer.Option(help="Cluster file to run the story on.")] = (
        DEFAULT_CLUSTER
    ),
    seed: Annotated[int, typer.Option(help="Seed of the generated workload.")] = 7,
    all_racks: Annotated[bool, typer.Option(help="Print every rack, not only the story's.")] = (
        False
    ),
) -> None:
    """Run a short in-process story: placement, failures, swaps, a migration, a defrag."""
    try:
        topo = load_cluster_file(cluster)
    except (TopologyFileError, OSError) as err:
        fail(f"{err} (run from the repository root, or pass --cluster FILE)")
    clock = _Clock()
    engine = Engine(topo.topology.cluster, clock=clock, policies=default_policies())
    story = _Story(engine, clock)
    rng = random.Random(seed)

    story.send(RegisterTopology, topology=topo.topology, settings=topo.policy)
    t = topo.topology
    console.print(
        f"[bold]Cluster {t.cluster}[/]: {len(t.racks)} racks, {t.node_count:,} nodes, "
        f"{t.gpu_count:,} GPUs; {topo.policy.spares_per_rack} spares per rack, "
        f"slices of {topo.policy.slice_size}"
    )
    submitted = []
    for spec in _workload(rng):
        submitted += story.send(SubmitJob, actor=f"user:{spec.owner}", job=spec)
    story.start_placed()
    placed = sum(1 for e in submitted if e.type == "JobPlaced")
    blocked = sum(1 for e in submitted if e.type == "JobBlocked")
    console.print(f"[bold cyan]1. Workload[/]: {placed} jobs placed, {blocked} blocked")
    hero = engine.state.jobs["hero-512"]
    pods = sorted({engine.state.racks[s.racks[0]].pod for s in hero.slices})
    console.print(
        f"  hero-512: {len(hero.slices)} slices of 16 on {len({s.racks[0] for s in hero.slices})}"
        f" racks in pods {', '.join(pods)}; every slice inside one rack"
    )

    s0 = hero.slices[0]
    victim_rack = s0.racks[0]
    events = story.send(
        ReportNodeHealth,
        actor="gpu_manager",
        node=s0.nodes[5],
        health=Health.FAILED,
        cause="XID 79: GPU fell off the bus",
    )
    story.say(f"2. A node of hero-512 fails in {victim_rack}", events, "NodeSwapped")
    events = story.send(
        ReportNodeHealth,
        actor="gpu_manager",
        node=engine.state.jobs["hero-512"].slices[0].nodes[6],
        health=Health.FAILED,
        cause="XID 48: double-bit ECC error",
    )
    story.say("3. A second failure in the same rack", events, "NodeSwapped")
    events = story.send(
        ReportNodeHealth,
        actor="gpu_manager",
        node=engine.state.jobs["hero-512"].slices[0].nodes[7],
        health=Health.FAILED,
        cause="XID 94: contained ECC error",
    )
    story.say(
        "4. A third failure: the rack has no spare left",
        events,
        "SliceMigrated",
        "SliceDegraded",
        "JobPreempted",
    )

    clock.now += timedelta(hours=2)
    running = [
        j.id
        for j in engine.state.jobs.values()
        if j.id.startswith("small-") and j.status.value == "running"
    ]
    ended = rng.sample(running, k=len(running) // 2)
    for job_id in ended:
        story.send(CompleteJob, actor="runtime", job=job_id)
    summary = cluster_summary(engine.state)
    console.print(
        f"[bold cyan]5. {len(ended)} small jobs end at different times[/]: "
        f"{summary.free} nodes free above the spares, scattered over racks"
    )
    clock.now += timedelta(minutes=10)
    console.print("[bold cyan]6. 16-node jobs keep arriving[/]")
    for batch in range(64):
        spec = JobSpec(
            id=f"batch-{batch:02d}",
            owner="research",
            nodes=16,
            priority=5,
            checkpoint_interval=timedelta(minutes=30),
        )
        events = story.send(SubmitJob, actor="user:research", job=spec)
        kinds = {e.type for e in events}
        plans = [e for e in events if isinstance(e, DefragPlanned)]
        if plans:
            p = plans[0]
            console.print(
                f"  {spec.id} fits no rack: [green]DefragPlanned[/] preempt "
                f"{', '.join(p.victims)} ({p.cost_gpu_hours:.2f} GPU-h), {spec.id} runs on "
                f"{', '.join(p.target_racks)}",
                highlight=False,
            )
        elif "JobPlaced" not in kinds:
            story.say(f"  {spec.id} waits", events, "JobBlocked")
            break
        story.start_placed()
        clock.now += timedelta(minutes=1)

    rows = rack_occupancy(engine.state)
    touched = {victim_rack} | {r for e in story.planned for r in e.target_racks}
    touched |= {s.racks[0] for s in engine.state.jobs["hero-512"].slices[:1]}
    console.print(pod_table(rows))
    shown = rows if all_racks else [r for r in rows if r.rack in touched or r.failed]
    console.print(
        occupancy_table(shown, "Racks of the story" if not all_racks else "Rack occupancy")
    )
    console.print(summary_table(cluster_summary(engine.state)))
    table = Table(title="Decisions", title_justify="left", header_style="bold")
    table.add_column("event")
    table.add_column("count", justify="right")
    for kind in (
        "JobPlaced",
        "JobBlocked",
        "NodeSwapped",
        "SliceMigrated",
        "SliceDegraded",
        "DefragPlanned",
        "JobPreempted",
        "CommandRejected",
    ):
        table.add_row(kind, str(story.counts[kind]))
    console.print(table)
