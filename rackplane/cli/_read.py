"""Live read commands: `rackplane status`, `jobs`, `job`, `racks`, `rack`.

Each reads the running pipeline's event log (the newest snapshot of the cluster's partition
plus the events after it: `rackplane.streams.live`) and prints what it says now. They write
nothing, so an operator's read-only credentials are enough, and they answer the same on any
machine whichever worker owns the cluster. Broker and prefix come from the settings, as for
the client commands (flags > RACKPLANE_* > config file).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from rackplane._errtext import named
from rackplane.cli._config import ConfigFile, positive_seconds, settings
from rackplane.cli._render import (
    OCCUPANCY_COLUMNS,
    OCCUPANCY_RIGHT,
    console,
    errors,
    fail,
    occupancy_cells,
    pod_table,
    print_json,
    print_list,
    summary_table,
)
from rackplane.cli._run import run
from rackplane.config import RackplaneSettings

if TYPE_CHECKING:
    from rackplane.projections import ClusterState, JobState
    from rackplane.streams.live import ClusterView, LiveLog

Broker = Annotated[str | None, typer.Option(help="kafka://host:port of the running system.")]
Prefix = Annotated[str | None, typer.Option(help="Topic prefix.")]
Cluster = Annotated[str, typer.Option(help="Cluster id.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]
Timeout = Annotated[
    float, typer.Option(callback=positive_seconds, help="Seconds a read may stand still.")
]

T = TypeVar("T")


class JobFilter(StrEnum):
    """What `jobs --state` selects."""

    QUEUED = "queued"
    BLOCKED = "blocked"
    PLACED = "placed"
    RUNNING = "running"


def register(app: typer.Typer) -> None:
    """Add the read commands to the CLI."""
    from rackplane.cli._queues import queues
    from rackplane.cli._reserve import register as register_reservations
    from rackplane.cli._reserve import reservations

    for command in (status, jobs, job, racks, rack, queues, reservations):
        app.command()(command)
    register_reservations(app)


def _read(s: RackplaneSettings, timeout: float, work: Callable[[LiveLog], Awaitable[T]]) -> T:
    """Run `work` on the pipeline's log, or exit with one line saying why not."""
    from aiokafka.errors import KafkaError

    from rackplane.streams.live import LiveLog, NoSuchTopic

    config = s.stream_config()

    async def go() -> T:
        live = LiveLog(config, timeout=timeout)
        try:
            await asyncio.wait_for(live.__aenter__(), timeout)
        except TimeoutError:
            fail(f"{s.broker} gave no Kafka answer within {timeout:.0f} s (is it a Kafka broker?)")
        try:
            return await work(live)
        finally:
            await live.__aexit__(None, None, None)

    try:
        return run(go())
    except NoSuchTopic as err:
        fail(str(err))
    except TimeoutError as err:
        fail(f"reading {config.topic('events')} on {s.broker}: {err or 'timed out'}")
    except KafkaError as err:
        fail(f"cannot reach {s.broker}: {named(err)}")


def _view(s: RackplaneSettings, cluster: str, timeout: float) -> ClusterView:
    """The cluster as the log says now, or exit (unknown cluster, broken log)."""

    async def work(live: LiveLog) -> ClusterView | None:
        return await live.cluster(cluster)

    view = _read(s, timeout, work)
    if view is None:
        fail(f"no cluster {cluster!r} on {s.stream_config().topic('events')} at {s.broker}")
    if view.broken is not None:
        errors.print(f"[bold red]warning:[/] {escape(str(view.broken))}", highlight=False)
    return view


def _settings(
    config_file: Path | None, broker: str | None, prefix: str | None
) -> RackplaneSettings:
    return settings(config_file, broker=broker, topic_prefix=prefix)


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else "-"


def status(
    cluster: Annotated[
        str | None, typer.Option(help="One cluster in detail (default: every cluster).")
    ] = None,
    broker: Broker = None,
    prefix: Prefix = None,
    timeout: Timeout = 10.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """The clusters now: nodes, racks and jobs, from the live event log."""
    from rackplane.projections import cluster_summary, rack_occupancy

    s = _settings(config_file, broker, prefix)
    if cluster is not None:
        view = _view(s, cluster, timeout)
        rows = rack_occupancy(view.state)
        summary = cluster_summary(view.state, rows)
        if json_out:
            print_json(summary.model_dump())
            return
        console.print(f"[bold]{escape(cluster)}[/] as of event {view.state.seq:,}")
        console.print(summary_table(summary))
        console.print(pod_table(rows))
        return

    async def every(live: LiveLog) -> list[ClusterView]:
        return await live.clusters()

    views = _read(s, timeout, every)
    summaries = [cluster_summary(v.state) for v in views]
    if json_out:
        print_json([x.model_dump() for x in summaries])
        return
    if not summaries:
        console.print(f"no cluster is registered on {s.stream_config().topic('events')}")
        return
    t = Table(title="Clusters", title_justify="left", header_style="bold")
    columns = ("cluster", "racks", "nodes", "alloc", "free", "spare", "failed")
    for name in (*columns, "running", "queued (blocked)", "events"):
        t.add_column(name, justify="left" if name == "cluster" else "right")
    for x in summaries:
        t.add_row(
            x.cluster,
            *(f"{v:,}" for v in (x.racks, x.nodes, x.allocated, x.free, x.spare, x.failed)),
            f"{x.jobs_running:,}",
            f"{x.jobs_queued:,} ({x.jobs_blocked:,})",
            f"{x.seq:,}",
        )
    console.print(t)


def _selected(
    j: JobState, state: JobFilter | None, owner: str | None, kind: str | None, queue: str | None
) -> bool:
    if owner is not None and j.spec.owner != owner:
        return False
    if queue is not None and j.spec.queue != queue:
        return False
    if kind is not None and j.spec.kind.value != kind:
        return False
    if state is None:
        return True
    if state is JobFilter.BLOCKED:
        return j.blocked is not None and j.status.value == "queued"
    return bool(j.status.value == state.value)


def jobs(
    cluster: Cluster,
    state: Annotated[
        JobFilter | None, typer.Option(help="Only jobs queued, blocked, placed or running.")
    ] = None,
    owner: Annotated[str | None, typer.Option(help="Only this owner's jobs.")] = None,
    queue: Annotated[str | None, typer.Option(help="Only the jobs of this leaf queue.")] = None,
    kind: Annotated[
        str | None, typer.Option(help="Only this kind (managed, interactive, inference).")
    ] = None,
    broker: Broker = None,
    prefix: Prefix = None,
    timeout: Timeout = 10.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """The cluster's unfinished jobs in queue order, from the live event log."""
    from rackplane.projections import job_row

    s = _settings(config_file, broker, prefix)
    st = _view(s, cluster, timeout).state
    chosen = [
        j
        for j in sorted(st.jobs.values(), key=lambda j: j.queue_key)
        if _selected(j, state, owner, kind, queue)
    ]
    if json_out:
        print_json([job_row(st, j.id) for j in chosen])
        return
    rows = []
    for j in chosen:
        racks_of = sorted({r for sl in j.slices for r in sl.racks})
        shown = ", ".join(racks_of[:4]) + (f" +{len(racks_of) - 4}" if len(racks_of) > 4 else "")
        why = f"{j.blocked.reason}: {j.blocked.explanation}" if j.blocked else ""
        since = j.started_at or j.placed_at or j.submitted_at
        rows.append(
            (
                j.id,
                j.spec.owner,
                j.spec.queue or "-",
                j.spec.kind.value,
                str(j.spec.priority),
                f"{j.spec.nodes:,}",
                j.status.value + (" (blocked)" if j.blocked else ""),
                shown,
                _when(since),
                why,
            )
        )
    print_list(
        f"Jobs of {cluster} ({len(chosen):,} of {len(st.jobs):,} unfinished)",
        ("job", "owner", "queue", "kind", "prio", "nodes", "status", "racks", "since", "why"),
        rows,
        right=("prio", "nodes"),
    )


def job(
    job_id: Annotated[str, typer.Argument(metavar="JOB", help="Job id.")],
    cluster: Cluster,
    events: Annotated[int, typer.Option(help="Newest events of the job to show.")] = 20,
    broker: Broker = None,
    prefix: Prefix = None,
    timeout: Timeout = 10.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """One job: its status, slices and nodes, and its events, from the live event log."""
    from rackplane.projections import job_row
    from rackplane.timeline import describe, mentions

    s = _settings(config_file, broker, prefix)

    async def work(live: LiveLog) -> tuple[ClusterView | None, list[Any]]:
        view = await live.cluster(cluster)
        if view is None:
            return None, []
        # The tail may start after the job's first events: read the whole log then.
        told = [e for e in view.tail if mentions(e, job_id)]
        if not any(e.type == "JobSubmitted" for e in told):
            told = [e for e in await live.history(cluster) if mentions(e, job_id)]
        return view, told

    view, told = _read(s, timeout, work)
    if view is None:
        fail(f"no cluster {cluster!r} on {s.stream_config().topic('events')} at {s.broker}")
    st = view.state
    finished = st.finished.get(job_id)
    if st.jobs.get(job_id) is None and finished is None and not told:
        fail(f"no job {job_id!r} in cluster {cluster!r}")
    row = job_row(st, job_id)
    nodes = _slice_nodes(st, job_id)
    if json_out:
        print_json(
            {
                "job": job_id,
                "status": row["status"] if row else (finished.value if finished else "unknown"),
                "row": row,
                "slices": nodes,
                "events": [e.model_dump(mode="json") for e in told[-events:]],
            }
        )
        return
    if row is None:
        console.print(f"[bold]{escape(job_id)}[/]: {finished.value if finished else 'finished'}")
    else:
        t = Table(show_header=False, box=None, pad_edge=False)
        t.add_column(style="bold")
        t.add_column()
        for key in ("job", "owner", "kind", "priority", "nodes", "status"):
            t.add_row(key, escape(str(row[key])))
        if row["blocked"]:
            b = row["blocked"]
            t.add_row("blocked", escape(f"{b['reason']} since {b['since']}: {b['explanation']}"))
        for key in ("submitted_at", "started_at"):
            t.add_row(key.replace("_", " "), str(row[key] or "-"))
        t.add_row("swaps / migrations / preemptions", f"{row['swaps']} / {row['migrations']} / "
                  f"{row['preemptions']}")  # fmt: skip
        console.print(t)
    if nodes:
        sl = Table(title="Slices", title_justify="left", header_style="bold")
        for name in ("slice", "rack", "nodes"):
            sl.add_column(name)
        for item in nodes:
            sl.add_row(str(item["slice"]), ", ".join(item["racks"]), ", ".join(item["nodes"]))
        console.print(sl)
    ev = Table(
        title=f"Events ({min(events, len(told))} of {len(told)})",
        title_justify="left",
        header_style="bold",
    )
    for name in ("seq", "at", "type", "what"):
        ev.add_column(name, justify="right" if name == "seq" else "left")
    for e in told[-events:]:
        ev.add_row(str(e.seq), _when(e.at), e.type, escape(describe(e, job_id)))
    console.print(ev)


def _slice_nodes(st: ClusterState, job_id: str) -> list[dict[str, Any]]:
    j = st.jobs.get(job_id)
    if j is None:
        return []
    return [{"slice": x.index, "racks": list(x.racks), "nodes": list(x.nodes)} for x in j.slices]


def racks(
    cluster: Cluster,
    broker: Broker = None,
    prefix: Prefix = None,
    timeout: Timeout = 10.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Every rack of the cluster: allocated, free, spare, failed nodes and its jobs."""
    from rackplane.projections import rack_occupancy

    s = _settings(config_file, broker, prefix)
    view = _view(s, cluster, timeout)
    rows = rack_occupancy(view.state)
    if json_out:
        print_json([r.model_dump() for r in rows])
        return
    print_list(
        f"Racks of {cluster} as of event {view.state.seq:,}",
        OCCUPANCY_COLUMNS,
        [occupancy_cells(r) for r in rows],
        right=OCCUPANCY_RIGHT,
    )


def rack(
    rack_id: Annotated[str, typer.Argument(metavar="RACK", help="Rack id.")],
    cluster: Cluster,
    broker: Broker = None,
    prefix: Prefix = None,
    timeout: Timeout = 10.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """One rack, node by node: its role, health, cordon and the job slice on it."""
    from rackplane.projections import node_roles

    s = _settings(config_file, broker, prefix)
    st = _view(s, cluster, timeout).state
    r = st.racks.get(rack_id)
    if r is None:
        fail(f"no rack {rack_id!r} in cluster {cluster!r}")
    roles = node_roles(st, rack_id)
    nodes: list[dict[str, Any]] = [
        {
            "node": n,
            "role": role.value,
            "health": st.nodes[n].health.value,
            "cordoned": st.nodes[n].cordoned,
            "job": st.nodes[n].job,
            "slice": st.nodes[n].slice,
            "cause": st.nodes[n].cause,
        }
        for n, role in roles.items()
    ]
    head = {
        "rack": rack_id,
        "pod": r.pod,
        "health": r.health.value,
        "cause": r.cause,
        "reserved_for": st.reservations.get(rack_id),
        "spares_left": st.spares_left(rack_id),
    }
    if json_out:
        print_json({**head, "nodes": nodes})
        return
    extra = f", reserved for {head['reserved_for']}" if head["reserved_for"] else ""
    fault = f" ({r.cause})" if r.cause else ""
    console.print(
        f"[bold]{escape(rack_id)}[/] in pod {escape(r.pod)}: {r.health.value}{escape(fault)}, "
        f"{head['spares_left']} spares left{escape(extra)}"
    )
    t = Table(header_style="bold")
    for name in ("node", "role", "health", "cordoned", "job", "slice", "cause"):
        t.add_column(name)
    for n in nodes:
        t.add_row(
            n["node"],
            n["role"],
            n["health"],
            "yes" if n["cordoned"] else "",
            escape(n["job"] or ""),
            "" if n["slice"] is None else str(n["slice"]),
            escape(n["cause"]),
        )
    console.print(t)
