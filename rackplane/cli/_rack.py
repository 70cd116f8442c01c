"""`rackplane rack-health`: an operator's verdict on a whole rack (`ReportRackHealth`).

A rack-level fault takes the rack's NVLink domain, in part or whole: `--state degraded` (one
NVSwitch tray of nine lost, about 8/9 of the bandwidth left) keeps what runs there and gives
the rack new slices only when no healthy rack fits them; `--state failed` (the domain down, the
power shelf) evacuates the rack's slices and keeps new work off it; `--state healthy` returns
it after the repair (the GPU Manager, which degrades or fails a rack on NVLink-fabric XIDs from
several of its nodes, starts over on it then). Sent and printed like the other client
commands (`_client`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from rackplane.cli._client import Actor, Broker, Cluster, Json, Prefix, Timeout, _issue
from rackplane.cli._config import ConfigFile
from rackplane.models import RackHealth, ReportRackHealth

_STATES = " or ".join(h.value for h in RackHealth)


def register(app: typer.Typer) -> None:
    """Add `rack-health` to the CLI."""
    app.command(name="rack-health")(rack_health)


def rack_health(
    rack: Annotated[str, typer.Option(help="Rack id.")],
    state: Annotated[RackHealth, typer.Option(help=f"{_STATES}.")],
    cluster: Cluster,
    cause: Annotated[str, typer.Option(help="What was seen or done (NVSwitch tray 3).")] = "",
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Report a rack's health (as an operator): degraded keeps its work but prefers healthy racks
    for new slices, failed evacuates it, healthy returns it."""
    _issue(
        ReportRackHealth,
        cluster,
        config_file=config_file,
        broker=broker,
        prefix=prefix,
        actor=actor,
        timeout=timeout,
        json_out=json_out,
        rack=rack,
        health=state,
        cause=cause,
    )
