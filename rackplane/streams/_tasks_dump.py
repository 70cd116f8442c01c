"""`kill -USR1 <worker pid>`: the worker writes where each of its asyncio tasks waits.

A worker that answers /health but decides nothing waits on something (a broker that does not
answer, a read that does not end, a lock): the await chain of each task says what, and the
stack of every other thread (Faust's consumer thread runs its own event loop) follows. The dump
goes to stderr (the worker's log), one block per task, innermost frame last, and the worker
goes on. (mode's own SIGUSR1 answer stops at Faust's agent wrappers, so it says nothing about
what an agent waits on; this one follows them.)
"""

from __future__ import annotations

import asyncio
import gc
import io
import signal
import sys
import threading
import traceback
from typing import Any

DEPTH = 40
"""Frames followed per task, at most."""
_WRAPPERS = {"coroutine_wrapper", "async_generator_asend", "async_generator_athrow"}
"""What `await coro.__await__()` and `await agen.__anext__()` wait on: no attribute leads to
the coroutine or generator inside, the garbage collector's referents do."""


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Dump the tasks of `loop` to stderr on SIGUSR1 (where the platform has it)."""
    if hasattr(signal, "SIGUSR1"):
        loop.add_signal_handler(signal.SIGUSR1, dump, loop)


def dump(loop: asyncio.AbstractEventLoop) -> str:
    """Write (and return) the await chain of every task of `loop`."""
    out = io.StringIO()
    tasks = sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name())
    out.write(f"--- {len(tasks)} asyncio tasks (SIGUSR1) ---\n")
    for task in tasks:
        out.write(f"task {task.get_name()}\n")
        for line in chain(task.get_coro()):
            out.write(f"    {line}\n")
    here = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident == here:
            continue  # the event loop's thread: its tasks are above
        out.write(f"thread {names.get(ident, ident)}\n")  # Faust's consumer thread, among others
        for entry in traceback.extract_stack(frame, limit=DEPTH)[-12:]:
            out.write(f"    {entry.filename}:{entry.lineno} in {entry.name}\n")
    out.write("--- end of tasks ---\n")
    text = out.getvalue()
    sys.stderr.write(text)
    sys.stderr.flush()
    return text


def chain(awaitable: Any) -> list[str]:
    """Where `awaitable` stands: one line per frame of its await chain, outermost first."""
    lines: list[str] = []
    seen: set[int] = set()
    current = awaitable
    while current is not None and len(lines) < DEPTH and id(current) not in seen:
        seen.add(id(current))
        frame = _frame(current)
        if frame is not None:
            code = frame.f_code
            lines.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        elif not _is_plain_wrapper(current):
            lines.append(repr(current)[:200])
        current = _inner(current)
    return lines


def _first(obj: Any, names: tuple[str, ...]) -> Any:
    """The first of these attributes of `obj` that is set (None: none is)."""
    for name in names:
        got = getattr(obj, name, None)
        if got is not None:
            return got
    return None


def _frame(obj: Any) -> Any:
    return _first(obj, ("cr_frame", "ag_frame", "gi_frame"))


def _inner(obj: Any) -> Any:
    inner = _first(obj, ("cr_await", "ag_await", "gi_yieldfrom"))
    if inner is not None:
        return inner
    if isinstance(obj, asyncio.Task):
        return obj.get_coro()
    if _is_plain_wrapper(obj):  # Faust's actors, `async for` over a generator
        return next((r for r in gc.get_referents(obj) if _frame(r) is not None), None)
    it = getattr(obj, "it", None)  # Faust's actor wrapping an agent's coroutine
    if it is not None and (_frame(it) is not None or hasattr(it, "ag_await")):
        return it
    return None


def _is_plain_wrapper(obj: Any) -> bool:
    return type(obj).__name__ in _WRAPPERS
