"""Fail-stop: a loop that cannot go on stops the whole worker, non-zero, at once.

Faust restarts a crashed agent and acknowledges the batch it was working on (its
`take_events` acks in a `finally`), so an agent that raised would lose that batch; a task
that dies (the telemetry loop) would leave a worker that answers but no longer works. So every
loop of the worker runs under `guarded`: an exception it cannot handle is logged as one
structured line and the process exits at once (`os._exit`: no batch acknowledged, no
offset committed after the failure, nothing flushed), for a supervisor (Kubernetes,
`rackplane up`, the tests) to restart it; the restarted worker rebuilds from the log, and
redeliveries are recognised by command position and id.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from rackplane._errtext import named

log = logging.getLogger("rackplane.worker")

EXIT_FAILED = 70
"""A loop failed in a way it cannot recover from (EX_SOFTWARE)."""
EXIT_UNAVAILABLE = 69
"""The broker (or the disk) stayed unavailable past the configured limit (EX_UNAVAILABLE)."""

T = TypeVar("T")


class Unavailable(RuntimeError):
    """A dependency stayed down longer than the worker waits for it."""


def _exit_now(code: int) -> None:  # pragma: no cover - the process ends here
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)


stop_process: Callable[[int], None] = _exit_now
"""How the worker stops (tests that run agents in their own process replace it)."""


def die(loop: str, err: BaseException) -> None:
    """Say why in one line, then stop the process at once."""
    code = EXIT_UNAVAILABLE if isinstance(err, Unavailable) else EXIT_FAILED
    line = {
        "event": "worker.failed",
        "loop": loop,
        "error": named(err),
        "exit": code,
    }
    log.critical("loop %s failed: %s: %s", loop, type(err).__name__, err, exc_info=err)
    print(json.dumps(line), file=sys.stderr, flush=True)
    stop_process(code)


async def guarded(loop: str, body: Callable[[], Awaitable[T]]) -> T | None:
    """Run `body`; an exception other than cancellation stops the worker (see above)."""
    try:
        return await body()
    except asyncio.CancelledError:
        raise
    except BaseException as err:  # every failure stops the worker
        die(loop, err)
        return None


class GuardedTask(abc.ABC):
    """A loop of the worker run as one task under `guarded` (its failure stops the worker),
    from `start` until `stop` cancels it. Subclasses name it and give `_run`."""

    loop_name = "loop"
    _task: asyncio.Task[None] | None = None

    @abc.abstractmethod
    async def _run(self) -> None:
        """The loop itself."""

    def start(self) -> None:
        """Run the loop as a task of the current event loop."""
        self._task = asyncio.get_running_loop().create_task(guarded(self.loop_name, self._run))

    async def stop(self) -> None:
        """Cancel the loop and wait until it ended."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def guard_agent(loop: str, agent: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Any]:
    """A Faust agent body that stops the worker instead of raising (see above)."""

    async def run(stream: Any) -> None:
        await guarded(loop, lambda: agent(stream))

    run.__name__ = getattr(agent, "__name__", loop)
    return run
