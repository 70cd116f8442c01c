"""`rackplane reserve`, `unreserve` and `reservations`: hold racks or nodes for a time.

`reserve` sends `Reserve` (an admin command): from then on no work is placed on the nodes
that could run past the start; at the start they are cordoned and restartable work on them
is preempted; at the end the cordons are lifted. With `--user` or `--queue` it is a hero
run's room instead: nothing is cordoned, jobs submitted with `--reservation NAME` by those
users or in those queues run there from the start to the end, everyone else's work is
preempted and kept off. `unreserve` cancels one. `reservations` lists a cluster's, read from
the live event log as `rackplane status` reads.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from rackplane.cli._client import (
    Actor,
    Broker,
    Cluster,
    Json,
    NoWait,
    Prefix,
    Timeout,
    _issue,
)
from rackplane.cli._config import ConfigFile
from rackplane.cli._render import console, fail, print_json
from rackplane.models import CancelReservation, Reserve

When = Annotated[
    str,
    typer.Option(
        help="ISO 8601 time (UTC when it names no offset), or 'now', or relative: '+90m', "
        "'+4h', '+2d'."
    ),
]
_RELATIVE = re.compile(r"^\+(\d{1,6})([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def when(text: str, flag: str, now: datetime) -> datetime:
    """The time `text` names (see `When`), or exit with one line."""
    text = text.strip()
    if text == "now":
        return now
    m = _RELATIVE.match(text)
    if m:
        return now + timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        fail(f"{flag} {text!r}: expected an ISO 8601 time, 'now' or '+N' with m, h or d")
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def register(app: typer.Typer) -> None:
    """Add the reservation commands to the CLI."""
    for command in (reserve, unreserve):
        app.command()(command)


def reserve(
    name: Annotated[str, typer.Option(help="The reservation's name.")],
    cluster: Cluster,
    start: When,
    end: When,
    racks: Annotated[str, typer.Option(help="Comma-separated racks.")] = "",
    nodes: Annotated[str, typer.Option(help="Comma-separated nodes.")] = "",
    reason: Annotated[str, typer.Option(help="Why (maintenance, a hero run...).")] = "",
    user: Annotated[
        list[str] | None,
        typer.Option(
            help="A job owner who may run in it (repeatable); with --queue, or neither for "
            "maintenance."
        ),
    ] = None,
    queue: Annotated[
        list[str] | None,
        typer.Option(help="A leaf queue whose jobs may run in it (repeatable)."),
    ] = None,
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    no_wait: NoWait = False,
    config_file: ConfigFile = None,
) -> None:
    """Reserve racks or nodes from --start to --end (an admin command): for maintenance, or
    for the jobs of --user / --queue that name it (submit --reservation)."""
    now = datetime.now(UTC)
    begins, ends = when(start, "--start", now), when(end, "--end", now)
    rack_ids = tuple(r for r in (x.strip() for x in racks.split(",")) if r)
    node_ids = tuple(n for n in (x.strip() for x in nodes.split(",")) if n)
    if not rack_ids and not node_ids:
        fail("name what to reserve: --racks and/or --nodes")
    if ends <= begins:
        fail(f"--end {ends.isoformat()} is not after --start {begins.isoformat()}")
    _issue(
        Reserve,
        cluster,
        **_sending(config_file, broker, prefix, actor, timeout, json_out, no_wait),
        reservation=name,
        racks=rack_ids,
        nodes=node_ids,
        start=begins,
        end=ends,
        reason=reason,
        users=tuple(user or ()),
        queues=tuple(queue or ()),
    )


def unreserve(
    name: Annotated[str, typer.Option(help="The reservation's name.")],
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
    """Cancel a reservation; the cordons its start made are lifted."""
    _issue(
        CancelReservation,
        cluster,
        **_sending(config_file, broker, prefix, actor, timeout, json_out, no_wait),
        reservation=name,
        reason=reason,
    )


def _sending(
    config_file: Path | None,
    broker: str | None,
    prefix: str | None,
    actor: str | None,
    timeout: float,
    json_out: bool,
    no_wait: bool,
) -> dict[str, Any]:
    """The client options of a command, as `_issue` takes them."""
    return {
        "config_file": config_file,
        "broker": broker,
        "prefix": prefix,
        "actor": actor,
        "timeout": timeout,
        "json_out": json_out,
        "wait": not no_wait,
    }


def reservations(
    cluster: Cluster,
    broker: Broker = None,
    prefix: Prefix = None,
    timeout: Annotated[float, typer.Option(help="Seconds a read may stand still.")] = 10.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """The cluster's reservations: nodes, start, end, whether started, why."""
    from rackplane.cli._read import _settings, _view

    s = _settings(config_file, broker, prefix)
    state = _view(s, cluster, timeout).state
    rows: list[dict[str, Any]] = [
        {
            "reservation": w.id,
            "nodes": len(w.nodes),
            "racks": sorted({state.nodes[n].rack for n in w.nodes}),
            "start": w.start.isoformat(),
            "end": w.end.isoformat(),
            "started": w.started,
            "cordoned": len(w.cordoned),
            "reason": w.reason,
            "users": list(w.users),
            "queues": list(w.queues),
        }
        for w in sorted(state.windows.values(), key=lambda w: (w.start, w.id))
    ]
    if json_out:
        print_json(rows)
        return
    if not rows:
        console.print(f"cluster {escape(cluster)} has no reservations")
        return
    t = Table(title=f"Reservations of {cluster}", title_justify="left", header_style="bold")
    for col in ("reservation", "racks", "nodes", "start", "end", "state", "for", "why"):
        t.add_column(col, justify="right" if col == "nodes" else "left")
    for r in rows:
        shown = r["racks"]
        t.add_row(
            escape(str(r["reservation"])),
            ", ".join(shown[:4]) + (f" +{len(shown) - 4}" if len(shown) > 4 else ""),
            f"{r['nodes']:,}",
            str(r["start"])[:16],
            str(r["end"])[:16],
            "started" if r["started"] else "waiting",
            escape(members(r["users"], r["queues"])),
            escape(str(r["reason"])),
        )
    console.print(t)


def members(users: list[str], queues: list[str]) -> str:
    """Who may use a reservation, in words: 'alice, queue pretrain', or 'maintenance'."""
    who = [*users, *(f"queue {q}" for q in queues)]
    return ", ".join(who) if who else "maintenance"
