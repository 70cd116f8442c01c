"""The audit agents: every event, command and rejection into the `AuditSink`, never
acknowledged before it is stored.

Theory of operation:
1. One agent per topic (events, commands, rejected) reads batches (`take_events`) and keeps
   what decodes, in order; markers and garbage are skipped (the topic's own agent sends
   garbage to `rejected`, and the audit records that rejection).
2. It records the batch, and when the write fails (a full disk, a lost file) it retries with
   backoff (0.1 s doubling to 5 s) until the batch is stored. The body never returns nor
   raises before: Faust's `take_events` acknowledges a batch as soon as the body gives the
   batch back, whether it returned or raised (an `await self.ack(...)` in a `finally:`),
   and an agent restarted after a crash goes on past that batch: that is how a full disk
   once lost 7,210 events without a trace (issue 15). The sink leaves itself able to record
   the same batch again (`AuditSink`), so each retry stores it whole or not at all.
3. The retries stop only when the worker stops (or crashes). The batch is not stored then,
   and Faust must neither commit its offsets nor wait for it (a stopping Faust app waits
   for every message it handed out to be acknowledged): the agent marks the batch's
   messages done without acknowledging them to the consumer (`leave_unacked`), and, for
   good, every batch after it, since Faust commits past a single unacknowledged message
   when the next ones are acknowledged. The next worker reads them all again. A cancelled
   agent (the worker stopping) leaves its batch the same way.
4. Operators see one WARNING line when writes start failing (with the error), at most one a
   minute while they keep failing, one INFO line when they recover (the retries and the
   time it took), one WARNING when the worker stops with a batch unstored. `failing_since`
   and `last_error` tell a health check the same.

A consequence to know: while an audit agent waits, so does every agent of the worker that
reads the same topic, once Faust's buffers between them are full (a few thousand messages),
and the group's committed offsets stay at the batch: the history is never behind without
the log knowing it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import faust
from pydantic import ValidationError

from rackplane.models import COMMANDS, REJECTIONS
from rackplane.streams.audit import AuditSink
from rackplane.streams.codec import decode_event
from rackplane.streams.eventlog import is_marker

log = logging.getLogger("rackplane.audit")

BATCH = 500
WITHIN = 0.05
FIRST_BACKOFF = 0.1
MAX_BACKOFF = 5.0
REPORT_EVERY = 60.0
"""Seconds between the WARNING lines of a write that keeps failing."""
STOP_POLL = 0.25
"""Seconds between two looks at whether the worker stops, during a retry's wait."""


class AuditAgent:
    """One topic's audit agent (`add_audit`); call it with a Faust stream to run it.

    Args:
        name: the agent's name (`audit_events`, ...), in its log lines.
        parse: bytes -> message (raises `ValidationError` or `ValueError` on garbage).
        record: the sink's `record_*` for this topic.
        stopping: True once the worker stops (or crashed): the retries end there.
        release: called when the agent gives up on a batch (`release_queued`).
        sleep: awaited between retries (tests pass a fake).
        clock: monotonic seconds, for the retry report (tests pass a fake).
        wall: seconds since the epoch, for `failing_since`.
    """

    def __init__(
        self,
        name: str,
        parse: Callable[[bytes], Any],
        record: Callable[[list[Any]], None],
        *,
        stopping: Callable[[], bool] = lambda: False,
        release: Callable[[], None] = lambda: None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.parse = parse
        self.record = record
        self._stopping = stopping
        self._release = release
        self._sleep = sleep
        self._clock = clock
        self._wall = wall
        self.failing_since: float | None = None
        """When (seconds since the epoch) the write now failing first failed; None: healthy."""
        self.last_error: str | None = None
        """The last failure's message, kept after a recovery."""
        self.retries = 0
        """Failed attempts of the write now failing (0 when healthy)."""
        self.stored = 0
        """Messages handed to the sink and stored, since the start."""
        self.gave_up = False
        """The worker stopped while a write failed: from then on nothing is acknowledged."""

    async def __call__(self, stream: Any) -> None:
        async for batch in stream.take_events(BATCH, within=WITHIN):
            try:
                stored = not self.gave_up and await self.store(self.decodable(batch))
            except BaseException:  # cancelled: the worker stops
                leave_unacked(batch)
                raise
            if not stored:
                leave_unacked(batch)

    def decodable(self, batch: Sequence[Any]) -> list[Any]:
        """What decodes in a batch of Faust events, in order (step 1)."""
        out = []
        for ev in batch:
            message = ev.message
            if is_marker(message.headers) or message.value is None:
                continue
            try:
                out.append(self.parse(message.value))
            except (ValidationError, ValueError):
                continue
        return out

    async def store(self, items: list[Any]) -> bool:
        """Record `items`, retrying until it succeeds (step 2).

        Returns:
            True once stored; False when the worker stops first (nothing stored; `gave_up`).
        """
        if not items:
            return True
        delay = FIRST_BACKOFF
        started = last_report = self._clock()
        while True:
            try:
                self.record(items)
                break
            except Exception as err:  # whatever the sink raises: it stored nothing
                now = self._clock()
                self.last_error = f"{type(err).__name__}: {err}"
                self.retries += 1
                if self.failing_since is None:
                    self.failing_since = self._wall()
                    started = last_report = now
                    self._log(logging.WARNING, "audit.write_failed", batch=len(items))
                elif now - last_report >= REPORT_EVERY:
                    last_report = now
                    self._log(
                        logging.WARNING, "audit.still_failing", batch=len(items),
                        retries=self.retries, seconds=round(now - started, 1),
                    )  # fmt: skip
            if not await self._pause(delay):
                self.gave_up = True
                self._release()
                self._log(
                    logging.WARNING, "audit.stopped_unstored", batch=len(items),
                    retries=self.retries, seconds=round(self._clock() - started, 1),
                )  # fmt: skip
                return False
            delay = min(delay * 2, MAX_BACKOFF)
        self.stored += len(items)
        if self.failing_since is not None:
            self._log(
                logging.INFO, "audit.recovered", batch=len(items),
                retries=self.retries, seconds=round(self._clock() - started, 1),
            )  # fmt: skip
            self.failing_since = None
            self.retries = 0
        return True

    async def _pause(self, seconds: float) -> bool:
        """Wait `seconds` before the next attempt; False as soon as the worker stops."""
        left = seconds
        while left > 0:
            if self._stopping():
                return False
            step = min(left, STOP_POLL)
            await self._sleep(step)
            left -= step
        return not self._stopping()

    def health(self) -> dict[str, Any]:
        """The agent's state for a health endpoint."""
        return {
            "agent": self.name,
            "ok": self.failing_since is None,
            "failing_since": self.failing_since,
            "retries": self.retries,
            "last_error": self.last_error,
            "stored": self.stored,
        }

    def _log(self, level: int, event: str, **fields: Any) -> None:
        line = {"event": event, "agent": self.name, **fields}
        if event != "audit.recovered":
            line["error"] = self.last_error
        if event == "audit.stopped_unstored":
            line["note"] = "not acknowledged: the next worker reads it again"
        log.log(level, json.dumps(line))


def leave_unacked(batch: Sequence[Any]) -> None:
    """Mark each message of `batch` done for Faust without acknowledging it to the consumer
    (step 3): streams no longer wait for it and their own acks become no-ops, and its offset
    never joins the consumer's acknowledged offsets, so no commit passes it."""
    for ev in batch:
        ev.message.acked = True


def add_audit(
    app: faust.App,
    sink: AuditSink,
    *,
    commands: faust.TopicT,
    events: faust.TopicT,
    rejected: faust.TopicT,
) -> list[AuditAgent]:
    """Add the three audit agents of `sink` to `app`; return them (for a health check)."""

    def stopping() -> bool:
        return bool(app.should_stop)

    agents = []
    feeds = (
        ("audit_events", events, decode_event, sink.record_events),
        ("audit_commands", commands, COMMANDS.validate_json, sink.record_commands),
        ("audit_rejected", rejected, REJECTIONS.validate_json, sink.record_rejections),
    )
    for name, topic, parse, record in feeds:
        agent = AuditAgent(
            name, parse, record, stopping=stopping,
            release=functools.partial(release_queued, app, topic.get_topic_name()),
        )  # fmt: skip
        app.agent(topic, name=name)(_body(agent))
        agents.append(agent)
    return agents


def release_queued(app: faust.App, topic: str) -> None:
    """Leave unacknowledged every message of `topic` that the app still waits for (step 3).

    A stopping Faust app waits until each message it handed to a stream is acknowledged
    (`stream_wait_empty`), and the messages queued behind a batch the audit could not store
    never reach it: Faust has already dropped its queues. They are marked done here, without
    acknowledging them, so the worker stops and no commit passes them. (Faust keeps them in
    `Consumer._unacked_messages`, a private set: without it the worker waits to be killed,
    which loses nothing either.)
    """
    pending = getattr(getattr(app, "consumer", None), "_unacked_messages", None)
    for message in list(pending or ()):
        if message.topic == topic:
            message.acked = True


def _body(agent: AuditAgent) -> Callable[[Any], Awaitable[None]]:
    # Faust wants a function of its own per agent (it reads the name, qualname and signature).
    async def audit(stream: Any) -> None:
        await agent(stream)

    audit.__name__ = audit.__qualname__ = agent.name
    return audit
