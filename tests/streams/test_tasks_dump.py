"""`kill -USR1` on a worker writes where each task waits, through Faust-like wrappers."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest

from rackplane.streams import _tasks_dump


async def _innermost(gate: asyncio.Event) -> None:
    await gate.wait()


async def _agent_body(gate: asyncio.Event) -> None:
    await _innermost(gate)


class Actor:
    """What Faust's agent actor looks like to the dump: an awaitable holding a coroutine."""

    def __init__(self, it: Any) -> None:
        self.it = it

    def __await__(self) -> Any:
        return self.it.__await__()


async def _execute(actor: Actor) -> None:
    await actor


async def test_the_dump_follows_a_task_through_an_actor_to_its_innermost_frame(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gate = asyncio.Event()
    task = asyncio.create_task(_execute(Actor(_agent_body(gate))), name="controller-agent")
    await asyncio.sleep(0)
    text = _tasks_dump.dump(asyncio.get_running_loop())
    block = text.split("task controller-agent\n", 1)[1].split("task ", 1)[0]
    frames = [line.strip().rsplit(" in ", 1)[-1] for line in block.splitlines()]
    assert frames[:3] == ["_execute", "_agent_body", "_innermost"]
    assert "locks.py" in block  # down to the Event it waits on
    assert text == capsys.readouterr().err
    gate.set()
    await task


async def test_sigusr1_writes_the_dump_and_the_loop_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    loop = asyncio.get_running_loop()
    _tasks_dump.install(loop)
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.sleep(0.05)
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
    err = capsys.readouterr().err
    assert "asyncio tasks (SIGUSR1)" in err
    assert "test_sigusr1_writes_the_dump_and_the_loop_goes_on" in err


async def test_the_dump_goes_into_the_async_generator_a_loop_waits_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gate = asyncio.Event()

    async def take_events() -> Any:
        await _innermost(gate)
        yield 1

    async def body() -> None:
        async for _ in take_events():
            pass

    task = asyncio.create_task(body(), name="agent")
    await asyncio.sleep(0)
    text = _tasks_dump.dump(asyncio.get_running_loop())
    block = text.split("task agent\n", 1)[1].split("task ", 1)[0]
    assert [line.strip().rsplit(" in ", 1)[-1] for line in block.splitlines()][:3] == [
        "body", "take_events", "_innermost"
    ]  # fmt: skip
    capsys.readouterr()
    gate.set()
    await task


async def test_the_dump_shows_the_other_threads_too(capsys: pytest.CaptureFixture[str]) -> None:
    import threading

    gate = threading.Event()
    worker = threading.Thread(target=gate.wait, name="consumer-thread", daemon=True)
    worker.start()
    try:
        text = _tasks_dump.dump(asyncio.get_running_loop())
    finally:
        gate.set()
        worker.join()
    block = text.split("thread consumer-thread\n", 1)[1]
    assert "threading.py" in block.split("thread ", 1)[0]  # waiting in Event.wait
    capsys.readouterr()
