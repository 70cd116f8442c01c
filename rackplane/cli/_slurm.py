"""`rackplane slurm`: run the Slurm adapter for one cluster (see `rackplane.slurm.adapter`).

Broker, prefix, actor and key file come from the settings like every client command's
(flags > RACKPLANE_* > config file). The actor defaults to `runtime:slurm`; with a key file it
is the key's. The adapter's key needs the roles `runtime` (jobs) and `operator` (node health,
cordons); `admin` too for a drain's end or a new node to reach a cluster with keys. It runs
where Slurm's client commands work as a Slurm administrator (SlurmUser or root): `scontrol
update`, `release`, `requeuehold` and `scancel` of other users' jobs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from rackplane.cli._client import Broker, Cluster, Prefix, _key, _settings
from rackplane.cli._config import ConfigFile
from rackplane.cli._render import checked, errors, fail, log_to_stderr
from rackplane.models import Actor as ActorId
from rackplane.models import ClusterId

DEFAULT_ACTOR = "runtime:slurm"

Actor = Annotated[
    str | None,
    typer.Option(help=f"Who the adapter sends as (default {DEFAULT_ACTOR}; a key file's actor)."),
]


def register(app: typer.Typer) -> None:
    """Add `rackplane slurm` to the CLI."""
    app.command(name="slurm")(slurm)


def slurm(
    cluster: Cluster,
    partition: Annotated[
        str, typer.Option(help="The Slurm partition rackplane places (its jobs held at submit).")
    ] = "gpu",
    bin_dir: Annotated[
        Path | None,
        typer.Option("--bin", help="Directory of scontrol, squeue, sinfo, scancel (default PATH)."),
    ] = None,
    topology: Annotated[
        Path | None,
        typer.Option(
            help="A topology.conf/topology.yaml to read instead of 'scontrol show topology'."
        ),
    ] = None,
    gpus_per_node: Annotated[int, typer.Option(min=1, help="GPUs per node.")] = 4,
    domain_nodes: Annotated[
        int, typer.Option(min=1, help="Nodes of one NVLink domain (a tree leaf's most).")
    ] = 18,
    interval: Annotated[
        float, typer.Option(min=0.1, help="Seconds between two reads of slurmctld.")
    ] = 1.0,
    config_file: ConfigFile = None,
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    log_level: Annotated[
        str, typer.Option(help="Log level: warning (default), info (every action), debug.")
    ] = "warning",
) -> None:
    """Place the Slurm partition's jobs: set their nodes, release, requeue and report, until
    stopped."""
    from rackplane.slurm._commands import SlurmCommands
    from rackplane.slurm.adapter import SlurmAdapter

    checked(ClusterId, cluster, "--cluster")
    if bin_dir is not None and not (bin_dir / "scontrol").is_file():
        fail(f"--bin: no scontrol in {bin_dir}")
    text = None
    if topology is not None:
        text = _checked_topology(topology, cluster, gpus_per_node, domain_nodes)
    log_to_stderr(log_level)  # after the refusals: a handler outlives a refused command
    s = _settings(config_file, broker, prefix, actor)
    key = _key(s)
    who = key.actor if key is not None else (s.actor or DEFAULT_ACTOR)
    checked(ActorId, who, "--actor")
    config = s.stream_config()
    adapter = SlurmAdapter(
        config,
        SlurmCommands(bin_dir),
        cluster,
        actor=who,
        key=key,
        partition=partition,
        gpus_per_node=gpus_per_node,
        domain_nodes=domain_nodes,
        topology_text=text,
        interval=interval,
    )
    errors.print(
        f"slurm: placing partition {partition} of cluster {cluster} as {who}", highlight=False
    )
    try:
        asyncio.run(adapter.run())
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as err:  # the broker gone for good, a gap in the log: one line, exit 2
        text, kind = " ".join(str(err).split()), type(err).__name__
        fail(f"slurm: {text}" if text.startswith(kind) else f"slurm: {kind}: {text}")


def _checked_topology(path: Path, cluster: str, gpus_per_node: int, domain_nodes: int) -> str:
    """The text of `--topology`, refused in one line up front when the adapter could not use it
    (it would only log a warning at each read and place nothing)."""
    from rackplane.importers import TopologyFileError, parse_slurm_topology

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        fail(f"--topology: cannot read {path}: {err.strerror or err}")
    except UnicodeDecodeError as err:
        fail(f"--topology: {path}: expected UTF-8 text (byte {err.start} cannot be decoded)")
    try:
        parse_slurm_topology(
            text, str(path), cluster=cluster, gpus_per_node=gpus_per_node, domain_nodes=domain_nodes
        )
    except TopologyFileError as err:
        fail(f"--topology: {err}")
    return text
