"""Pilot tests of every action: the command that would reach the commands topic is asserted."""

from __future__ import annotations

from textual.widgets import DataTable, Input, Static

from rackplane.models import (
    CancelJob,
    CordonNode,
    JobKind,
    PlaceJob,
    PlanDefrag,
    PreemptJobs,
    SubmitJob,
    UncordonNode,
)
from rackplane.tui._cluster_grid import ClusterGrid
from rackplane.tui._dialogs import ConfirmScreen, SubmitScreen
from tests.tui.conftest import ACTOR, SIZE


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


async def test_submit_form_sends_submit_job(make_app) -> None:  # type: ignore[no-untyped-def]
    app, source = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, SubmitScreen)
        app.screen.query_one("#f-job", Input).value = "train-7"
        app.screen.query_one("#f-nodes", Input).value = "32"
        app.screen.query_one("#f-priority", Input).value = "4"
        await pilot.click("#confirm")
        await pilot.pause()
        await app.workers.wait_for_complete()
    [sent] = source.sent
    assert isinstance(sent, SubmitJob)
    assert (sent.actor, sent.cluster, sent.id) == (ACTOR, "demo-16", "t-1")
    assert (sent.job.id, sent.job.nodes, sent.job.priority, sent.job.kind) == (
        "train-7", 32, 4, JobKind.MANAGED)  # fmt: skip
    assert sent.job.owner == ACTOR and sent.job.checkpoint_interval is not None


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
        for key in "cusxdi":
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmScreen | SubmitScreen)
    assert source.sent == []
