"""The queues view: the queue tree with quota, limits, held (a bar), borrowed, waiting, share.

The figures are the core's (`rackplane.policies.quotas.queue_rows`, O(queues + jobs)), the same
rows `rackplane queues` prints. A new state updates the cells in place while the tree is the
same (DataTable's `update_cell` is cheap; re-adding rows is not); enter on a queue opens its
jobs (running, then waiting in line order with the reason each waits).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static
from textual.widgets.data_table import ColumnKey

from rackplane.models import Event, JobBlocked, JobStatus, QueueStanding
from rackplane.policies.quotas import QueueRow
from rackplane.projections import ClusterState, job_gpus
from rackplane.tui._cells import JOB_PALETTE, STATE_COLOURS
from rackplane.tui._tables import cursor_key

COLUMNS = ("queue", "quota", "limits", "held of quota", "borrowed", "GPUs", "running",
           "waiting (blocked)", "share")  # fmt: skip
RIGHT = frozenset(("quota", "limits", "borrowed", "GPUs", "running"))
"""The columns of figures (right-aligned)."""
BAR = 20
"""Cells of the held bar: the larger of quota and held fills it."""
HELD = JOB_PALETTE[0]
"""Held within the quota: a job colour (nodes that serve jobs)."""
BORROWED = STATE_COLOURS["degraded"]
"""Held above the quota (borrowed, reclaimable): the orange of a warning."""
UNUSED = "#585858"
"""Quota not held: the scrubber's grey."""
BAR_GLYPHS = {HELD: "█", BORROWED: "▓", UNUSED: "░"}
"""Each part of the bar has its own glyph too: not by colour alone."""
BLOCKED = "#ffd75f"
"""Blocked jobs: the events view's JobBlocked yellow."""
NO_QUEUES = (
    "cluster {cluster} has no queues: every job is in one line by priority, then FIFO. To share "
    "it by quota, set policy: queues: in the cluster file (PolicySettings.queues, a tree of "
    "QueueSpec; docs/CONFIG.md)"
)
HINT = (
    f" in nodes.  quota: nominal  limits: borrowing/lending (- none)  [{HELD}]█[/] held within "
    f"quota  [{BORROWED}]▓[/] borrowed (above quota, reclaimable)  [{UNUSED}]░[/] quota unused  "
    "share: usage / weighted quota, lowest first  enter: its jobs"
)


def held_bar(row: QueueRow, width: int = BAR) -> Text:
    """Held vs quota: within-quota cells, then borrowed cells, then the quota left unused."""
    scale = max(row.nominal_nodes, row.held_nodes, 1)
    quota = round(width * row.nominal_nodes / scale)
    held = round(width * row.held_nodes / scale)
    within = min(held, quota)
    if row.held_nodes and not held:
        within = 1  # one node of a large quota still shows
    borrowed = max(0, held - quota) if row.borrowed_nodes else 0
    if row.borrowed_nodes and not borrowed:
        borrowed, within = 1, max(0, within - 1)
    unused = max(0, quota - within)
    text = Text()
    for colour, n in ((HELD, within), (BORROWED, borrowed), (UNUSED, unused)):
        text.append(BAR_GLYPHS[colour] * n, style=colour)
    text.append(" " * (width - len(text)))
    text.append(f" {row.held_nodes:,}/{row.nominal_nodes:,}")
    return text


def _limit(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def queue_cells(row: QueueRow) -> tuple[Text | str, ...]:
    """One queue's cells, in `COLUMNS` order."""
    waiting = Text(f"{row.waiting_jobs:,}")
    if row.waiting_jobs:
        waiting.append(f" ({row.blocked_jobs:,})", style=BLOCKED if row.blocked_jobs else "")
        waiting.append(f"  {row.waiting_nodes:,} nodes")
    borrowed = f"bold {BORROWED}" if row.borrowed_nodes else ""
    return (
        Text("  " * row.depth + row.queue, style="" if row.depth else "bold"),
        _right(f"{row.nominal_nodes:,}"),
        _right(f"{_limit(row.borrowing_limit)}/{_limit(row.lending_limit)}"),
        held_bar(row),
        _right(f"{row.borrowed_nodes:,}", borrowed),
        _right(f"{row.held_gpus:,}"),
        _right(f"{row.running_jobs:,}"),
        waiting,
        Text(f"{row.share:.3f}" + (f" x{row.weight:g}" if row.weight != 1 else "")),
    )


def _right(text: str, style: str = "") -> Text:
    return Text(text, style=style, justify="right")


class QueuesPane(Vertical):
    """The queue tree as a table (or the line saying there are no queues)."""

    class QueueSelected(Message):
        """The operator chose a queue (enter): the app shows its jobs."""

        def __init__(self, queue: str) -> None:
            super().__init__()
            self.queue = queue

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[QueueRow] = []
        self._cells: dict[str, tuple[Text | str, ...]] = {}
        self._columns: list[ColumnKey] = []

    def compose(self) -> ComposeResult:
        yield Static(id="queues-none")
        yield Static(HINT, id="queues-hint")
        table: DataTable[Text | str] = DataTable(cursor_type="row", id="queues-table")
        self._columns = table.add_columns(*(_right(c) if c in RIGHT else c for c in COLUMNS))
        yield table

    def show(self, rows: list[QueueRow], cluster: str) -> None:
        """Show `rows`: cells updated in place while the tree is the same, else rebuilt."""
        self.rows = rows
        none = self.query_one("#queues-none", Static)
        none.display = not rows
        self.query_one("#queues-hint", Static).display = bool(rows)
        if not rows:
            none.update(Text(" " + NO_QUEUES.format(cluster=cluster)))
        table = self.query_one(DataTable)
        cells = {r.queue: queue_cells(r) for r in rows}
        if list(cells) != list(self._cells):
            keep = table.cursor_row
            table.clear()
            for queue, row in cells.items():
                table.add_row(*row, key=queue)
            if rows:
                table.move_cursor(row=min(keep, len(rows) - 1))
        else:
            for queue, row in cells.items():
                for column, old, new in zip(self._columns, self._cells[queue], row, strict=True):
                    if old != new:
                        table.update_cell(queue, column, new)
        self._cells = cells

    @property
    def selected_queue(self) -> str | None:
        """The queue under the table's cursor."""
        return cursor_key(self.query_one(DataTable))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.QueueSelected(str(event.row_key.value)))


def queue_detail(state: ClusterState, queue: str, events: Sequence[Event]) -> Group:
    """One queue's jobs (its leaves' for a parent): running first, then the waiting ones in
    line order (priority, re-queued first, FIFO) with why each waits and its standing when it
    was last blocked (`events`: the timeline up to the shown state)."""
    under = {queue} | _descendants(state, queue)
    jobs = [j for j in state.jobs.values() if j.spec.queue in under]
    holding = sorted((j for j in jobs if j.status.holds_nodes), key=lambda j: j.order)
    waiting = sorted((j for j in jobs if not j.status.holds_nodes), key=lambda j: j.queue_key)
    standing = _standings(events, {j.id for j in waiting if j.blocked is not None})
    run = Table(header_style="bold", expand=True, pad_edge=False)
    for col in ("job", "queue", "status", "kind", "prio", "nodes", "GPUs", "since"):
        run.add_column(col)
    for j in holding:
        since = j.placed_at.strftime("%m-%d %H:%M") if j.placed_at else ""
        gpus = str(job_gpus(state, j))
        run.add_row(j.id, j.spec.queue or "", j.status.value, j.spec.kind.value,
                    str(j.spec.priority), str(len(j.nodes)), gpus, since)  # fmt: skip
    wait = Table(header_style="bold", expand=True, pad_edge=False)
    for col in ("#", "job", "queue", "prio", "nodes", "waits for", "standing when blocked"):
        wait.add_column(col)
    place: dict[str, int] = {}
    for j in waiting:
        leaf = j.spec.queue or ""
        place[leaf] = place.get(leaf, 0) + 1
        b = j.blocked if j.status is JobStatus.QUEUED else None
        why = Text(f"{b.reason}", style=BLOCKED) if b else Text("its turn (not blocked)")
        if b and b.explanation:
            why.append(f": {b.explanation}")
        s = standing.get(j.id)
        said = (
            f"queue rank {s.queue_rank}, #{s.position} in line, share {s.share:.3f}, "
            f"held {s.nodes_held}/{s.nominal_nodes}"
            if s is not None
            else ""
        )
        wait.add_row(str(place[leaf]), j.id, leaf, str(j.spec.priority), str(j.spec.nodes),
                     why, said)  # fmt: skip
    return Group(
        Text(f"Running ({len(holding)})", style="bold underline"),
        run,
        Text(f"Waiting ({len(waiting)}), in line order per queue", style="bold underline"),
        wait,
    )


def _descendants(state: ClusterState, queue: str) -> set[str]:
    children: dict[str, list[str]] = {}
    for q in state.settings.queues:
        if q.parent is not None:
            children.setdefault(q.parent, []).append(q.name)
    out: set[str] = set()
    todo = list(children.get(queue, ()))
    while todo:
        name = todo.pop()
        out.add(name)
        todo += children.get(name, ())
    return out


def _standings(events: Sequence[Event], jobs: set[str]) -> dict[str, QueueStanding]:
    """The standing of each job's last `JobBlocked` (newest events first, until all found)."""
    found: dict[str, QueueStanding | None] = {}
    for e in reversed(events):
        if len(found) == len(jobs):
            break
        if isinstance(e, JobBlocked) and e.job in jobs and e.job not in found:
            found[e.job] = e.standing
    return {j: s for j, s in found.items() if s is not None}
