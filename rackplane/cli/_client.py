"""Commands to a running system: register, submit, cancel, cordon, uncordon, health.

Each sends one command (with an actor) to the commands topic and prints the events it caused,
by id; a rejection prints its reason and exits with status 1.
"""

from __future__ import annotations

import asyncio
import getpass
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rackplane.cli._render import console, fail, print_json
from rackplane.models import (
    CancelJob,
    Command,
    CommandRejected,
    CordonNode,
    Event,
    Health,
    JobKind,
    JobSpec,
    RegisterTopology,
    ReportNodeHealth,
    SubmitJob,
    UncordonNode,
)

Broker = Annotated[str, typer.Option(help="kafka://host:port of the running system.")]
Cluster = Annotated[str, typer.Option(help="Cluster id.")]
Actor = Annotated[str | None, typer.Option(help="Who sends it (default operator:$USER).")]
Prefix = Annotated[str, typer.Option(help="Topic prefix.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]
Timeout = Annotated[float, typer.Option(help="Seconds to wait for the outcome.")]


def register(app: typer.Typer) -> None:
    """Add the client commands to the CLI."""
    for command in (register_topology, submit, cancel, cordon, uncordon, health):
        app.command(name=command.__name__.replace("_topology", ""))(command)


def _actor(actor: str | None) -> str:
    return actor or f"operator:{getpass.getuser()}"


def _send(broker: str, prefix: str, command: Command, timeout: float, as_json: bool) -> None:
    from rackplane.streams.client import Client
    from rackplane.streams.config import StreamConfig

    config = StreamConfig(broker=broker, prefix=prefix)
    try:
        config.bootstrap  # noqa: B018  (validates the URL)
    except ValueError as err:
        fail(str(err))

    async def go() -> list[Event]:
        async with Client(config) as client:
            return await client.outcome(command, timeout=timeout)

    try:
        events = asyncio.run(go())
    except TimeoutError as err:
        fail(f"{err}: is a worker running for {config.topic('commands')} on {broker}?")
    except Exception as err:  # a broker that cannot be reached, said plainly
        fail(f"cannot reach {broker}: {type(err).__name__}: {err}")
    rejected = [e for e in events if isinstance(e, CommandRejected)]
    if as_json:
        print_json({"command": command.id, "events": [e.model_dump(mode="json") for e in events]})
    else:
        t = Table(title=f"{command.type} {command.id}", title_justify="left", header_style="bold")
        for col in ("event", "type", "what"):
            t.add_column(col)
        for e in events:
            what = (
                getattr(e, "reason", "")
                or getattr(e, "explanation", "")
                or str(getattr(e, "job", "") or getattr(e, "node", ""))
            )
            t.add_row(e.id, e.type, what)
        console.print(t)
    if rejected:
        raise SystemExit(1)


def register_topology(
    cluster_file: Annotated[Path, typer.Argument(help="Cluster file to register.")],
    broker: Broker = "kafka://127.0.0.1:9092",
    prefix: Prefix = "rackplane",
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
) -> None:
    """Register (or grow) a cluster's topology and policy settings from a cluster file."""
    from rackplane.importers import TopologyFileError, load_cluster_file

    try:
        cf = load_cluster_file(cluster_file)
    except (TopologyFileError, OSError) as err:
        fail(str(err))
    command = RegisterTopology(
        id=f"cli-{uuid.uuid4().hex}",
        cluster=cf.topology.cluster,
        actor=_actor(actor),
        topology=cf.topology,
        settings=cf.policy,
    )
    _send(broker, prefix, command, timeout, json_out)


def submit(
    job: Annotated[str, typer.Option(help="Job id.")],
    nodes: Annotated[int, typer.Option(help="Nodes.")],
    cluster: Cluster,
    broker: Broker = "kafka://127.0.0.1:9092",
    slice_size: Annotated[
        int | None, typer.Option(help="Nodes per slice (cluster default).")
    ] = None,
    kind: Annotated[JobKind, typer.Option(help="managed, interactive or inference.")] = (
        JobKind.MANAGED
    ),
    priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
    checkpoint_minutes: Annotated[float | None, typer.Option(help="Checkpoint interval.")] = None,
    min_nodes_per_slice: Annotated[int | None, typer.Option(help="Allow degraded running.")] = None,
    name: Annotated[str, typer.Option(help="A human name.")] = "",
    owner: Annotated[str | None, typer.Option(help="Owner (default: the actor).")] = None,
    prefix: Prefix = "rackplane",
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
) -> None:
    """Submit a job."""
    who = _actor(actor)
    try:
        spec = JobSpec(
            id=job,
            name=name,
            owner=owner or who,
            nodes=nodes,
            slice_size=slice_size,
            kind=kind,
            priority=priority,
            checkpoint_interval=(
                timedelta(minutes=checkpoint_minutes) if checkpoint_minutes else None
            ),
            min_nodes_per_slice=min_nodes_per_slice,
        )
    except ValueError as err:
        fail(str(err))
    command = SubmitJob(id=f"cli-{uuid.uuid4().hex}", cluster=cluster, actor=who, job=spec)
    _send(broker, prefix, command, timeout, json_out)


def cancel(
    job: Annotated[str, typer.Option(help="Job id.")],
    cluster: Cluster,
    reason: Annotated[str, typer.Option(help="Why.")] = "",
    broker: Broker = "kafka://127.0.0.1:9092",
    prefix: Prefix = "rackplane",
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
) -> None:
    """Cancel a job."""
    command = CancelJob(
        id=f"cli-{uuid.uuid4().hex}", cluster=cluster, actor=_actor(actor), job=job, reason=reason
    )
    _send(broker, prefix, command, timeout, json_out)


def cordon(
    node: Annotated[str, typer.Option(help="Node id.")],
    cluster: Cluster,
    reason: Annotated[str, typer.Option(help="Why.")] = "",
    broker: Broker = "kafka://127.0.0.1:9092",
    prefix: Prefix = "rackplane",
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
) -> None:
    """Keep new work off a node."""
    command = CordonNode(
        id=f"cli-{uuid.uuid4().hex}", cluster=cluster, actor=_actor(actor), node=node, reason=reason
    )
    _send(broker, prefix, command, timeout, json_out)


def uncordon(
    node: Annotated[str, typer.Option(help="Node id.")],
    cluster: Cluster,
    broker: Broker = "kafka://127.0.0.1:9092",
    prefix: Prefix = "rackplane",
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
) -> None:
    """Let a cordoned node take work again."""
    command = UncordonNode(
        id=f"cli-{uuid.uuid4().hex}", cluster=cluster, actor=_actor(actor), node=node
    )
    _send(broker, prefix, command, timeout, json_out)


def health(
    node: Annotated[str, typer.Option(help="Node id.")],
    state: Annotated[Health, typer.Option(help="healthy, degraded or failed.")],
    cluster: Cluster,
    cause: Annotated[str, typer.Option(help="What was seen.")] = "",
    broker: Broker = "kafka://127.0.0.1:9092",
    prefix: Prefix = "rackplane",
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
) -> None:
    """Report a node's health (as an operator)."""
    command = ReportNodeHealth(
        id=f"cli-{uuid.uuid4().hex}",
        cluster=cluster,
        actor=_actor(actor),
        node=node,
        health=state,
        cause=cause,
    )
    _send(broker, prefix, command, timeout, json_out)
