"""How a rack looks in the cluster view: one row of node cells and its counters.

Every node is a two-character cell; its background says its role (free, spare, failed, ...,
or the colour of the job it serves: one colour per job) and its glyph what else holds
(`b` a borrowed spare, `~` degraded, `c` cordoned, `X` failed). Colours come from a fixed
palette indexed by a stable hash of the job id, so a job keeps its colour across runs and
screenshots; the palette and the state colours stay apart in 256 and 16 colours too. The rack
id is marked after it, not only coloured: `*` held for a job, `~` a degraded rack (one NVSwitch
tray lost: it keeps its work, new slices go there only when no healthy rack fits), `!` a failed
rack (the whole NVLink domain down).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style

from rackplane.models import Health
from rackplane.projections import ClusterState, NodeRole, node_roles

CELL = 2
FG_DARK = "#101010"
FG_LIGHT = "#f0f0f0"
STATE_COLOURS = {
    "free": "#303030",
    "spare": "#008700",
    "failed": "#d70000",
    "unavailable": "#d7d700",
    "degraded": "#d75f00",
    "cordoned": "#a8a8a8",
}
"""The backgrounds that say a node's state: greys, green, red, yellow, orange. Each is an
xterm-256 colour, and each stays distinct from the others and from every job colour when a
terminal has only 256 or 16 colours (tests/tui/test_palette.py downgrades them as Rich does)."""
JOB_PALETTE = (
    "#0087af", "#8700d7", "#5fafff", "#d75faf", "#005fd7", "#00afd7", "#af5fd7", "#0000d7",
    "#87d7ff", "#af00af", "#5f87d7", "#0087d7", "#d75fff", "#00afff", "#875fff", "#d700af",
    "#5fd7ff", "#5f5fd7", "#ff5fff", "#0087ff",
)  # fmt: skip
"""Blues, purples, azures and magentas only: 20 distinct colours in 256-colour terminals, six
in 16 (blue, magenta, cyan and their bright kinds), none of them a state's colour. No green
(spare), red or pink (failed), yellow, orange or grey."""


def _text_on(bg: str) -> str:
    """Dark text on a light background, light text on a dark one."""
    r, g, b = (int(bg[i : i + 2], 16) for i in (1, 3, 5))
    return FG_DARK if 0.2126 * r + 0.7152 * g + 0.0722 * b > 140 else FG_LIGHT


ROLE_STYLE = {
    NodeRole.FREE: Style(color="#8a8a8a", bgcolor=STATE_COLOURS["free"]),
    NodeRole.SPARE: Style(color=FG_LIGHT, bgcolor=STATE_COLOURS["spare"]),
    NodeRole.FAILED: Style(color=FG_LIGHT, bgcolor=STATE_COLOURS["failed"], bold=True),
    NodeRole.UNAVAILABLE: Style(color=FG_DARK, bgcolor=STATE_COLOURS["unavailable"]),
}
DEGRADED = Style(color=FG_DARK, bgcolor=STATE_COLOURS["degraded"], bold=True)
CORDONED = Style(color=FG_DARK, bgcolor=STATE_COLOURS["cordoned"], bold=True)
TEXT = Style(color="#d0d0d0")
DIM = Style(color="#8a8a8a")
BAD = Style(color="#ff5f5f", bold=True)
RESERVED = Style(color="#ffd75f", bold=True)
HELD_MARK = "*"
"""After the id of a rack held for a job (a defrag plan's reservation): not by colour alone."""
FAILED_MARK = "!"
"""After the id of a failed rack (the whole NVLink domain: NVSwitch trays, power shelf)."""
DEGRADED_MARK = "~"
"""After the id of a degraded rack (one NVSwitch tray lost): the node cells' degraded glyph."""
WARN = Style(color=STATE_COLOURS["degraded"], bold=True)
"""A degraded rack's label: the degraded nodes' orange, apart from the held and failed labels."""
LEGEND = (
    ("free", ROLE_STYLE[NodeRole.FREE], "  "),
    ("spare", ROLE_STYLE[NodeRole.SPARE], "  "),
    ("job (one colour each)", Style(color=FG_LIGHT, bgcolor=JOB_PALETTE[0]), "  "),
    ("borrowed spare", Style(color=_text_on(JOB_PALETTE[1]), bgcolor=JOB_PALETTE[1], bold=True),
     "b "),
    ("degraded", DEGRADED, "~ "),
    ("cordoned", CORDONED, "c "),
    ("failed", ROLE_STYLE[NodeRole.FAILED], "X "),
    ("idle in a failed rack", ROLE_STYLE[NodeRole.UNAVAILABLE], "  "),
)  # fmt: skip
"""The node cells: (label, style, glyph)."""
RACK_LEGEND = (
    ("held for a job (defrag plan, reservation)", RESERVED, f"r07{HELD_MARK}"),
    ("degraded (NVSwitch tray lost)", WARN, f"r07{DEGRADED_MARK}"),
    ("failed (NVLink domain, power)", BAD, f"r07{FAILED_MARK}"),
)
"""The rack labels: (label, style, sample label)."""
LABEL_SEGMENTS = 3
"""Segments before the first node cell in a row: rack id, its mark, pod."""
CURSOR = Style(reverse=True, underline=True)


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
        return glyph + " ", Style(color=_text_on(bg), bgcolor=bg, bold=glyph != " ")
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
    label = (
        (FAILED_MARK, BAD)
        if not r.in_service
        else (DEGRADED_MARK, WARN)
        if r.degraded
        else (HELD_MARK, RESERVED)
        if rack in state.reservations
        else (" ", TEXT)
    )
    segs = [
        Segment(rack.ljust(layout.rack_width), label[1]),
        Segment(label[0], label[1]),
        Segment(r.pod.ljust(layout.pod_width) + " ", DIM),
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
