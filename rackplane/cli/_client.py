"""Commands to a running system: register, submit, cancel, cordon, uncordon, health.

Each sends one command (with an actor) to the commands topic and prints the events it caused,
by id; a rejection prints its reason and exits with status 1. Broker, prefix and actor come
from the settings (flags > RACKPLANE_* > config file; docs/CONFIG.md).

The actor defaults to `operator:$USER`. A user name outside the actor alphabet (ASCII letters,
digits and . _ : / @ + -) is not mapped to a look-alike: the command is refused in one line
that asks for `--actor` or RACKPLANE_ACTOR, since an actor is what admin lists are checked
against and two users must never map to one actor. Input that does not make a valid command
(an id with a space, a reason with a control character) is refused the same way, before
anything is sent.
"""

from __future__ import annotations

import asyncio
import getpass
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from rackplane.cli._config import ConfigFile, settings
from rackplane.cli._render import checked, console, errors, fail, message_of, print_json
from rackplane.config import RackplaneSettings
from rackplane.keyfiles import KeyFile, KeyFileError, load_key
from rackplane.models import (
    ACTOR_RULE,
    CancelJob,
    ClusterId,
    Command,
    CommandEnvelope,
    CommandRejected,
    ConfigurePolicy,
    CordonNode,
    Event,
    Health,
    JobKind,
    JobSpec,
    PolicySettings,
    RegisterTopology,
    RepairNode,
    ReportNodeHealth,
    SubmitJob,
    UncordonNode,
)

Broker = Annotated[str | None, typer.Option(help="kafka://host:port of the running system.")]
Cluster = Annotated[str, typer.Option(help="Cluster id.")]
Actor = Annotated[
    str | None,
    typer.Option(
        help="Who sends it (default operator:$USER): ASCII letters, digits, . _ : / @ + -."
    ),
]
Prefix = Annotated[str | None, typer.Option(help="Topic prefix.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]
Timeout = Annotated[float, typer.Option(help="Seconds to wait for the outcome.")]

C = TypeVar("C", bound=CommandEnvelope)


def register(app: typer.Typer) -> None:
    """Add the client commands to the CLI."""
    for command in (register_topology, submit, cancel, cordon, uncordon, health, repair):
        app.command(name=command.__name__.replace("_topology", ""))(command)
    app.command(name="allow-interactive")(allow_interactive)


def _settings(
    config_file: Path | None, broker: str | None, prefix: str | None, actor: str | None
) -> RackplaneSettings:
    return settings(config_file, broker=broker, topic_prefix=prefix, actor=actor)


def _key(s: RackplaneSettings) -> KeyFile | None:
    """The settings' key file, read (None: none set), or exit with why."""
    if s.key_file is None:
        return None
    try:
        return load_key(s.key_file)
    except KeyFileError as err:
        fail(str(err))


def _actor(s: RackplaneSettings) -> str:
    """The key file's actor, else the settings' actor, else `operator:$USER` (see the module
    docstring), or exit."""
    key = _key(s)
    if key is not None:
        if s.actor and s.actor != key.actor:
            fail(
                f"the key file {s.key_file} signs as {key.actor!r}, not {s.actor!r}: drop "
                "--actor (RACKPLANE_ACTOR) or use that actor's key file"
            )
        return key.actor
    if s.actor:
        return s.actor
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no USER/LOGNAME and no passwd entry (e.g. a bare container)
        fail("cannot tell who you are (no user name): pass --actor or set RACKPLANE_ACTOR")
    actor = f"operator:{user}"
    culprit = ACTOR_RULE.culprit(actor)
    if culprit is not None:
        fail(
            f"the user name {user!r} cannot make an actor: {actor!r} {culprit}; "
            "pass --actor or set RACKPLANE_ACTOR (ASCII letters, digits and . _ : / @ + -)"
        )
    return actor


def _build(kind: type[C], **fields: Any) -> C:
    """`kind(**fields)`, or a one-line error naming the field at fault."""
    try:
        return kind(**fields)
    except ValidationError as err:
        fail(message_of(err))


def _issue(
    kind: type[Command],
    cluster: str,
    *,
    config_file: Path | None,
    broker: str | None,
    prefix: str | None,
    actor: str | None,
    timeout: float,
    json_out: bool,
    **fields: Any,
) -> None:
    """Build a `kind` command from the settings' actor and `fields`, send it, print its events."""
    s = _settings(config_file, broker, prefix, actor)
    command = _build(kind, id=f"cli-{uuid.uuid4().hex}", cluster=cluster, actor=_actor(s), **fields)
    _send(s, command, timeout, json_out)


def _send(s: RackplaneSettings, command: Command, timeout: float, as_json: bool) -> None:
    from rackplane.streams.client import BrokerUnreachable, Client

    key = _key(s)
    if key is not None:
        command = key.sign(command)
    config = s.stream_config()
    broker = s.broker

    async def go() -> list[Event]:
        async with Client(config) as client:
            return await client.outcome(command, timeout=timeout)

    try:
        events = asyncio.run(go())
    except TimeoutError as err:
        fail(f"{err}: is a worker running for {config.topic('commands')} on {broker}?")
    except BrokerUnreachable as err:
        fail(f"cannot reach {broker}: {err}")
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
            t.add_row(e.id, e.type, escape(what))  # a reason is data, not markup
        console.print(t)
    if rejected:
        raise SystemExit(1)


def register_topology(
    cluster_file: Annotated[
        Path | None,
        typer.Argument(help="Cluster file to register (default: the `cluster_file` setting)."),
    ] = None,
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Register (or grow) a cluster's topology and policy settings from a cluster file.

    The `policy` settings of the configuration (e.g. RACKPLANE_POLICY__ADMINS) override the
    file's `policy:` section field by field.
    """
    from rackplane.importers import TopologyFileError, load_cluster_file

    s = _settings(config_file, broker, prefix, actor)
    path = cluster_file or s.cluster_file
    if path is None:
        fail("name a cluster file (or set `cluster_file`: RACKPLANE_CLUSTER_FILE)")
    try:
        cf = load_cluster_file(path)
        policy = s.policy_over(cf.policy)
    except (TopologyFileError, OSError, ValueError) as err:
        fail(str(err))
    if policy.admins is None and policy.keys is None:
        errors.print(
            "[yellow]warning:[/] no admin list (policy setting `admins`): every actor may run "
            "admin commands on this cluster (docs/OPERATIONS.md)",
            highlight=False,
        )
    command = _build(
        RegisterTopology,
        id=f"cli-{uuid.uuid4().hex}",
        cluster=cf.topology.cluster,
        actor=_actor(s),
        topology=cf.topology,
        settings=policy,
    )
    _send(s, command, timeout, json_out)


def submit(
    job: Annotated[str, typer.Option(help="Job id.")],
    nodes: Annotated[int, typer.Option(help="Nodes.")],
    cluster: Cluster,
    broker: Broker = None,
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
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Submit a job."""
    s = _settings(config_file, broker, prefix, actor)
    who = _actor(s)
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
        fail(message_of(err))
    command = _build(SubmitJob, id=f"cli-{uuid.uuid4().hex}", cluster=cluster, actor=who, job=spec)
    _send(s, command, timeout, json_out)


def cancel(
    job: Annotated[str, typer.Option(help="Job id.")],
    cluster: Cluster,
    reason: Annotated[str, typer.Option(help="Why.")] = "",
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Cancel a job."""
    _issue(
        CancelJob,
        cluster,
        config_file=config_file,
        broker=broker,
        prefix=prefix,
        actor=actor,
        timeout=timeout,
        json_out=json_out,
        job=job,
        reason=reason,
    )


def cordon(
    node: Annotated[str, typer.Option(help="Node id.")],
    cluster: Cluster,
    reason: Annotated[str, typer.Option(help="Why.")] = "",
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Keep new work off a node."""
    _issue(
        CordonNode,
        cluster,
        config_file=config_file,
        broker=broker,
        prefix=prefix,
        actor=actor,
        timeout=timeout,
        json_out=json_out,
        node=node,
        reason=reason,
    )


def uncordon(
    node: Annotated[str, typer.Option(help="Node id.")],
    cluster: Cluster,
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Let a cordoned node take work again."""
    _issue(
        UncordonNode,
        cluster,
        config_file=config_file,
        broker=broker,
        prefix=prefix,
        actor=actor,
        timeout=timeout,
        json_out=json_out,
        node=node,
    )


def health(
    node: Annotated[str, typer.Option(help="Node id.")],
    state: Annotated[Health, typer.Option(help="healthy, degraded or failed.")],
    cluster: Cluster,
    cause: Annotated[str, typer.Option(help="What was seen.")] = "",
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Report a node's health (as an operator)."""
    _issue(
        ReportNodeHealth,
        cluster,
        config_file=config_file,
        broker=broker,
        prefix=prefix,
        actor=actor,
        timeout=timeout,
        json_out=json_out,
        node=node,
        health=state,
        cause=cause,
    )


def repair(
    node: Annotated[str, typer.Option(help="Node id.")],
    cluster: Cluster,
    note: Annotated[str, typer.Option(help="What was done (reseated, replaced, re-imaged).")] = "",
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Return a failed node to service after a repair (a health report cannot)."""
    _issue(
        RepairNode,
        cluster,
        config_file=config_file,
        broker=broker,
        prefix=prefix,
        actor=actor,
        timeout=timeout,
        json_out=json_out,
        node=node,
        note=note,
    )


def allow_interactive(
    cluster: Cluster,
    reason: Annotated[str, typer.Option(help="Why (recorded with who; required to allow).")] = "",
    off: Annotated[bool, typer.Option("--off", help="Take the permission back.")] = False,
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Let Auto Defrag preempt interactive jobs (admin only), or stop it with --off."""
    s = _settings(config_file, broker, prefix, actor)
    checked(ClusterId, cluster, "--cluster")
    who = _actor(s)
    current = _current_policy(s, cluster, timeout)
    wanted = current.model_copy(update={"allow_interactive_preemption": not off})
    command = _build(
        ConfigurePolicy,
        id=f"cli-{uuid.uuid4().hex}",
        cluster=cluster,
        actor=who,
        settings=wanted,
        reason=reason,
    )
    _send(s, command, timeout, json_out)


def _current_policy(s: RackplaneSettings, cluster: str, timeout: float) -> PolicySettings:
    """The cluster's policy settings now, folded from its event log."""
    from rackplane.streams.eventlog import EventLog

    config = s.stream_config()

    async def read() -> PolicySettings:
        log = EventLog(
            config.kafka_options(), config.topic("events"), fetch_wait_ms=config.fetch_wait_ms
        )
        try:
            rebuilt = await log.rebuild(cluster, timeout=timeout)
        finally:
            await log.stop()
        if not rebuilt.state.registered:
            fail(f"cluster {cluster!r} has no topology on {config.topic('events')}")
        return rebuilt.state.settings

    try:
        return asyncio.run(read())
    except TimeoutError:
        fail(f"reading {config.topic('events')} on {s.broker} timed out")
    except Exception as err:  # a broker that cannot be reached, said plainly
        fail(f"cannot reach {s.broker}: {type(err).__name__}: {err}")
