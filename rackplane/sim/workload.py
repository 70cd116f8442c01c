"""The workload: synthetic job classes, inline job lists and trace CSVs, turned into arrivals.

Synthetic classes arrive as Poisson processes (`arrivals_per_day`, or per 1,000 nodes of the
cluster when `rate_basis: per_1000_nodes`), each job drawing its size from `nodes` (a number,
a list to choose from, or `{min, max}`) and its duration from a lognormal. `DEFAULT_CLASSES`
is a mix for a training cluster (rates per 1,000 nodes): hero runs of 64-512 nodes that run
for days, mid-size runs of 16-32, small jobs of 1-8, interactive sessions of 1-2 nodes for a
working day, and inference services of 2-16 nodes that stay up for a week.

A trace CSV has one job per row, with a header naming the columns:

| column | meaning | required |
|---|---|---|
| `submit_hours` | arrival, in hours after the start of the run | yes |
| `nodes` | nodes the job asks for | yes |
| `duration_hours` | work at full speed, in hours (wall time of a session or service) | yes |
| `kind` | `managed`, `interactive` or `inference` | no (managed) |
| `priority` | -1000..1000, higher first | no (0) |
| `checkpoint_minutes` | checkpoint interval; empty: none (a restart loses the whole run) | no |
| `class` | the class its metrics are reported under | no (by size) |
| `slice_size` | nodes per slice | no (the cluster's) |
| `min_nodes_per_slice` | allows degraded running (NTP) down to this | no |
| `queue` | the leaf queue it is submitted to (`policy.queues`) | no (the default queue) |

Lines starting with `#` are comments. The same fields make an inline `jobs:` list. A class
or a job may name the leaf queue of the cluster's queue tree its jobs go to (`queue`), so
several teams share one cluster; `scenario` checks that the tree has it.
Arrivals are drawn from `random.Random(f"{seed}:workload")`: the same for every policy.
"""

from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rackplane.models import DEFAULT_SLICE_SIZE, JobKind, JobSpec, QueueName

HERO_NODES = 64
"""Jobs of at least this many nodes are reported as hero runs when no class says."""


class NodeRange(BaseModel):
    """Uniformly between `min` and `max` nodes (inclusive), in multiples of `step`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min: int = Field(ge=1)
    max: int = Field(ge=1)
    step: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> NodeRange:
        if self.max < self.min:
            raise ValueError("max must be at least min")
        return self


class Duration(BaseModel):
    """A lognormal duration (median and sigma of the log), optionally capped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    median: float = Field(gt=0)
    sigma: float = Field(default=0.0, ge=0)
    max: float | None = Field(default=None, gt=0)


Nodes = Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] | NodeRange
Hours = Annotated[float, Field(gt=0)] | Duration


class JobClass(BaseModel):
    """A stream of similar jobs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    kind: JobKind = JobKind.MANAGED
    nodes: Nodes
    arrivals_per_day: float = Field(ge=0)
    duration_hours: Hours
    checkpoint_minutes: float | None = Field(default=30.0, gt=0)
    priority: int = Field(default=0, ge=-1_000, le=1_000)
    slice_size: int | None = Field(default=None, ge=1)
    min_nodes_per_slice: int | None = Field(default=None, ge=1)
    hero: bool | None = None
    """Reported as a hero run (default: the class is named `hero`)."""
    start_hours: float = Field(default=0.0, ge=0)
    """No arrivals before this."""
    max_jobs: int | None = Field(default=None, ge=0)
    queue: QueueName | None = None
    """The leaf queue its jobs are submitted to (None: the cluster's default queue)."""


class TraceJob(BaseModel):
    """One job of a trace (a CSV row or an inline `jobs:` entry)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    submit_hours: float = Field(ge=0)
    nodes: int = Field(ge=1)
    duration_hours: float = Field(gt=0)
    kind: JobKind = JobKind.MANAGED
    priority: int = Field(default=0, ge=-1_000, le=1_000)
    checkpoint_minutes: float | None = Field(default=None, gt=0)
    job_class: str | None = Field(default=None, alias="class")
    slice_size: int | None = Field(default=None, ge=1)
    min_nodes_per_slice: int | None = Field(default=None, ge=1)
    name: str = ""
    queue: QueueName | None = None


DEFAULT_CLASSES: tuple[JobClass, ...] = (
    JobClass(
        name="hero",
        nodes=[64, 128, 256, 512],
        arrivals_per_day=0.35,
        duration_hours=Duration(median=72, sigma=0.5, max=14 * 24),
        checkpoint_minutes=30,
        priority=10,
        min_nodes_per_slice=14,
    ),
    JobClass(
        name="mid",
        nodes=[16, 32],
        arrivals_per_day=10.0,
        duration_hours=Duration(median=16, sigma=1.0, max=7 * 24),
        checkpoint_minutes=30,
        priority=5,
    ),
    JobClass(
        name="small",
        nodes=NodeRange(min=1, max=8),
        arrivals_per_day=12.0,
        duration_hours=Duration(median=6, sigma=1.0, max=72),
        checkpoint_minutes=60,
    ),
    JobClass(
        name="interactive",
        kind=JobKind.INTERACTIVE,
        nodes=[1, 2],
        arrivals_per_day=4.0,
        duration_hours=Duration(median=8, sigma=0.5, max=24),
        checkpoint_minutes=None,
        priority=20,
    ),
    JobClass(
        name="inference",
        kind=JobKind.INFERENCE,
        nodes=[4, 8, 16],
        arrivals_per_day=0.5,
        duration_hours=Duration(median=168, sigma=0.5, max=30 * 24),
        checkpoint_minutes=None,
        priority=30,
    ),
)
"""A training cluster's mix, per 1,000 nodes per day: ~27 jobs asking for ~60% of the nodes
(hero runs ~28%, mid-size ~26%, inference ~4%, small ~2%, interactive <1%)."""


class Workload(BaseModel):
    """Where jobs come from: synthetic classes, inline jobs, a trace file; any mix."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    classes: tuple[JobClass, ...] = DEFAULT_CLASSES
    rate_basis: Literal["cluster", "per_1000_nodes"] = "per_1000_nodes"
    """What `arrivals_per_day` counts: per cluster, or per 1,000 nodes of the cluster."""
    load: float = Field(default=1.0, ge=0)
    """Multiplies every class's arrival rate."""
    jobs: tuple[TraceJob, ...] = ()
    trace: str | None = None
    """A trace CSV, relative to the scenario file (read by `load_scenario`)."""


@dataclass(frozen=True, slots=True)
class Arrival:
    """One job of the run: when it arrives, what it asks for, how much work it is."""

    at: datetime
    spec: JobSpec
    work: timedelta
    job_class: str
    hero: bool


class TraceError(ValueError):
    """A trace CSV that cannot be read; the message names the source and the row."""


def parse_trace_csv(text: str, source: str) -> list[TraceJob]:
    """Rows of a trace CSV (see the module docstring for the columns).

    Raises:
        TraceError: a missing required column or a bad value, with the line.
    """
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    lines = [(i, line) for i, line in lines if not line.lstrip().startswith("#")]
    if not lines:
        raise TraceError(f"{source}: expected a header row and jobs, the file is empty")
    reader = csv.DictReader(io.StringIO("\n".join(line for _, line in lines)))
    missing = {"submit_hours", "nodes", "duration_hours"} - set(reader.fieldnames or ())
    if missing:
        raise TraceError(f"{source}:{lines[0][0]}: missing columns: {', '.join(sorted(missing))}")
    out = []
    for (number, _), row in zip(lines[1:], reader, strict=True):
        fields = {k: v for k, v in row.items() if k and v not in (None, "")}
        try:
            out.append(TraceJob.model_validate(fields))
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            raise TraceError(f"{source}:{number}: {where}: {first['msg']}") from None
    return out


def _draw_nodes(nodes: Nodes, rng: random.Random) -> int:
    if isinstance(nodes, int):
        return nodes
    if isinstance(nodes, list):
        return rng.choice(nodes)
    return rng.randrange(nodes.min, nodes.max + 1, nodes.step)


def _draw_hours(hours: Hours, rng: random.Random) -> float:
    if not isinstance(hours, Duration):
        return float(hours)
    value = hours.median * math.exp(rng.gauss(0.0, hours.sigma)) if hours.sigma else hours.median
    return min(value, hours.max) if hours.max is not None else value


def _checkpoint(minutes: float | None) -> timedelta | None:
    return timedelta(minutes=minutes) if minutes is not None else None


def _class_of(job: TraceJob) -> str:
    if job.job_class:
        return job.job_class
    if job.kind is not JobKind.MANAGED:
        return job.kind.value
    return "hero" if job.nodes >= HERO_NODES else "mid" if job.nodes >= 16 else "small"


def generate_arrivals(
    workload: Workload,
    *,
    nodes: int,
    start: datetime,
    end: datetime,
    seed: int,
    slice_size: int = DEFAULT_SLICE_SIZE,
    cap: int | None = None,
) -> list[Arrival]:
    """Every job arriving between `start` and `end`, in time order, with ids `j<n>`.

    Args:
        workload: classes, inline jobs and (already parsed into `jobs`) trace rows.
        nodes: nodes of the cluster: `per_1000_nodes` rates scale with it, and jobs larger
            than it (or than `cap`) are capped to it.
        cap: the largest job the cluster can ever hold (its nodes outside the spares);
            default `nodes`.
        start: time zero of the run.
        end: arrivals stop here.
        seed: the run's seed.
        slice_size: the cluster's default slice size (an NTP floor above a job's slices is
            dropped).
    """
    limit = min(nodes, cap) if cap else nodes
    rng = random.Random(f"{seed}:workload")
    drafts: list[tuple[datetime, int, Arrival]] = []
    scale = workload.load * (nodes / 1000.0 if workload.rate_basis == "per_1000_nodes" else 1.0)
    for c_index, c in enumerate(workload.classes):
        rate = c.arrivals_per_day * scale
        if rate <= 0:
            continue
        t = start + timedelta(hours=c.start_hours)
        made = 0
        while c.max_jobs is None or made < c.max_jobs:
            gap = rng.expovariate(rate)
            if gap > (end - t) / timedelta(days=1) + 1:  # past the end: maybe past the calendar
                break
            t += timedelta(days=gap)
            if t >= end:
                break
            size = min(_draw_nodes(c.nodes, rng), limit)
            hours = _draw_hours(c.duration_hours, rng)
            spec = JobSpec(
                id="pending",
                name=c.name,
                owner=f"sim:{c.name}",
                nodes=size,
                slice_size=c.slice_size,
                kind=c.kind,
                priority=c.priority,
                checkpoint_interval=_checkpoint(c.checkpoint_minutes),
                min_nodes_per_slice=_floor(c.min_nodes_per_slice, c.slice_size or slice_size, size),
                expected_duration=timedelta(hours=hours),
                queue=c.queue,
            )
            hero = c.hero if c.hero is not None else c.name == "hero"
            drafts.append((t, c_index, Arrival(t, spec, timedelta(hours=hours), c.name, hero)))
            made += 1
    for i, job in enumerate(workload.jobs):
        at = start + timedelta(hours=job.submit_hours)
        if at >= end:
            continue
        size = min(job.nodes, limit)
        name = _class_of(job)
        spec = JobSpec(
            id="pending",
            name=job.name or name,
            owner=f"sim:{name}",
            nodes=size,
            slice_size=job.slice_size,
            kind=job.kind,
            priority=job.priority,
            checkpoint_interval=_checkpoint(job.checkpoint_minutes),
            min_nodes_per_slice=_floor(job.min_nodes_per_slice, job.slice_size or slice_size, size),
            expected_duration=timedelta(hours=job.duration_hours),
            queue=job.queue,
        )
        hero = name == "hero"
        work = timedelta(hours=job.duration_hours)
        drafts.append((at, len(workload.classes) + i, Arrival(at, spec, work, name, hero)))
    drafts.sort(key=lambda d: (d[0], d[1]))
    return [
        Arrival(a.at, a.spec.model_copy(update={"id": f"j{n}"}), a.work, a.job_class, a.hero)
        for n, (_, _, a) in enumerate(drafts, 1)
    ]


def _floor(floor: int | None, slice_size: int, nodes: int) -> int | None:
    """The NTP floor, dropped when the job's slices are smaller than it (a small job)."""
    if floor is None:
        return None
    return floor if floor <= min(slice_size, nodes) else None
