"""A loop that cannot go on stops the worker at once, non-zero, and says why in one line."""

from __future__ import annotations

import json

import pytest

from rackplane.streams import _fatal
from rackplane.streams._fatal import EXIT_FAILED, EXIT_UNAVAILABLE, Unavailable, guarded


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    codes: list[int] = []
    monkeypatch.setattr(_fatal, "stop_process", codes.append)
    return codes


async def test_a_loop_that_raises_stops_the_worker_before_anything_else_runs(
    exits: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    after: list[str] = []

    async def body() -> None:
        raise RuntimeError("disk on fire")

    await guarded("audit", body)
    after.append("went on")  # only because the test replaced the exit
    assert exits == [EXIT_FAILED]
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line == {
        "event": "worker.failed",
        "loop": "audit",
        "error": "RuntimeError: disk on fire",
        "exit": EXIT_FAILED,
    }


async def test_a_dependency_down_past_its_limit_exits_with_unavailable(exits: list[int]) -> None:
    async def body() -> None:
        raise Unavailable("the broker refused appends for 301 s")

    await guarded("controller", body)
    assert exits == [EXIT_UNAVAILABLE]


async def test_cancellation_is_a_stop_not_a_failure(exits: list[int]) -> None:
    import asyncio

    async def body() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await guarded("telemetry", body)
    assert exits == []
