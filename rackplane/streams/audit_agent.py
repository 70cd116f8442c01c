"""The audit: every event, command and rejection into the `AuditSink`, never committed
before it is stored, on a consumer of its own.

Theory of operation:
1. One consumer (`AuditLoop`), in a group of its own per history (`audit_group`), reads the
   `events`, `commands` and `rejected` topics in batches; per topic an `AuditAgent` keeps what
   decodes, in order (markers and garbage are skipped: the topic's own agent sends garbage to
   `rejected`, and the audit records that rejection).
2. The agent records its part of the batch, in a write thread of the loop's own (a DuckDB
   write blocks for milliseconds per batch: in the event loop's thread it held back every
   agent of the worker), and when the write fails (a full disk, a lost file) it retries with
   backoff (0.1 s doubling to 5 s) until the batch is stored; only then are the batch's
   offsets committed. (Issue 15: the audit used to run as Faust agents, and
   Faust's `take_events` acknowledges a batch whether the body returned or raised; a full
   disk lost 7,210 events that way without a trace.) The sink leaves itself able to record
   the same batch again (`AuditSink`), so each retry stores it whole or not at all.
3. The retries stop only when the worker stops (or crashes): the batch is then neither stored
   nor committed, and the next worker reads it again. A commit refused because the group
   moved is harmless: what is read again is deduplicated by the sink.
4. Operators see one WARNING line when writes start failing (with the error), at most one a
   minute while they keep failing, one INFO line when they recover (the retries and the
   time it took), one WARNING when the worker stops with a batch unstored. `failing_since`
   and `last_error` tell `/ready` the same.

Why a consumer of its own: in the worker's Faust consumer, a history that could not write
held back every agent reading the same topics once Faust's buffers filled (seen: the
controller stopped ~4,000 events after the disk filled). On its own, it holds back only
itself; the log keeps everything, so the history catches up when the disk frees.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from pydantic import ValidationError

from rackplane._errtext import named
from rackplane.logtrust import Judge, LogTrust
from rackplane.models import COMMANDS, REJECTIONS
from rackplane.streams.audit import AuditSink
from rackplane.streams.codec import decode_event
from rackplane.streams.config import StreamConfig
from rackplane.streams.eventlog import is_marker, opens_a_log
from rackplane.streams.telemetry_loop import RETRIABLE_COMMIT

log = logging.getLogger("rackplane.audit")

BATCH = 500
WITHIN = 0.05
FIRST_BACKOFF = 0.1
MAX_BACKOFF = 5.0
REPORT_EVERY = 60.0
"""Seconds between the WARNING lines of a write that keeps failing."""
STOP_POLL = 0.25
"""Seconds between two looks at whether the worker stops, during a retry's wait."""
PUBLISH_EVERY = 5.0
"""Seconds between two reading copies of the history (`DuckDBAuditSink.publish`), at least;
never more often than ten times the last copy's duration (a large history copies slowly)."""


class AuditAgent:
    """One topic's audit: decode a batch, store it, retrying until it is stored.

    Args:
        name: the agent's name (`audit_events`, ...), in its log lines.
        parse: bytes -> message (raises `ValidationError` or `ValueError` on garbage).
        record: the sink's `record_*` for this topic.
        stopping: True once the worker stops (or crashed): the retries end there.
        sleep: awaited between retries (tests pass a fake).
        clock: monotonic seconds, for the retry report (tests pass a fake).
        wall: seconds since the epoch, for `failing_since`.
        writer: the thread the writes run in (`record` is called there, one call at a time);
            None calls it in the event loop (tests). A history write blocks for milliseconds
            per batch (DuckDB): in the loop's thread it held back the controller, whose valid
            commands waited 4-7 s behind 4,000 hostile records' rejections (issue 15's
            hostile case, CI on 8cb9cb9).
    """

    def __init__(
        self,
        name: str,
        parse: Callable[[bytes], Any],
        record: Callable[[list[Any]], None],
        *,
        stopping: Callable[[], bool] = lambda: False,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        writer: Executor | None = None,
    ) -> None:
        self.name = name
        self._writer = writer
        self.parse = parse
        self.record = record
        self._stopping = stopping
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
        """The worker stopped while a write failed (that batch is not committed)."""

    def decodable(self, batch: Sequence[Any]) -> list[Any]:
        """What decodes in a batch of records (or Faust events), in order (step 1)."""
        return [value for _, value in self.decoded(batch)]

    def decoded(self, batch: Sequence[Any]) -> list[tuple[Any, Any]]:
        """(record, message) for what decodes in a batch, in order."""
        out = []
        for ev in batch:
            message = getattr(ev, "message", ev)
            if is_marker(message.headers) or message.value is None:
                continue
            try:
                out.append((message, self.parse(message.value)))
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
                await self._record(items)
                break
            except Exception as err:  # whatever the sink raises: it stored nothing
                now = self._clock()
                self.last_error = named(err)
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

    async def _record(self, items: list[Any]) -> None:
        if self._writer is None:
            self.record(items)
            return
        # Shielded: a cancelled wait leaves the write running in its thread, and the loop's
        # `stop()` waits for the thread before the sink is closed.
        write = asyncio.get_running_loop().run_in_executor(self._writer, self.record, items)
        await asyncio.shield(write)

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


class AuditLoop:
    """The three audit agents on a consumer of their own (see the module docstring).

    The audit reads `events`, `commands` and `rejected` in its own consumer group
    (`audit_group`), not through the worker's Faust consumer: a history that cannot write (a
    full disk) then holds back only itself, while the controller and the policies go on (the
    log keeps everything, so the history catches up when it can write again). Its group is
    its own per history file, so a worker recording a history reads every partition of the
    three topics, whichever partitions the worker's Faust group gave it: the history of a
    worker of a scaled-out pipeline holds every cluster. Offsets are committed only for what
    is stored; a redelivery is harmless (the sink dedupes by seq, id and digest).
    """

    def __init__(
        self,
        kafka: dict[str, Any],
        group: str,
        agents: dict[str, AuditAgent],
        *,
        session_timeout: float,
        fetch_wait_ms: int,
        max_fetch_bytes: int,
        events_topic: str,
        last_seqs: dict[str, int] | None,
        trust: LogTrust | None = None,
        writer: ThreadPoolExecutor | None = None,
        publish: Callable[[], float] | None = None,
    ) -> None:
        """Args:
        kafka: connection options (`StreamConfig.kafka_options()`).
        group: the consumer group (`audit_group`).
        publish: writes the history's reading copy and returns the seconds it took
            (`DuckDBAuditSink.publish`), run in `writer` after new rows are stored, at most
            every `PUBLISH_EVERY` seconds; None: the sink has none.
        agents: topic name -> the agent that records it.
        events_topic: which of them is the event log (followed as a rebuild would).
        last_seqs: each cluster's last stored seq (None: the sink cannot say).
        trust: the keys an event must be signed by to be recorded (None: any).
        writer: the agents' write thread, if they have one: `stop()` waits for its last
            write, so the sink can be closed after it.
        session_timeout: the group's session, seconds.
        fetch_wait_ms: the consumer's fetch wait.
        max_fetch_bytes: the largest record batch it must read (events can be 4 MiB).
        """
        self.kafka = kafka
        self.group = group
        self.agents = agents
        self.writer = writer
        self.session_timeout = session_timeout
        self.fetch_wait_ms = fetch_wait_ms
        self.max_fetch_bytes = max_fetch_bytes
        self.stopping = False
        self.joined = asyncio.Event()
        self.commit_failures = 0
        self.events_topic = events_topic
        self.log = LogFollower(last_seqs, trust)
        self.publish = publish
        self.published = 0
        """Reading copies written."""
        self._unpublished = True
        self._next_publish = 0.0
        self._publish_warned = -REPORT_EVERY
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run the loop as a task of the current event loop (it stops the worker if it fails)."""
        from rackplane.streams._fatal import guarded

        self._task = asyncio.get_running_loop().create_task(guarded("audit", self._run))

    async def stop(self) -> None:
        """Stop after the batch in hand (what is not stored is not committed)."""
        self.stopping = True
        if self._task is not None:
            # A retry in progress sees `stopping` within STOP_POLL and says what it left.
            await asyncio.wait([self._task], timeout=2 * STOP_POLL)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.writer is not None:  # a write cancelled midway still runs: let it end
            await asyncio.to_thread(self.writer.shutdown, wait=True)

    async def _run(self) -> None:
        consumer = AIOKafkaConsumer(
            *self.agents,
            **self.kafka,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=int(self.session_timeout * 1000),
            heartbeat_interval_ms=1_000,
            fetch_max_wait_ms=max(self.fetch_wait_ms, 50),
            max_partition_fetch_bytes=self.max_fetch_bytes,
            fetch_max_bytes=max(52_428_800, self.max_fetch_bytes),
        )
        await consumer.start()
        self.joined.set()
        try:
            while not self.stopping:
                batch = await consumer.getmany(timeout_ms=200, max_records=BATCH)
                await self._publish_if_due()
                if not batch:
                    continue
                done: dict[TopicPartition, OffsetAndMetadata] = {}
                for topic in self.agents:  # events, then commands, then rejections
                    records = [r for tp, rs in batch.items() if tp.topic == topic for r in rs]
                    if not records:
                        continue
                    agent = self.agents[topic]
                    decoded = agent.decoded(records)
                    if topic == self.events_topic:
                        items = self.log.follow(decoded)
                    else:
                        items = [value for _, value in decoded]
                    if not await agent.store(items):
                        return  # the worker stops with this unstored: nothing committed
                self._unpublished = True
                for tp, records in batch.items():
                    done[tp] = OffsetAndMetadata(records[-1].offset + 1, "")
                try:
                    await consumer.commit(done)
                except RETRIABLE_COMMIT as err:  # the group moved: read again, deduped
                    self.commit_failures += 1
                    log.info("audit commit refused (%s); going on", type(err).__name__)
        finally:
            await consumer.stop()

    async def _publish_if_due(self) -> None:
        """Write the reading copy when rows were stored since the last one and it is time."""
        now = time.monotonic()
        if self.publish is None or not self._unpublished or now < self._next_publish:
            return
        loop = asyncio.get_running_loop()
        try:
            took = await loop.run_in_executor(self.writer, self.publish)
        except Exception as err:  # a full disk: the history itself may still be stored
            self._next_publish = now + PUBLISH_EVERY
            if now - self._publish_warned >= REPORT_EVERY:
                self._publish_warned = now
                log.warning("history reading copy not written: %s", err)
            return
        self._unpublished = False
        self.published += 1
        self._next_publish = time.monotonic() + max(PUBLISH_EVERY, 10 * took)


def audit_group(app_id: str, where: str) -> str:
    """The audit's consumer group: one per history (`where`: the file or directory), so each
    history reads every partition and resumes where it stopped."""
    digest = hashlib.sha256(f"{socket.gethostname()}:{where}".encode()).hexdigest()[:12]
    return f"{app_id}.audit.{digest}"


def audit_loop(
    config: StreamConfig, sink: AuditSink, *, where: str, trust: LogTrust | None = None
) -> AuditLoop:
    """The audit of `sink` for the worker of `config` (see `AuditLoop`)."""
    loop: AuditLoop | None = None

    def stopping() -> bool:
        return loop is not None and loop.stopping

    feeds = (
        ("events", "audit_events", decode_event, sink.record_events),
        ("commands", "audit_commands", COMMANDS.validate_json, sink.record_commands),
        ("rejected", "audit_rejected", REJECTIONS.validate_json, sink.record_rejections),
    )
    writer = ThreadPoolExecutor(1, thread_name_prefix="rackplane-audit")
    agents = {
        config.topic(topic): AuditAgent(name, parse, record, stopping=stopping, writer=writer)
        for topic, name, parse, record in feeds
    }
    loop = AuditLoop(
        config.kafka_options(),
        audit_group(config.app_id, where),
        agents,
        session_timeout=config.session_timeout,
        fetch_wait_ms=config.fetch_wait_ms,
        max_fetch_bytes=config.max_event_bytes + 65_536,
        events_topic=config.topic("events"),
        last_seqs=last() if callable(last := getattr(sink, "last_seqs", None)) else None,
        trust=trust,
        writer=writer,
        publish=getattr(sink, "publish", None),
    )
    return loop


class LogFollower:
    """Which records of the events topic are events of the log, as a rebuild judges them
    (`eventlog._Reading`): keyed by their cluster; of a cluster whose log they continue, or
    the first of a cluster (its registration). Anything else someone wrote to the topic
    (a forged cluster's events, far-ahead seqs) stays out of the history; the projections
    agent sends it to `rejected`. A seq already stored passes (the sink dedupes it). With a
    `LogTrust`, an event not signed by a trusted key stays out too (`forged`)."""

    def __init__(self, last_seqs: dict[str, int] | None, trust: LogTrust | None = None) -> None:
        self.judged = last_seqs is not None
        self.last: dict[str, int] = dict(last_seqs or {})
        self.skipped = 0
        self.judge: Judge[int] = Judge(trust)

    @property
    def forged(self) -> int:
        return self.judge.forged

    def follow(self, decoded: Sequence[tuple[Any, Any]]) -> list[Any]:
        """The events of `decoded` ((record, event) pairs, in topic order) that are the log's."""
        out = []
        for record, event in decoded:
            if record.key != event.cluster.encode():
                self.skipped += 1
                continue
            if (why := self.judge.refuses(record.partition, event)) is not None:
                log.warning(
                    "audit: events[%d]@%d %s %s@%d not recorded, not written by the "
                    "controller: %s",
                    record.partition, record.offset, event.type, event.cluster, event.seq, why,
                )  # fmt: skip
                continue
            last = self.last.get(event.cluster)
            if last is None and not self.judged:
                self.last[event.cluster] = event.seq  # no state to judge by: from here on
                out.append(event)
                continue
            last = last or 0
            if event.seq <= last:
                out.append(event)  # stored already: the sink dedupes it
            elif event.seq == last + 1 and (last > 0 or opens_a_log(event)):
                self.last[event.cluster] = event.seq
                out.append(event)
            else:
                self.skipped += 1
        return out
