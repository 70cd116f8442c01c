"""The lines around the views: the banner, the legend, the summary, and what `n`/`p` say.

Pure functions of what the app holds (no widgets are queried here), so tests can read them.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from rackplane.models import JobStatus
from rackplane.projections import ClusterState
from rackplane.tui._cells import LEGEND, RACK_LEGEND
from rackplane.tui._cluster_grid import ClusterGrid
from rackplane.tui._timeline import Timeline
from rackplane.tui.sources import Source

RETRY_S = 5.0
"""After a source fails (a broker out of reach), the console tries again this much later."""
QUIET_S = 10.0
"""A source connected this long without an event gets a banner saying so."""
FAILING = "bold #ffffff on #af0000"
WAITING = "bold #101010 on #ffd75f"


def banner(
    source: Source, error: str | None, timeline: Timeline | None, waited: float
) -> tuple[str, str]:
    """The banner's text and style ("" when there is nothing to say)."""
    if error is not None:
        return f" {error}  (trying again every {RETRY_S:.0f} s; q quits)", FAILING
    if not source.live or (timeline is not None and len(timeline)):
        return "", ""
    if not source.connected:
        return f" connecting to {source.description} ...", WAITING
    if waited >= QUIET_S:
        which = f"cluster {source.cluster}" if source.cluster else "any cluster"
        text = (
            f" {source.description} answers, but no event of {which} yet: is the pipeline "
            "running, and is that the cluster's id?"
        )
        return text, WAITING
    return "", ""


def nothing_notable(direction: int, position: int, timeline: Timeline, source: Source) -> str:
    """Why `n` (direction 1) or `p` (-1) found nothing."""
    what = "failure, swap or preemption"
    seq = timeline.events[position - 1].seq if position else 0
    if direction > 0 and position == len(timeline):
        now = "now (LIVE): the next one shows as it happens" if source.live else "the end"
        return f"no {what} after seq {seq}: this is {now}; p jumps back"
    if direction > 0:
        last = timeline.events[-1].seq
        return f"no {what} after seq {seq} (up to seq {last}); l comes back to now"
    return f"no {what} before seq {seq}"


def legend() -> Text:
    """Two lines: the node cells; the rack labels and the counters."""
    parts: list[tuple[str, Any] | str] = [" "]
    for label, style, glyph in LEGEND:
        parts += [(glyph, style), f" {label}   "]
    parts.append("\n racks: ")
    for label, style, sample in RACK_LEGEND:
        parts += [(sample, style), f" {label}   "]
    parts.append("   counters: f free  a allocated  s spares left   enter: rack detail")
    return Text.assemble(*parts)


def summary(state: ClusterState, grid: ClusterGrid, n_alerts: int) -> Text:
    t = grid.totals()
    statuses = dict.fromkeys(JobStatus, 0)
    blocked = 0
    for j in state.jobs.values():
        statuses[j.status] += 1
        blocked += j.status is JobStatus.QUEUED and j.blocked is not None
    gpus = state.index.topology.gpu_count if state.index else 0
    return Text.assemble(
        (f" {len(grid.racks)} racks", "bold"),
        f"  {gpus:,} GPUs   nodes: allocated {t.allocated:,}  free {t.free:,}  "
        f"spares {t.spares:,}  ",
        (f"failed {t.failed}", "bold #ff5f5f" if t.failed else ""),
        "  racks out of spares ",
        (str(t.racks_out_of_spares), "bold #ff5f5f" if t.racks_out_of_spares else ""),
        f"   jobs: running {statuses[JobStatus.RUNNING]}  placed {statuses[JobStatus.PLACED]}  "
        f"queued {statuses[JobStatus.QUEUED]} (blocked {blocked})  finished {len(state.finished)}",
        (f"   alerts {n_alerts}", "bold #ffd75f" if n_alerts else ""),
    )
