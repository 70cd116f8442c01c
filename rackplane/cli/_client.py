"""Commands to a running system: register, submit, cancel, cordon, uncordon, health.

Each sends one command (with an actor) to the commands topic and prints the events it caused:
those it caused directly and the chain the policies added (a submit's `JobPlaced`, a failure's
`NodeSwapped`) until the cluster's log stays quiet of it (`--no-wait`: the direct ones only).
A rejection prints its reason and exits with status 1. `submit --file` sends many jobs over one
connection. Broker, prefix and actor come
from the settings (flags > RACKPLANE_* > config file; docs/CONFIG.md).

The actor defaults to `operator:$USER`. A user name outside the actor alphabet (ASCII letters,
digits and . _ : / @ + -) is not mapped to a look-alike: the command is refused in one line
that asks for `--actor` or RACKPLANE_ACTOR, since an actor is what admin lists are checked
against and two users must never map to one actor. Input that does not make a valid command
(an id with a space, a reason with a control character) is refused the same way, before
anything is sent.
"""

from __future__ import annotations

import getpass
import math
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from rackplane._errtext import named
from rackplane.cli._config import ConfigFile, positive_seconds, settings
from rackplane.cli._render import checked, console, errors, fail, message_of, print_json
from rackplane.cli._run import run
from rackplane.config import RackplaneSettings
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

if TYPE_CHECKING:  # PyNaCl (~50 ms to import) is loaded when a key file is set
    from rackplane.keyfiles import KeyFile

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
Timeout = Annotated[
    float, typer.Option(callback=positive_seconds, help="Seconds to wait for the outcome.")
]
NoWait = Annotated[
    bool,
    typer.Option(
        "--no-wait", help="Print only the events the command caused directly, not the chain."
    ),
]

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
    from rackplane.keyfiles import KeyFileError, load_key

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
    wait: bool = True,
    **fields: Any,
) -> None:
    """Build a `kind` command from the settings' actor and `fields`, send it, print its events
    (with `wait`, the chain that followed too)."""
    s = _settings(config_file, broker, prefix, actor)
    command = _build(kind, id=f"cli-{uuid.uuid4().hex}", cluster=cluster, actor=_actor(s), **fields)
    _send(s, command, timeout, json_out, wait=wait)


def _send(
    s: RackplaneSettings, command: Command, timeout: float, as_json: bool, *, wait: bool = True
) -> None:
    """Send one command, print its outcome; exit 1 if it was rejected."""
    (events,) = _send_all(s, [command], timeout, wait=wait)
    _show(command, events, as_json)
    if any(isinstance(e, CommandRejected) for e in events):
        raise SystemExit(1)


def _send_all(
    s: RackplaneSettings, commands: list[Command], timeout: float, *, wait: bool
) -> list[list[Event]]:
    """Send `commands` one after the other over one connection; their outcomes, in order."""
    from rackplane.streams.client import BrokerUnreachable, Client

    key = _key(s)
    if key is not None:
        commands = [key.sign(c) for c in commands]
    config = s.stream_config()
    broker = s.broker

    async def go() -> list[list[Event]]:
        async with Client(config) as client:
            return [await client.outcome(c, timeout=timeout, follow=wait) for c in commands]

    try:
        return run(go())
    except TimeoutError as err:
        fail(f"{err}: is a worker running for {config.topic('commands')} on {broker}?")
    except BrokerUnreachable as err:
        fail(f"cannot reach {broker}: {err}")
    except Exception as err:  # a broker that cannot be reached, said plainly
        fail(f"cannot reach {broker}: {named(err)}")


def _show(command: Command, events: list[Event], as_json: bool) -> None:
    from rackplane.timeline import describe

    if as_json:
        print_json({"command": command.id, "events": [e.model_dump(mode="json") for e in events]})
        return
    t = Table(title=f"{command.type} {command.id}", title_justify="left", header_style="bold")
    for col in ("event", "type", "by", "what"):
        t.add_column(col)
    for e in events:
        # a reason is data, not markup
        t.add_row(e.id, e.type, escape(e.actor), escape(describe(e)))
    console.print(t)


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
    no_wait: NoWait = False,
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
    except OSError as err:  # its text would be "[Errno 21] Is a directory: 'x'"
        fail(f"{path}: cannot read it ({err.strerror or err})")
    except (TopologyFileError, ValueError) as err:
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
    _send(s, command, timeout, json_out, wait=not no_wait)


def submit(
    cluster: Cluster,
    job: Annotated[str | None, typer.Option(help="Job id.")] = None,
    nodes: Annotated[int | None, typer.Option(help="Nodes.")] = None,
    jobs_file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="A YAML list of jobs (JobSpec fields: id, nodes, slice_size, kind, priority, "
            "queue, checkpoint_interval, expected_duration, ...) to submit instead of "
            "--job/--nodes.",
        ),
    ] = None,
    broker: Broker = None,
    slice_size: Annotated[
        int | None, typer.Option(help="Nodes per slice (cluster default).")
    ] = None,
    kind: Annotated[JobKind, typer.Option(help="managed, interactive or inference.")] = (
        JobKind.MANAGED
    ),
    priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
    checkpoint_minutes: Annotated[float | None, typer.Option(help="Checkpoint interval.")] = None,
    expected_duration: Annotated[
        float | None,
        typer.Option(
            "--expected-duration",
            help="Minutes the job is expected to run (a short preemptible job may borrow "
            "spares when the cluster allows it).",
        ),
    ] = None,
    min_nodes_per_slice: Annotated[int | None, typer.Option(help="Allow degraded running.")] = None,
    time_limit: Annotated[
        float | None,
        typer.Option(
            "--time-limit",
            help="Minutes the job may run; past them it is ended (JobFailed, time_limit).",
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(help="The leaf queue it runs under (default: the cluster's default queue)."),
    ] = None,
    reservation: Annotated[
        str | None,
        typer.Option(
            help="Run in this reservation (one for the owner or the queue): only on its "
            "nodes, from its start to its end."
        ),
    ] = None,
    name: Annotated[str, typer.Option(help="A human name.")] = "",
    owner: Annotated[str | None, typer.Option(help="Owner (default: the actor).")] = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    no_wait: NoWait = False,
    config_file: ConfigFile = None,
) -> None:
    """Submit a job (--job, --nodes), or every job of a YAML file (--file)."""
    s = _settings(config_file, broker, prefix, actor)
    who = _actor(s)
    checked(ClusterId, cluster, "--cluster")
    if time_limit is not None and not (math.isfinite(time_limit) and 0 < time_limit <= 1e8):
        fail(f"--time-limit {time_limit}: expected minutes, a positive number")
    if jobs_file is not None:
        if job is not None or nodes is not None:
            fail("give either --file or --job and --nodes, not both")
        specs = _jobs_of(jobs_file, who)
    else:
        if job is None or nodes is None:
            fail("name the job: --job and --nodes (or --file with a list of jobs)")
        try:
            specs = [
                JobSpec(
                    id=job,
                    name=name,
                    owner=owner or who,
                    nodes=nodes,
                    slice_size=slice_size,
                    kind=kind,
                    priority=priority,
                    checkpoint_interval=(
                        _minutes(checkpoint_minutes, "--checkpoint-minutes")
                        if checkpoint_minutes
                        else None
                    ),
                    min_nodes_per_slice=min_nodes_per_slice,
                    queue=queue,
                    reservation=reservation,
                    time_limit=_minutes(time_limit, "--time-limit"),
                    expected_duration=_minutes(expected_duration, "--expected-duration"),
                )
            ]
        except ValueError as err:
            fail(message_of(err))
    commands: list[Command] = [
        _build(SubmitJob, id=f"cli-{uuid.uuid4().hex}", cluster=cluster, actor=who, job=spec)
        for spec in specs
    ]
    if jobs_file is None:
        _send(s, commands[0], timeout, json_out, wait=not no_wait)
        return
    outcomes = _send_all(s, commands, timeout, wait=not no_wait)
    _show_many(commands, outcomes, json_out)
    if any(isinstance(e, CommandRejected) for events in outcomes for e in events):
        raise SystemExit(1)


def _minutes(value: float | None, option: str) -> timedelta | None:
    """`value` minutes, or one line naming `option` when no timedelta holds them (NaN said
    "cannot convert float NaN to integer", infinity raised OverflowError)."""
    if value is None:
        return None
    try:
        return timedelta(minutes=value)
    except (ValueError, OverflowError):
        fail(f"{option}: expected a number of minutes, got {value}")


def _jobs_of(path: Path, owner: str) -> list[JobSpec]:
    """The jobs of a YAML file (a list, or a mapping with `jobs:`), each a `JobSpec` whose owner
    defaults to the actor; any fault exits naming the file, the job and the field."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        fail(f"{path}: cannot read it ({err.strerror or err})")
    except UnicodeDecodeError:
        fail(f"{path}: not a text file (expected a YAML list of jobs)")
    except yaml.YAMLError as err:
        fail(f"{path}: not YAML: {str(err).splitlines()[0]}")
    if isinstance(data, dict) and set(data) == {"jobs"}:
        data = data["jobs"]
    if not isinstance(data, list) or not data:
        fail(f"{path}: expected a list of jobs (or `jobs:` holding one)")
    specs: list[JobSpec] = []
    seen: set[str] = set()
    for n, item in enumerate(data, 1):
        if not isinstance(item, dict):
            fail(f"{path}: job {n}: expected a mapping of JobSpec fields, not {item!r}")
        try:
            spec = JobSpec.model_validate({"owner": owner, **item})
        except ValidationError as err:
            fail(f"{path}: job {n} ({item.get('id', 'no id')}): {message_of(err)}")
        if spec.id in seen:
            fail(f"{path}: job {n}: id {spec.id!r} is given twice")
        seen.add(spec.id)
        specs.append(spec)
    return specs


def _show_many(commands: list[Command], outcomes: list[list[Event]], as_json: bool) -> None:
    from rackplane.timeline import describe

    if as_json:
        print_json(
            [
                {"command": c.id, "events": [e.model_dump(mode="json") for e in events]}
                for c, events in zip(commands, outcomes, strict=True)
            ]
        )
        return
    t = Table(title=f"{len(commands)} jobs submitted", title_justify="left", header_style="bold")
    for col in ("job", "events", "outcome"):
        t.add_column(col)
    for c, events in zip(commands, outcomes, strict=True):
        assert isinstance(c, SubmitJob)
        last = events[-1] if events else None
        t.add_row(
            escape(c.job.id),
            ", ".join(e.id.rsplit("/", 1)[-1] for e in events),
            escape(describe(last)) if last else "-",
        )
    console.print(t)


def cancel(
    job: Annotated[str, typer.Option(help="Job id.")],
    cluster: Cluster,
    reason: Annotated[str, typer.Option(help="Why.")] = "",
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    no_wait: NoWait = False,
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
        wait=not no_wait,
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
    no_wait: NoWait = False,
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
        wait=not no_wait,
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
    no_wait: NoWait = False,
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
        wait=not no_wait,
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
    no_wait: NoWait = False,
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
        wait=not no_wait,
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
    no_wait: NoWait = False,
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
        wait=not no_wait,
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
    no_wait: NoWait = False,
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
    _send(s, command, timeout, json_out, wait=not no_wait)


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
        return run(read())
    except TimeoutError:
        fail(f"reading {config.topic('events')} on {s.broker} timed out")
    except Exception as err:  # a broker that cannot be reached, said plainly
        fail(f"cannot reach {s.broker}: {named(err)}")
