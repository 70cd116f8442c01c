"""Pilot tests of every action: the command that would reach the commands topic is asserted."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input, Static

from rackplane.models import (
    CancelJob,
    CordonNode,
    JobKind,
    PlaceJob,
    PlanDefrag,
    PreemptJobs,
    RackHealth,
    ReportRackHealth,
    SubmitJob,
    UncordonNode,
)
from rackplane.tui._actions import outcome
from rackplane.tui._cells import FAILED_MARK, LABEL_SEGMENTS
from rackplane.tui._cluster_grid import ClusterGrid
from rackplane.tui._dialogs import ConfirmScreen, SubmitScreen
from tests.tui.conftest import ACTOR, NOW, SIZE, console


async def _select_job(app, pilot, job: str) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("2")
    await pilot.pause()
    table = app.query_one("#jobs-table", DataTable)
    table.move_cursor(row=table.get_row_index(job))
    await pilot.pause()


async def test_cordon_sends_cordon_node_with_the_reason_and_the_actor(make_app) -> None:  # type: ignore[no-untyped-def]
    app, source = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.query_one(ClusterGrid).select("r003", "r003n07")
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press(*"bad fan", "enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
    assert source.sent == [
        CordonNode(id="t-1", cluster="demo-16", actor=ACTOR, node="r003n07", reason="bad fan")
    ]


async def test_cancelling_the_dialog_sends_nothing(make_app) -> None:  # type: ignore[no-untyped-def]
    app, source = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("c")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        await app.workers.wait_for_complete()
    assert source.sent == []


async def test_uncordon_sends_uncordon_node_for_a_cordoned_node(make_app) -> None:  # type: ignore[no-untyped-def]
    app, source = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        state = app.state
        cordoned = sorted(n for n, ns in state.nodes.items() if ns.cordoned)[0]
        app.query_one(ClusterGrid).select(state.nodes[cordoned].rack, cordoned)
        await pilot.press("u")
        await pilot.pause()
        await pilot.click("#confirm")
        await pilot.pause()
        await app.workers.wait_for_complete()
    assert source.sent == [UncordonNode(id="t-1", cluster="demo-16", actor=ACTOR, node=cordoned)]


async def _submit(make_app, **fields: str) -> list[object]:  # type: ignore[no-untyped-def]
    """Open the submit form (s), fill `fields` (#f-<name>), confirm; what the console sent."""
    app, source = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, SubmitScreen)
        for name, value in fields.items():
            app.screen.query_one(f"#f-{name}", Input).value = value
        await pilot.click("#confirm")
        await pilot.pause()
        await app.workers.wait_for_complete()
    return list(source.sent)


async def test_submit_form_sends_submit_job(make_app) -> None:  # type: ignore[no-untyped-def]
    [sent] = await _submit(make_app, job="train-7", nodes="32", priority="4")
    assert isinstance(sent, SubmitJob)
    assert (sent.actor, sent.cluster, sent.id) == (ACTOR, "demo-16", "t-1")
    assert (sent.job.id, sent.job.nodes, sent.job.priority, sent.job.kind) == (
        "train-7", 32, 4, JobKind.MANAGED)  # fmt: skip
    assert sent.job.owner == ACTOR and sent.job.checkpoint_interval is not None
    assert (sent.job.queue, sent.job.reservation) == (None, None)  # empty fields: none


async def test_submit_form_sends_the_queue_and_the_reservation(make_app) -> None:  # type: ignore[no-untyped-def]
    [sent] = await _submit(make_app, job="hero-1", queue=" pretrain ", reservation="hero")
    assert isinstance(sent, SubmitJob)
    assert (sent.job.id, sent.job.queue, sent.job.reservation) == ("hero-1", "pretrain", "hero")


async def test_an_invalid_form_says_why_and_sends_nothing(make_app) -> None:  # type: ignore[no-untyped-def]
    app, source = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause()
        app.screen.query_one("#f-job", Input).value = "x"
        app.screen.query_one("#f-nodes", Input).value = "0"
        await pilot.click("#confirm")
        await pilot.pause()
        assert isinstance(app.screen, SubmitScreen)
        error = str(app.screen.query_one("#form-error", Static).render())
        assert "nodes" in error and "greater than or equal to 1" in error
        nodes = app.screen.query_one("#f-nodes", Input)
        nodes.value = "many"
        nodes.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert "not a whole number" in str(app.screen.query_one("#form-error", Static).render())
    assert source.sent == []


async def test_cancel_sends_cancel_job_for_the_selected_job(make_app) -> None:  # type: ignore[no-untyped-def]
    app, source = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await _select_job(app, pilot, "mid-01")
        await pilot.press("x")
        await pilot.pause()
        await pilot.press(*"done", "enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
    assert source.sent == [
        CancelJob(id="t-1", cluster="demo-16", actor=ACTOR, job="mid-01", reason="done")
    ]


async def test_defrag_sends_the_plan_preemption_and_placements_as_the_operator(make_app) -> None:  # type: ignore[no-untyped-def]
    app, source = make_app(defrag=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await _select_job(app, pilot, "hero")
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.click("#confirm")
        await pilot.pause()
        await app.workers.wait_for_complete()
    kinds = [type(c) for c in source.sent]
    assert kinds[:3] == [PlanDefrag, PreemptJobs, PlaceJob]
    assert all(c.actor == ACTOR and c.cluster == "demo-16" for c in source.sent)
    plan, preempt = source.sent[0], source.sent[1]
    assert isinstance(plan, PlanDefrag) and isinstance(preempt, PreemptJobs)
    assert plan.job == "hero" and preempt.jobs == plan.victims and preempt.cause == "defrag"
    assert not preempt.allow_interactive
    assert [c.id for c in source.sent] == [f"t-{i}" for i in range(1, len(source.sent) + 1)]


async def test_allowing_interactive_preemption_holds_for_one_defrag(make_app) -> None:  # type: ignore[no-untyped-def]
    app, source = make_app(defrag=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("i")
        await pilot.pause()
        await pilot.click("#confirm")
        await pilot.pause()
        assert app.interactive_once
        await _select_job(app, pilot, "hero")
        await pilot.press("d")
        await pilot.pause()
        await pilot.click("#confirm")
        await pilot.pause()
        await app.workers.wait_for_complete()
        assert not app.interactive_once
    assert isinstance(source.sent[0], PlanDefrag)


async def test_no_action_is_sent_from_the_past_or_from_a_history(make_app) -> None:  # type: ignore[no-untyped-def]
    app, source = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.travel(20)
        await pilot.press("c")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
    assert source.sent == []
    app, source = make_app(live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        for key in "cufsxdi":
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmScreen | SubmitScreen)
    assert source.sent == []


async def test_rack_fault_sends_report_rack_health_for_the_selected_rack(make_app) -> None:  # type: ignore[no-untyped-def]
    app, source = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.query_one(ClusterGrid).select("r005", "r005n03")
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.title_ == "Report rack r005 failed?"
        assert "mid-01" in app.screen.body  # the jobs it takes down are named
        await pilot.press(*"NVSwitch tray 2", "enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
    assert source.sent == [
        ReportRackHealth(
            id="t-1",
            cluster="demo-16",
            actor=ACTOR,
            rack="r005",
            health=RackHealth.FAILED,
            cause="NVSwitch tray 2",
        )
    ]


async def _until(pilot, holds, what: str) -> None:  # type: ignore[no-untyped-def]
    """Wait for the screen to show what `holds` checks (up to 10 s: views flush at 4 Hz)."""
    for _ in range(100):
        if holds():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"not shown within 10 s: {what}")


def _cell(grid: ClusterGrid, node: str) -> str:
    """The glyphs of a node's cell as the grid renders its rack."""
    rack = grid.state.nodes[node].rack  # type: ignore[union-attr]
    row = grid.rows[rack]
    return row.segments[LABEL_SEGMENTS + row.nodes.index(node)].text


async def test_in_the_demo_a_cordon_and_a_rack_fault_really_happen_and_show() -> None:
    from rackplane.tui.sample import demo_source

    app = console(demo_source(16, clock=lambda: NOW))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.query_one(ClusterGrid)
        assert "DEMO" in str(app.query_one("#status", Static).render())
        assert "LIVE" not in str(app.query_one("#status", Static).render())
        node = "r003n07"
        assert not grid.state.nodes[node].cordoned  # type: ignore[union-attr]
        grid.select("r003", node)
        await pilot.press("c")
        await pilot.pause()
        await pilot.press(*"fan", "enter")
        await _until(pilot, lambda: _cell(grid, node) == "c ", f"{node} cordoned")
        assert grid.state.nodes[node].cordoned  # type: ignore[union-attr]
        assert "applied CordonNode: NodeCordoned" in [n.message for n in app._notifications]

        grid.select("r005")
        await pilot.press("f")
        await pilot.pause()
        await pilot.press(*"NVSwitch tray 2", "enter")
        await _until(pilot, lambda: grid.rows["r005"].segments[1].text == FAILED_MARK,
                     "r005 marked failed")  # fmt: skip
        r005 = grid.state.racks["r005"]  # type: ignore[union-attr]
        assert not r005.healthy and r005.cause == "NVSwitch tray 2"
        said = [n.message for n in app._notifications][-1]
        assert said.startswith("applied ReportRackHealth: RackFailed")
        assert all(grid.state.nodes[n].job is None for n in grid.rows["r005"].nodes)  # type: ignore[union-attr]

        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.title_ == "Report rack r005 recovered?"
        await pilot.press("enter")
        await _until(pilot, lambda: grid.rows["r005"].segments[1].text == " ", "r005 recovered")
        assert grid.state.racks["r005"].healthy  # type: ignore[union-attr]
    assert [type(c) for c in app.sent] == [CordonNode, ReportRackHealth, ReportRackHealth]


async def test_an_applied_command_says_what_it_did_or_why_it_was_refused() -> None:
    from rackplane.tui.sample import demo_source

    source = demo_source(8, clock=lambda: NOW)
    cordon = CordonNode(id="t-9", cluster="demo-8", actor=ACTOR, node="r000n00")
    assert outcome(cordon, None) == ("sent CordonNode t-9", "information")
    assert outcome(cordon, await source.send(cordon)) == (
        "applied CordonNode: NodeCordoned", "information")  # fmt: skip
    assert outcome(cordon, await source.send(cordon)) == (
        "CordonNode t-9 was already applied", "warning")  # fmt: skip
    again = cordon.model_copy(update={"id": "t-10"})
    text, severity = outcome(again, await source.send(again))
    assert (text, severity) == ("CordonNode: nothing to do (node r000n00 is already cordoned)",
                                "warning")  # fmt: skip
    cancel = CancelJob(id="t-11", cluster="demo-8", actor=ACTOR, job="no-such-job")
    text, severity = outcome(cancel, await source.send(cancel))
    assert severity == "error" and text.startswith("CancelJob rejected (unknown_job): ")


def test_the_demo_flag_opens_the_console_on_the_in_process_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from rackplane.cli import app as cli
    from rackplane.tui import ConsoleApp, EngineSource

    opened = []
    monkeypatch.setattr(ConsoleApp, "run", lambda self: opened.append(self.source))
    result = CliRunner().invoke(cli, ["tui", "--demo", "8"])
    assert result.exit_code == 0, result.output
    [source] = opened
    assert isinstance(source, EngineSource) and source.mode == "DEMO"
    assert source.engine.state.seq == len(source.events) > 0
