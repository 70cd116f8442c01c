"""`rackplane demo`: a short story on the example cluster, in-process (no broker).

The story, in virtual time: register the cluster; submit a hero run, mid-size, small,
interactive and inference jobs; fail nodes under the hero run (swaps, then a migration);
finish jobs so free nodes scatter; a 16-node job arrives and Auto Defrag makes room for it.
Each step prints what the control plane decided and why; the end prints the occupancy.

On another cluster the story keeps its shape and scales its jobs: the example holds 128
slices (128 racks with room for one slice of 16 beside their spares); a cluster that holds n
slices gets a hero run of about n/4 slices (at least one) and n/128 times as many other jobs.
A cluster with no rack that holds one slice beside its spares has no story: refused in a line.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple

import typer
from rich.table import Table

from rackplane.cli._render import console, fail, occupancy_table, pod_table, summary_table
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
from rackplane.projections import cluster_summary, rack_occupancy

if TYPE_CHECKING:  # the engine, its policies and the importers load when the story runs
    from rackplane.engine import Engine
    from rackplane.importers import ClusterFile

DEFAULT_CLUSTER = Path("examples/gb200-128.yaml")
START = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
EXAMPLE_SLICES = 128
"""Slices the example cluster holds beside its spares: the workload's scale of 1."""


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
        """Start every placed job, in submission order: the state's map iterates in hash
        order, and each command moves the clock, so any other order changes the story."""
        placed = [j for j in self.engine.state.jobs.values() if j.status.value == "placed"]
        for job in sorted(placed, key=lambda j: j.order):
            self.send(StartJob, actor="runtime", job=job.id)

    def say(self, step: str, events: list[Event], *kinds: str) -> None:
        console.print(f"[bold cyan]{step}[/]")
        for e in events:
            if e.type in kinds:
                text = getattr(e, "explanation", "") or getattr(e, "reason", "")
                who = getattr(e, "job", None) or getattr(e, "node", "")
                console.print(f"  [green]{e.type}[/] {who}: {text}", highlight=False)


class _Scale(NamedTuple):
    """How big the story's jobs are on one cluster (the example: 512, 54, 80, 64)."""

    slice_size: int
    hero_nodes: int
    mid: int
    small: int
    batches: int

    @property
    def hero(self) -> str:
        return f"hero-{self.hero_nodes}"


def _scale(topo: ClusterFile, source: Path) -> _Scale:
    """The story's sizes for `topo`, or a one-line refusal when no rack holds a slice."""
    size, spares = topo.policy.slice_size, topo.policy.spares_per_rack
    rooms = [len(r.nodes) - spares for r in topo.topology.racks]
    slices = sum(max(0, room) // size for room in rooms)
    if slices == 0:
        fail(
            f"demo: {source}: no rack has room for a slice of {size} nodes (slice_size) beside "
            f"its {spares} spares (the largest room is {max(max(rooms), 0)}); the story's jobs "
            "need one"
        )
    ratio = slices / EXAMPLE_SLICES
    return _Scale(
        slice_size=size,
        hero_nodes=size * max(1, round(slices / 4)),
        mid=round(54 * ratio),
        small=round(80 * ratio),
        batches=max(1, round(64 * ratio)),
    )


def _workload(rng: random.Random, scale: _Scale) -> Iterator[JobSpec]:
    ckpt = timedelta(minutes=30)
    yield JobSpec(
        id=scale.hero,
        name=f"pretrain {scale.hero_nodes} nodes",
        owner="llm-team",
        nodes=scale.hero_nodes,
        priority=10,
        checkpoint_interval=ckpt,
    )
    for i in range(scale.mid):
        yield JobSpec(
            id=f"mid-{i:02d}",
            owner="research",
            nodes=rng.choice([16, 16, 16, 32]),
            priority=5,
            checkpoint_interval=ckpt,
        )
    for i in range(scale.small):
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
    cluster: Annotated[
        Path, typer.Option(help="Cluster file (or the name of one in examples/) of the story.")
    ] = DEFAULT_CLUSTER,
    seed: Annotated[int, typer.Option(help="Seed of the generated workload.")] = 7,
    all_racks: Annotated[bool, typer.Option(help="Print every rack, not only the story's.")] = (
        False
    ),
) -> None:
    """Run a short in-process story: placement, failures, swaps, a migration, a defrag."""
    from rackplane.engine import Engine
    from rackplane.importers import TopologyFileError, load_cluster_file
    from rackplane.policies import default_policies

    path = _cluster_path(cluster)
    try:
        topo = load_cluster_file(path)
    except TopologyFileError as err:
        fail(str(err))
    except OSError as err:
        fail(f"--cluster: cannot read {path}: {err.strerror or err}")
    scale = _scale(topo, path)
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
    for spec in _workload(rng, scale):
        submitted += story.send(SubmitJob, actor=f"user:{spec.owner}", job=spec)
    story.start_placed()
    placed = sum(1 for e in submitted if e.type == "JobPlaced")
    blocked = sum(1 for e in submitted if e.type == "JobBlocked")
    console.print(f"[bold cyan]1. Workload[/]: {_n(placed, 'job')} placed, {blocked} blocked")
    hero = engine.state.jobs.get(scale.hero)
    if hero is None or not hero.slices:
        why = next((_text(e) for e in submitted if _names(e, scale.hero)), "it was not placed")
        fail(f"demo: {scale.hero} has no nodes on {t.cluster}: {why}")
    pods = sorted({engine.state.racks[s.racks[0]].pod for s in hero.slices})
    console.print(
        f"  {scale.hero}: {_n(len(hero.slices), 'slice')} of {scale.slice_size} on "
        f"{_n(len({s.racks[0] for s in hero.slices}), 'rack')} in pods {', '.join(pods)}; every "
        "slice inside one rack"
    )
    victim_rack = _fail_under_hero(story, scale.hero, topo.policy.spares_per_rack)

    clock.now += timedelta(hours=2)
    running = sorted(  # the state's map iterates in hash order (see `start_placed`)
        j.id
        for j in engine.state.jobs.values()
        if j.id.startswith("small-") and j.status.value == "running"
    )
    ended = rng.sample(running, k=len(running) // 2)
    for job_id in ended:
        story.send(CompleteJob, actor="runtime", job=job_id)
    summary = cluster_summary(engine.state)
    console.print(
        f"[bold cyan]5. {len(ended)} small jobs end at different times[/]: "
        f"{summary.free} nodes free above the spares, scattered over racks"
    )
    clock.now += timedelta(minutes=10)
    _batches(story, scale)

    rows = rack_occupancy(engine.state)
    touched = {victim_rack} | {r for e in story.planned for r in e.target_racks}
    now_hero = engine.state.jobs.get(scale.hero)
    touched |= {s.racks[0] for s in (now_hero.slices[:1] if now_hero else ())}
    console.print(pod_table(rows))
    shown = rows if all_racks else [r for r in rows if r.rack in touched or r.failed]
    console.print(
        occupancy_table(shown, "Racks of the story" if not all_racks else "Rack occupancy")
    )
    console.print(summary_table(cluster_summary(engine.state)))
    console.print(_decisions(story.counts))


def _cluster_path(cluster: Path) -> Path:
    """`--cluster` as a file: a path, or the bare name of an example (`gb200-128`); one line
    naming what is missing when it is neither."""
    if cluster.exists():
        if cluster.is_dir():
            fail(f"--cluster: {cluster} is a directory; expected a cluster file")
        return cluster
    example = DEFAULT_CLUSTER.parent / f"{cluster.name}.yaml"
    if cluster.name == str(cluster) and not cluster.suffix and example.is_file():
        return example
    hint = (
        " (run from the repository root, or pass --cluster FILE)"
        if cluster == DEFAULT_CLUSTER
        else f": neither a file nor an example ({example})"
        if cluster.name == str(cluster) and not cluster.suffix
        else ""
    )
    fail(f"--cluster: no cluster file {cluster}{hint}")


_CAUSES = (
    "XID 79: GPU fell off the bus",
    "XID 48: double-bit ECC error",
    "XID 94: contained ECC error",
)


def _fail_under_hero(story: _Story, hero: str, spares: int) -> str:
    """Steps 2-4: three nodes under the hero's first slice fail; return the first one's rack."""
    titles = (
        "2. A node of {hero} fails in {rack}",
        "3. A second failure under the same slice",
        "4. A third failure under the same slice"
        + (": the rack has no spare left" if spares == 2 else ""),
    )
    kinds = (("NodeSwapped",),) * 2 + (
        ("NodeSwapped", "SliceMigrated", "SliceDegraded", "JobPreempted"),
    )
    first_rack = ""
    for k, (title, cause, shown) in enumerate(zip(titles, _CAUSES, kinds, strict=True)):
        job = story.engine.state.jobs.get(hero)
        if job is None or not job.slices:
            console.print(
                f"[bold cyan]{title.format(hero=hero, rack=first_rack)}[/]: skipped, "
                f"{hero} holds no nodes now",
                highlight=False,
            )
            continue
        s0 = job.slices[0]
        first_rack = first_rack or s0.racks[0]
        events = story.send(
            ReportNodeHealth,
            actor="gpu_manager",
            node=s0.nodes[(5 + k) % len(s0.nodes)],
            health=Health.FAILED,
            cause=cause,
        )
        story.say(title.format(hero=hero, rack=first_rack), events, *shown)
    return first_rack


def _batches(story: _Story, scale: _Scale) -> None:
    """Step 6: slice-sized jobs arrive until one waits; Auto Defrag makes room for some."""
    size = scale.slice_size
    console.print(f"[bold cyan]6. {size}-node jobs keep arriving[/]")
    for batch in range(scale.batches):
        spec = JobSpec(
            id=f"batch-{batch:02d}",
            owner="research",
            nodes=size,
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
            story.say(f"  {spec.id} waits", events, "JobBlocked", "CommandRejected")
            break
        story.start_placed()
        story.clock.now += timedelta(minutes=1)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def _names(event: Event, job: str) -> bool:
    return getattr(event, "job", None) == job and event.type in ("JobBlocked", "CommandRejected")


def _text(event: Event) -> str:
    return " ".join(str(getattr(event, "explanation", "") or getattr(event, "reason", "")).split())


def _decisions(counts: Counter[str]) -> Table:
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
        table.add_row(kind, str(counts[kind]))
    return table
