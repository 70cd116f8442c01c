"""The detail of a rack: its nodes, the jobs on it, health evidence and its recent history."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from rackplane.models import Event
from rackplane.projections import ClusterState, node_roles
from rackplane.tui._describe import explain, subjects

HISTORY_ROWS = 12


def rack_detail(
    state: ClusterState, rack: str, events: Sequence[Event], selected: str | None = None
) -> Group:
    """Tables for one rack (`events`: the timeline up to the shown state)."""
    r = state.racks[rack]
    roles = node_roles(state, rack)
    head = Text.assemble(
        (f"{rack}", "bold"),
        f"  pod {r.pod}  health {r.health.value}",
        (f" ({r.cause})" if r.cause else ""),
        f"  spares left {state.spares_left(rack)}",
        ("  reserved for " + state.reservations[rack]) if rack in state.reservations else "",
    )
    nodes = Table(header_style="bold", expand=True, pad_edge=False)
    for col in ("node", "role", "health", "cordoned", "job", "slice", "evidence"):
        nodes.add_column(col)
    for n, role in roles.items():
        ns = state.nodes[n]
        style = "reverse" if n == selected else ""
        nodes.add_row(
            n,
            role.value,
            ns.health.value,
            "yes" if ns.cordoned else "",
            ns.job or "",
            "" if ns.slice is None else str(ns.slice),
            ns.cause,
            style=style,
        )
    jobs = Table(header_style="bold", expand=True, pad_edge=False)
    for col in ("job", "status", "kind", "nodes here", "slices here"):
        jobs.add_column(col)
    on_rack: dict[str, list[str]] = {}
    for n in roles:
        if (j := state.nodes[n].job) is not None:
            on_rack.setdefault(j, []).append(n)
    for j, ns_ in on_rack.items():
        js = state.jobs.get(j)
        if js is None:
            continue
        here = [str(s.index) for s in js.slices if rack in s.racks]
        jobs.add_row(j, js.status.value, js.spec.kind.value, str(len(ns_)), ", ".join(here))
    history = Table(header_style="bold", expand=True, pad_edge=False)
    for col in ("seq", "at", "type", "who", "why"):
        history.add_column(col)
    members = set(roles)
    shown: list[Event] = []
    for e in reversed(events):
        s = subjects(e)
        if rack in s.racks or members.intersection(s.nodes):
            shown.append(e)
            if len(shown) >= HISTORY_ROWS:
                break
    for e in reversed(shown):
        history.add_row(
            str(e.seq), e.at.strftime("%m-%d %H:%M:%S"), e.type, subjects(e).label(), explain(e)
        )
    return Group(
        head,
        Text("Nodes", style="bold underline"),
        nodes,
        Text("Jobs", style="bold underline"),
        jobs,
        Text("History (latest last)", style="bold underline"),
        history,
    )
