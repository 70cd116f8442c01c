"""`run(main)`: `asyncio.run(main)` for a command whose coroutine returns a large value.

On Python 3.11 and 3.12 (3.12.1 here), `asyncio.run` formats the repr of its main task twice
when it ends, the task's result included (CPython gh-112559: the check whether its SIGINT
handler is still installed builds a `ValueError` message with it). A read command's result is
a cluster view: on 128 racks its repr is 3-9 MB of text, built twice and thrown away, 0.4-1.3 s
of every `rackplane status` here. The coroutine `asyncio.run` gets here returns None; the
result travels beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion in a new event loop and return its result (as `asyncio.run`).

    Raises:
        Whatever `main` raises.
    """
    result: list[T] = []

    async def quiet() -> None:
        result.append(await main)

    asyncio.run(quiet())
    return result[0]
