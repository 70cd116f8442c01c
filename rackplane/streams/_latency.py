"""Command->event latency, measured around the controller's appends.

The controller's agent tells `TimedAppender` when each command record of a batch was written
(its record timestamp) before the batch is decided; the appender, once a partition's decisions
are durable, finds each decision's command by the position its first event carries
(`command_partition`/`command_offset`, stamped by the controller) and observes the time since
that command was written. A command is observed once: a retried append after an outage counts
the whole wait, redeliveries and rejected input (no event) count nothing, and commands the
controller read back itself (the consumer skipped them) carry no delivered timestamp and are
not observed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from rackplane.streams._append import Decision
from rackplane.streams.agents import Appender

_COMMAND_OFFSET = re.compile(rb',"command_offset":(\d+)')
"""The envelope's field, the first at any depth of an event's JSON (envelope fields come
first, and a quote inside a JSON string is always escaped, so no string can match)."""


class TimedAppender:
    """An `Appender` that observes each decided command's latency (see the module
    docstring)."""

    def __init__(
        self,
        inner: Appender,
        observe: Callable[[float], object],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.inner = inner
        self.observe = observe
        self.clock = clock
        self.written: dict[tuple[int, int], float] = {}
        """(partition, offset) -> when the command record was written (Unix seconds)."""

    def arrived(self, batch: Sequence[Any]) -> None:
        """The consumer delivered `batch`: note when each record was written."""
        for item in batch:
            message = getattr(item, "message", item)
            at = getattr(message, "timestamp", None)
            if isinstance(at, int | float) and at > 0:
                self.written[(message.partition, message.offset)] = float(at)

    def decided(self, batch: Sequence[Any]) -> None:
        """`batch` is decided: forget its records (those that caused no event too)."""
        for item in batch:
            message = getattr(item, "message", item)
            self.written.pop((message.partition, message.offset), None)

    def expect(self, partition: int, offset: int) -> None:
        self.inner.expect(partition, offset)

    async def append(
        self, partition: int, decisions: Sequence[Decision], check: Callable[[], None]
    ) -> list[int]:
        ends = await self.inner.append(partition, decisions, check)
        now = self.clock()
        for records in decisions:
            found = _COMMAND_OFFSET.search(records[0][1]) if records else None
            at = self.written.pop((partition, int(found.group(1))), None) if found else None
            if at is not None:
                self.observe(max(0.0, now - at))
        return ends
