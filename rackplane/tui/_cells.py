"""How a rack looks in the cluster view: one row of node cells and its counters.

Every node is a two-character cell; its background says its role (free, spare, failed, ...,
or the colour of the job it serves: one colour per job) and its glyph what else holds
(`b` a borrowed spare, `~` degraded, `c` cordoned, `X` failed). Colours come from a fixed
palette indexed by a stable hash of the job id, so a job keeps its colour across runs and
screenshots.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style

from rackplane.models import Health
from rackplane.projections import ClusterState, NodeRole, node_roles

CELL = 2
JOB_PALETTE = (
    "#1f77b4", "#9467bd", "#17becf", "#e377c2", "#8c564b", "#5f87ff", "#af5fd7", "#00afaf",
    "#d75f87", "#875f00", "#5fafff", "#8787ff", "#00875f", "#d787d7", "#5f5faf", "#af875f",
    "#0087af", "#af5f87", "#5fd7d7", "#875fd7",
)  # fmt: skip
"""Blues, purples, teals, pinks and browns: none close to the state colours below."""

FG_DARK = "#101010"
FG_LIGHT = "#f0f0f0"
ROLE_STYLE = {
    NodeRole.FREE: Style(color="#8a8a8a", bgcolor="#3a3a3a"),
    NodeRole.SPARE: Style(color=FG_LIGHT, bgcolor="#2e7d32"),
    NodeRole.FAILED: Style(color=FG_LIGHT, bgcolor="#d32f2f", bold=True),
    NodeRole.UNAVAILABLE: Style(color=FG_DARK, bgcolor="#c8b400"),
}
DEGRADED = Style(color=FG_DARK, bgcolor="#ff9800", bold=True)
CORDONED = Style(color=FG_LIGHT, bgcolor="#616161", bold=True)
LEGEND = (
    ("free", ROLE_STYLE[NodeRole.FREE], "  "),
    ("spare", ROLE_STYLE[NodeRole.SPARE], "  "),
    ("job (one colour each)", Style(color=FG_LIGHT, bgcolor=JOB_PALETTE[0]), "  "),
    ("borrowed spare", Style(color=FG_LIGHT, bgcolor=JOB_PALETTE[1], bold=True), "b "),
    ("degraded", DEGRADED, "~ "),
    ("cordoned", CORDONED, "c "),
    ("failed", ROLE_STYLE[NodeRole.FAILED], "X "),
)
CURSOR = Style(reverse=True, underline=True)
TEXT = Style(color="#d0d0d0")
DIM = Style(color="#8a8a8a")
BAD = Style(color="#ff5f5f", bold=True)
RESERVED = Style(color="#ffd75f", bold=True)


def job_colour(job: str) -> str:
    """The colour of a job: stable across runs (crc32, not Python's salted hash)."""
    return JOB_PALETTE[zlib.crc32(job.encode()) % len(JOB_PALETTE)]


@dataclass(frozen=True, slots=True)
class RackCounts:
    """The counters of one rack row."""

    free: int
    allocated: int
    spares: int
    failed: int


@dataclass(frozen=True, slots=True)
class RackRow:
    """One rack rendered: its segments (without cursor) and its counters."""

    rack: str
    segments: tuple[Segment, ...]
    counts: RackCounts
    cells_at: int
    """Column where the first node cell starts."""
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RowLayout:
    """Widths shared by every row, so columns line up."""

    rack_width: int
    pod_width: int
    nodes: int

    @property
    def cells_at(self) -> int:
        return self.rack_width + 1 + self.pod_width + 1

    @property
    def width(self) -> int:
        return self.cells_at + CELL * self.nodes + len(" f00 a00 s00 ")


def layout_of(state: ClusterState) -> RowLayout:
    """Widths from the longest rack id, pod id and rack size."""
    racks = list(state.racks.values())
    if not racks:
        return RowLayout(4, 3, 18)
    return RowLayout(
        max(len(r.id) for r in racks),
        max(len(r.pod) for r in racks),
        max(r.size for r in racks),
    )


def node_style(state: ClusterState, node: str, role: NodeRole) -> tuple[str, Style]:
    """The glyph and style of one node cell."""
    ns = state.nodes[node]
    if role is NodeRole.ALLOCATED:
        job = state.jobs.get(ns.job) if ns.job else None
        bg = job_colour(ns.job or "")
        borrowed = job is not None and job.borrowing
        glyph = (
            "~"
            if ns.health is Health.DEGRADED
            else "c"
            if ns.cordoned
            else "b"
            if borrowed
            else " "
        )
        return glyph + " ", Style(color=FG_LIGHT, bgcolor=bg, bold=glyph != " ")
    if role is NodeRole.FAILED:
        return "X ", ROLE_STYLE[role]
    if role is NodeRole.UNAVAILABLE:
        if ns.health is Health.DEGRADED:
            return "~ ", DEGRADED
        if ns.cordoned:
            return "c ", CORDONED
        return "  ", ROLE_STYLE[role]  # idle in a failed rack
    return "  ", ROLE_STYLE[role]


def render_rack(state: ClusterState, rack: str, layout: RowLayout) -> RackRow:
    """One rack row: id, pod, node cells, counters (free / allocated / spares left)."""
    r = state.racks[rack]
    roles = node_roles(state, rack)
    bad = not r.healthy
    reserved = rack in state.reservations
    segs = [
        Segment(rack.ljust(layout.rack_width), BAD if bad else RESERVED if reserved else TEXT),
        Segment(" " + r.pod.ljust(layout.pod_width) + " ", DIM),
    ]
    counts = dict.fromkeys(NodeRole, 0)
    for node, role in roles.items():
        counts[role] += 1
        glyph, style = node_style(state, node, role)
        segs.append(Segment(glyph, style))
    pad = CELL * (layout.nodes - len(roles))
    if pad:
        segs.append(Segment(" " * pad))
    rc = RackCounts(
        free=counts[NodeRole.FREE],
        allocated=counts[NodeRole.ALLOCATED],
        spares=counts[NodeRole.SPARE],
        failed=counts[NodeRole.FAILED],
    )
    spare_style = BAD if rc.spares == 0 and rc.allocated else TEXT
    segs += [
        Segment(f" f{rc.free:02d} a{rc.allocated:02d} ", TEXT),
        Segment(f"s{rc.spares:02d}", spare_style),
        Segment(" "),
    ]
    return RackRow(rack, tuple(segs), rc, layout.cells_at, tuple(roles))
