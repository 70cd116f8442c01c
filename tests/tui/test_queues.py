"""The queues view: the tree with quota, limits, held (borrowed apart), waiting and share.

The cluster of these stories (built with the engine, as tests/policies/test_queues.py does):
four racks of 18 nodes, 2 spares each, 16 nodes of each take work; jobs are one rack.

    research (org)                        prod (org)
      pretrain  nominal 32: p1 p2 + p3      infer  nominal 16: nothing
                (p3 borrows 16)
      rl        nominal 16, borrowing 0: r1 runs, r2 waits (blocked: quota)

    r01 [p1] r02 [p2] r03 [r1] r04 [p3 borrowing]
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import cache
from typing import Any

from rich.color import Color, ColorSystem
from textual.pilot import Pilot
from textual.widgets import DataTable, Static, TabbedContent

from rackplane.engine import Engine
from rackplane.models import (
    Event,
    JobPlaced,
    PolicySettings,
    QueueSpec,
    RegisterTopology,
    StartJob,
    SubmitJob,
)
from rackplane.policies import preset
from rackplane.policies.quotas import queue_rows
from rackplane.tui import MemorySource
from rackplane.tui._dialogs import DetailScreen
from rackplane.tui._queues import BAR_GLYPHS, QueuesPane, held_bar, queue_cells
from rackplane.tui.app import ConsoleApp
from tests.builders import CLUSTER, T0, cmd, job, rack, topology
from tests.tui.conftest import SIZE, console, story

TREE = (
    QueueSpec(name="research"),
    QueueSpec(name="pretrain", parent="research", nominal_nodes=32),
    QueueSpec(name="rl", parent="research", nominal_nodes=16, borrowing_limit=0),
    QueueSpec(name="prod"),
    QueueSpec(name="infer", parent="prod", nominal_nodes=16, weight=2),
)


@cache
def shared_cluster() -> tuple[Event, ...]:
    """The stories' events (module docstring)."""
    now = [T0]
    settings = PolicySettings(slice_size=16, queues=TREE)
    policies, chosen = preset("tas+spares+defrag", settings)
    engine = Engine(CLUSTER, clock=lambda: now[0], policies=policies)
    racks = topology(*(rack(r) for r in ("r01", "r02", "r03", "r04")))
    events = engine.handle(cmd(RegisterTopology, id="register", topology=racks, settings=chosen))
    for job_id, queue in (("p1", "pretrain"), ("p2", "pretrain"), ("r1", "rl"),
                          ("p3", "pretrain"), ("r2", "rl")):  # fmt: skip
        now[0] += timedelta(minutes=1)
        spec = job(job_id, 16, queue=queue, checkpoint_interval=timedelta(hours=1))
        out = engine.handle(cmd(SubmitJob, id=f"submit-{job_id}", job=spec))
        events += out
        if any(isinstance(e, JobPlaced) and e.job == job_id for e in out):
            events += engine.handle(cmd(StartJob, id=f"start-{job_id}", job=job_id))
    return tuple(events)


def shared_app() -> ConsoleApp:
    return console(MemorySource(shared_cluster()))


async def until(pilot: Pilot[Any], ready: Callable[[], bool], what: str) -> None:
    """Wait until `ready()` holds on screen (no fixed sleep), up to 10 s."""
    for _ in range(100):
        if ready():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"not shown within 10 s: {what}")


def shown_rows(app: ConsoleApp) -> dict[str, list[str]]:
    table = app.query_one("#queues-table", DataTable)
    return {str(key.value): [str(c) for c in table.get_row(key)] for key in table.rows}


def test_the_rows_are_the_cores_figures_the_bar_keeps_borrowed_apart() -> None:
    from rackplane.projections import ClusterState, evolve, initial_state

    state: ClusterState = initial_state(CLUSTER)
    for e in shared_cluster():
        state = evolve(state, e)
    rows = {r.queue: r for r in queue_rows(state)}
    pretrain = rows["pretrain"]
    assert (pretrain.held_nodes, pretrain.nominal_nodes, pretrain.borrowed_nodes) == (48, 32, 16)
    bar = held_bar(pretrain, width=12)
    assert bar.plain == "█" * 8 + "▓" * 4 + " 48/32"
    infer = held_bar(rows["infer"], width=12)
    assert infer.plain == "░" * 12 + " 0/16"
    cells = [str(c) for c in queue_cells(rows["rl"])]
    assert cells[0] == "  rl" and cells[2] == "0/-" and cells[7] == "1 (1)  16 nodes"


def test_the_bars_three_parts_stay_apart_in_256_and_16_colours() -> None:
    for system in (ColorSystem.EIGHT_BIT, ColorSystem.STANDARD):
        numbers = {Color.parse(c).downgrade(system).number for c in BAR_GLYPHS}
        assert len(numbers) == len(BAR_GLYPHS), system
    assert len(set(BAR_GLYPHS.values())) == len(BAR_GLYPHS)  # not by colour alone


async def test_key_5_shows_each_queue_with_quota_held_borrowed_and_waiting() -> None:
    app = shared_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        tabs = app.query_one(TabbedContent)
        await until(pilot, lambda: app.query_one("#queues-table", DataTable).row_count == 5,
                    "five queues")  # fmt: skip
        assert tabs.active == "queues"
        assert app.focused is app.query_one("#queues-table")
        rows = shown_rows(app)
        assert list(rows) == ["research", "pretrain", "rl", "prod", "infer"]
        assert rows["research"][3].endswith(" 64/48") and rows["research"][4] == "16"
        assert rows["pretrain"][0] == "  pretrain"
        assert rows["pretrain"][3].endswith(" 48/32") and rows["pretrain"][4] == "16"
        assert rows["pretrain"][5] == str(48 * 4) and rows["pretrain"][6] == "3"
        assert rows["rl"][2] == "0/-" and rows["rl"][7] == "1 (1)  16 nodes"
        assert rows["infer"][3].endswith(" 0/16") and rows["infer"][8] == "0.000 x2"
        assert not app.query_one("#queues-none", Static).display


async def test_the_view_follows_new_events_and_enter_shows_a_queues_jobs() -> None:
    events = shared_cluster()
    source = MemorySource(events[:-5])  # before p3 and r2
    app = console(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        await until(pilot, lambda: shown_rows(app).get("pretrain", [""] * 9)[3].endswith("32/32"),
                    "pretrain at its quota")  # fmt: skip
        assert shown_rows(app)["pretrain"][4] == "0"
        source.push(events[-5:])
        await until(pilot, lambda: shown_rows(app)["pretrain"][3].endswith("48/32"),
                    "p3 borrowing")  # fmt: skip
        assert shown_rows(app)["rl"][7] == "1 (1)  16 nodes"
        await pilot.press("down", "down", "enter")  # rl
        await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the queue's jobs")
        assert app.screen.title_ == "queue rl"  # type: ignore[attr-defined]
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, DetailScreen), "closed")
        assert app.query_one(QueuesPane).selected_queue == "rl"


def test_a_queues_jobs_say_why_the_waiting_ones_wait_and_where_they_stand() -> None:
    from rich.console import Console

    from rackplane.projections import evolve, initial_state
    from rackplane.tui._queues import queue_detail

    events = shared_cluster()
    state = initial_state(CLUSTER)
    for e in events:
        state = evolve(state, e)
    out = Console(width=200, record=True)
    out.print(queue_detail(state, "research", events))
    text = out.export_text()
    assert "Running (4)" in text and "Waiting (1), in line order per queue" in text
    assert "r2" in text and "quota: queue rl would hold 32 nodes" in text
    assert "queue rank 1, #1 in line" in text and "held 16/16" in text


async def test_a_cluster_without_queues_says_so_and_how_to_set_them() -> None:
    app = console(MemorySource(story()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        none = app.query_one("#queues-none", Static)
        await until(pilot, lambda: none.display and "no queues" in str(none.render()),
                    "the no-queues line")  # fmt: skip
        said = str(none.render())
        assert said.startswith(" cluster demo-16 has no queues")
        assert "policy: queues: in the cluster file (PolicySettings.queues" in said
        assert app.query_one("#queues-table", DataTable).row_count == 0
        assert not app.query_one("#queues-hint", Static).display


def test_queues_view_snapshot(snap_compare) -> None:  # type: ignore[no-untyped-def]
    app = shared_app()

    async def settled(pilot: Pilot[None]) -> None:
        await pilot.press("5")
        await until(pilot, lambda: shown_rows(app).get("infer") is not None, "the tree")
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(app, run_before=settled, terminal_size=SIZE)
