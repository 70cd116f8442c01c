"""The Faust app: topics, agents, tables and web views of one rackplane worker.

`create_app(config)` builds everything from a `StreamConfig` (no module-level app, so tests
and benchmarks build as many isolated apps as they need); `run_worker(config)` runs one.

| agent | reads | writes |
|---|---|---|
| controller | commands | events (the only writer), rejected |
| spare_swap, tas, reclaim, defrag, time_limits, reservations | events | commands |
| gpu_manager | telemetry (a plain consumer loop), events | commands, rejected |
| projections | events | tables `occupancy`, `jobs`; rejected |
| audit (when configured) | events, commands, rejected | the audit sink |
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import faust
from faust.types import TP

from rackplane.keyfiles import KeyFile, KeyFileError, load_key
from rackplane.logtrust import LogTrust, LogTrustError
from rackplane.models import Command
from rackplane.policies import (
    Defrag,
    Reclaim,
    Reservations,
    SpareSwap,
    TimeLimits,
    TopologyAwareScheduler,
)
from rackplane.policies.base import Policy
from rackplane.policies.gpu_health import GpuHealthRules
from rackplane.policies.health import HealthClassifier
from rackplane.projections import ClusterState, initial_state, state_digest
from rackplane.streams import _faust_fixes, _heap, _quiet, _tasks_dump
from rackplane.streams._append import (
    BATCH_OVERHEAD,
    EventAppender,
    Fence,
    TransactionalAppender,
)
from rackplane.streams._deliveries import CatchUp, Holes, RecordReader
from rackplane.streams._fatal import guarded
from rackplane.streams._following import Follower, FollowerCatchUp
from rackplane.streams._latency import TimedAppender
from rackplane.streams._views import Answer, ClusterViews, LogReads, Unread
from rackplane.streams.agents import Controller, GpuManager, PolicyRunner, Ticker
from rackplane.streams.audit import AuditSink, JsonlAuditSink
from rackplane.streams.audit_agent import AuditAgent, audit_loop
from rackplane.streams.config import StreamConfig
from rackplane.streams.eventlog import STALL_S, EventLog
from rackplane.streams.live import LiveLog
from rackplane.streams.projection_agent import Metrics, Projections, jobs_of, racks_of
from rackplane.streams.replicas import Replicas, StoreCheckpoints
from rackplane.streams.senders import FastSender, SharedProducer, sender_for
from rackplane.streams.snapshots import SnapshotStore
from rackplane.streams.telemetry_loop import TelemetryLoop
from rackplane.streams.topics import ensure_topics

log = logging.getLogger("rackplane.worker")

POLICIES: dict[str, Callable[[], Policy]] = {
    "spare_swap": SpareSwap,
    "tas": TopologyAwareScheduler,
    "reclaim": Reclaim,
    "defrag": Defrag,
    "time_limits": TimeLimits,
    "reservations": Reservations,
}
BATCH = 500
# Seconds a batch waits to fill. The controller answers fast; policies and projections take a
# wider window so one cycle covers many events (their work per batch is O(racks) or more, and
# every agent of a worker shares one event loop with the controller).
WITHIN = 0.002
POLICY_WITHIN = 0.05
PROJECTION_WITHIN = 0.25
# The telemetry loop's fetch wait floor, ms. A verdict 100 ms later does not matter at a sample
# per node every few seconds, and each idle fetch costs the worker and the broker CPU (an idle
# worker on Tansu: ~22% of a core for itself and ~18% for Tansu with every consumer at 5 ms).
TELEMETRY_FETCH_WAIT_MS = 100
# Seconds a view's read of the log may stand still (a held-elsewhere cluster, a rebalance):
# a dashboard waits this long at most before the view answers 503.
VIEW_READ_TIMEOUT_S = 5.0


def create_app(
    config: StreamConfig,
    *,
    classifier: HealthClassifier | None = None,
    audit: AuditSink | None = None,
) -> faust.App:
    """Build the app with every agent `config` asks for."""
    exactly_once = config.exactly_once
    app = faust.App(
        config.app_id,
        broker=config.faust_broker,
        store="memory://",
        topic_partitions=config.partitions,
        topic_replication_factor=config.replication,
        broker_session_timeout=config.session_timeout,
        broker_heartbeat_interval=1.0,
        consumer_auto_offset_reset="earliest",
        processing_guarantee="exactly_once" if exactly_once else "at_least_once",
        web_port=config.web_port,
        web_bind=config.web_bind,
        # Faust's own pages (/router/, /table/..., /graph/, /stats/) show partitions, tables
        # and internals to anyone who can reach the port: off.
        web_router_enabled=False,
        web_tables_enabled=False,
        web_graph_enabled=False,
        web_stats_enabled=False,
        web_metrics_enabled=False,
        datadir=config.datadir,
        producer_max_request_size=max(config.max_event_bytes, config.max_message_bytes * 2),
        consumer_max_fetch_size=max(config.max_event_bytes, config.max_message_bytes * 4),
        broker_credentials=config.security.faust_credentials(),
    )
    _faust_fixes.use_fetch_wait(app, config.fetch_wait_ms)

    def topic(name: str) -> faust.TopicT:
        return app.topic(
            config.topic(name),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=config.partitions,
        )

    telemetry, commands, events, rejected = (
        topic(n) for n in ("telemetry", "commands", "events", "rejected")
    )
    health = Health()
    private = _token_check(config.web_token)
    key = _worker_key(config)
    trust = _log_trust(config, key)
    sign: Callable[[Command], Command] = key.sign if key is not None else (lambda c: c)
    if key is not None:
        log.info("signing commands, events and checkpoints with the worker's key %s", key.id)
    logs: list[EventLog] = []
    replicas: list[Replicas] = []
    initial = _initial(config)
    store = SnapshotStore(
        config.kafka_options(),
        config.topic("snapshots"),
        max_message_bytes=config.max_event_bytes,
        fetch_wait_ms=config.fetch_wait_ms,
        sign=key.signature if key is not None else None,
        trust=trust,
    )
    checkpoints = StoreCheckpoints(store)

    def replica() -> Replicas:
        eventlog = EventLog(
            config.kafka_options(),
            config.topic("events"),
            read_committed=exactly_once,
            fetch_wait_ms=config.fetch_wait_ms,
            initial=initial,
            trust=trust,
        )
        logs.append(eventlog)
        r = Replicas(
            eventlog,
            partitions=config.partitions,
            checkpoints=checkpoints,
            after_rebuild=_heap.settle,
        )
        replicas.append(r)
        return r

    limit = config.max_message_bytes
    # Two producers: events go in record batches up to max_event_bytes (the events topic takes
    # them); commands and rejections in the producer's usual small batches, which the other
    # topics' limits take.
    shared = SharedProducer(
        config.kafka_options(), max_request_size=limit * 2, idempotent=config.idempotent
    )
    appends = SharedProducer(
        config.kafka_options(),
        max_request_size=config.max_event_bytes,
        max_batch_size=config.max_event_bytes,
        idempotent=config.idempotent,
    )
    metrics = Metrics()
    commands_out = sender_for(commands, shared, exactly_once=exactly_once)
    rejected_out = metrics.rejections(sender_for(rejected, shared, exactly_once=exactly_once))
    fence = Fence(stall_after=config.session_timeout / 2)
    controller_replicas = replica()
    appender = TimedAppender(
        TransactionalAppender(events)
        if exactly_once
        else EventAppender(
            appends,
            config.topic("events"),
            controller_replicas.eventlog,
            max_batch_bytes=config.max_event_bytes,
            holds=lambda c: c in controller_replicas.states or c in controller_replicas.broken,
        ),
        metrics.latency.observe,
    )
    commands_topic = commands.get_topic_name()
    events_topic = events.get_topic_name()

    def reader_of(topic: str) -> RecordReader:
        """Reads `topic` by offset: what the worker's consumer skipped."""
        return RecordReader(
            config.kafka_options(),
            topic,
            fetch_wait_ms=config.fetch_wait_ms,
            stall=STALL_S,
            read_committed=exactly_once,
        )

    events_reader = reader_of(events_topic)
    events_released = _Releases(app, events_topic)
    events_assigned: set[int] = set()
    followers: list[Follower] = []

    def follower(name: str, handle: Any, replicas: Replicas) -> Follower:
        f = Follower(name, handle, replicas, events_reader, released=events_released, trust=trust)
        followers.append(f)
        return f

    holes = Holes()
    command_reader = reader_of(commands_topic)
    controller = Controller(
        controller_replicas,
        appender,
        rejected_out,
        topic=commands.get_topic_name(),
        limit=limit,
        max_decision_bytes=config.max_event_bytes - BATCH_OVERHEAD,
        fence=fence,
        outage_limit=config.outage_limit,
        stall_wait=config.session_timeout,
        snapshots=store if config.checkpoint_every > 0 and not exactly_once else None,
        checkpoint_every=config.checkpoint_every,
        holes=holes,
        reader=command_reader,
        released=lambda p, lo, hi: _release(app, commands_topic, p, lo, hi),
        seal=key.sign_event if key is not None else None,
    )
    health.controller = controller

    @app.agent(commands, name="controller")
    async def control(stream: Any) -> None:
        async def body() -> None:
            async for batch in stream.take_events(BATCH, within=WITHIN):
                appender.arrived(batch)
                await controller.process(batch)
                appender.decided(batch)

        await guarded("controller", body)

    runners = []
    for name in config.policies:
        runner = PolicyRunner(POLICIES[name](), replica(), commands_out, sign=sign)
        runners.append(runner)
        app.agent(events, name=name)(
            _policy_agent(name, follower(name, runner.process, runner.replicas))
        )

    loops: list[Loop] = [
        CatchUp(
            holes,
            owned=lambda: set(fence.owned),
            ready=lambda: health.ready,
            read_and_decide=controller.catch_up,
        ),
        FollowerCatchUp(
            followers,
            events_reader,
            assigned=lambda: set(events_assigned),
            ready=lambda: health.ready,
            committed=lambda p: _committed(app, events_topic, p),
        ),
        Ticker(runners),
    ]
    if config.gpu_manager:
        manager = GpuManager(
            classifier or GpuHealthRules(),
            replica(),
            FastSender(shared, commands.get_topic_name()),  # outside Faust: not transactional
            metrics.rejections(FastSender(shared, rejected.get_topic_name())),
            topic=telemetry.get_topic_name(),
            limit=limit,
            sign=sign,
        )
        telemetry_loop = TelemetryLoop(
            config.kafka_options(),
            telemetry.get_topic_name(),
            f"{config.app_id}.telemetry",
            manager,
            session_timeout=config.session_timeout,
            fetch_wait_ms=max(config.fetch_wait_ms, TELEMETRY_FETCH_WAIT_MS),
        )
        loops.append(telemetry_loop)
        health.loops = [telemetry_loop]

        manager_events = follower("gpu_manager_events", manager.on_events, manager.replicas)

        @app.agent(events, name="gpu_manager_events")
        async def gpu_manager_events(stream: Any) -> None:
            async def body() -> None:
                async for batch in stream.take_events(BATCH, within=POLICY_WITHIN):
                    await manager_events.process(batch)

            await guarded("gpu_manager_events", body)

    sink = audit if audit is not None else _configured_sink(config)
    if sink is not None:
        where = config.db or config.audit_dir or f"{type(sink).__name__}@{id(sink)}"
        audit_consumer = audit_loop(config, sink, where=where, trust=trust)
        loops.append(audit_consumer)
        health.audits = list(audit_consumer.agents.values())

    # Started with the app, not as app tasks (those wait for Faust's partitions): the
    # telemetry and audit groups' joins (~3 s on Tansu) then overlap Faust's own, and the
    # fence ticks from the start.
    app.add_dependency(_StartsWithApp(loops, fence))

    projections: Projections | None = None
    log_reads: LogReads | None = None
    if config.projections:
        occupancy = app.Table(
            "occupancy", default=None, partitions=config.partitions, use_partitioner=True
        )
        jobs = app.Table("jobs", default=None, partitions=config.partitions, use_partitioner=True)
        projections = Projections(
            replica(),
            occupancy,
            jobs,
            rejected_out,
            topic=events.get_topic_name(),
            limit=limit,
            metrics=metrics,
        )
        projecting = follower("projections", projections.process, projections.replicas)

        @app.agent(events, name="projections")
        async def project(stream: Any) -> None:
            async def body() -> None:
                async for batch in stream.take_events(BATCH, within=PROJECTION_WITHIN):
                    await projecting.process(batch)

            await guarded("projections", body)

        projections.metrics.watch(controller, followers)
        log_reads = LogReads(lambda: LiveLog(config, timeout=VIEW_READ_TIMEOUT_S, trust=trust))
        _add_views(app, ClusterViews(projections, log_reads), private)

    @app.page("/clusters/{cluster}/controller/")
    @private
    async def controller_view(web: Any, request: Any, cluster: str) -> Any:
        state = controller.replicas.states.get(cluster)
        if state is None:
            return web.json({"error": "this worker holds no state of that cluster"}, status=404)
        broken = controller.replicas.broken.get(cluster)
        return web.json(
            {
                "cluster": cluster,
                "seq": state.seq,
                "digest": state_digest(state),
                "broken": str(broken) if broken is not None else None,
            }
        )

    _add_health(app, health)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # mode types no async receiver
    async def on_revoked(sender: Any, *args: Any, **kwargs: Any) -> None:
        # Another worker may now write these clusters: stop writing, rebuild on next use.
        fence.revoke()
        controller.forget_deliveries()
        health.ready = False
        for r in replicas:
            r.forget()
        if projections is not None:
            projections.revoke()  # the views read the log until the next assignment
        for f in followers:
            f.forget()
        events_released.forget()

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def on_assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        assigned = args[0] if args else kwargs.get("assigned", ())
        fence.assign({tp.partition for tp in assigned if tp.topic == commands_topic})
        events_assigned.clear()
        events_assigned.update(tp.partition for tp in assigned if tp.topic == events_topic)
        if projections is not None:
            # The views and /metrics show every held cluster now, not at its next event.
            projections.hold(events_assigned)
            app.add_future(projections.show(set(events_assigned)))

        async def announce() -> None:
            # Ready means every consumer of the worker has its partitions, the telemetry
            # and audit loops' too (their own groups).
            for loop in loops:
                await loop.joined.wait()
            _heap.settle(collect=True)
            health.ready = True
            line = {"event": "worker.ready", "app": config.app_id, "partitions": len(assigned)}
            print(json.dumps(line), file=sys.stderr, flush=True)

        app.add_future(announce())  # not awaited here: a rebalance callback must not block

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def on_shutdown(sender: Any, *args: Any, **kwargs: Any) -> None:
        for loop in loops:
            await loop.stop()
        for eventlog in logs:
            await eventlog.stop()
        await store.stop()
        if log_reads is not None:
            await log_reads.stop()
        await command_reader.stop()
        await events_reader.stop()
        await shared.stop()
        await appends.stop()
        if sink is not None:
            sink.close()

    return app


async def _release(app: faust.App, topic: str, partition: int, lo: int, hi: int) -> None:
    """The records [lo, hi) of `topic[partition]` that the controller read itself are decided:
    let Faust's consumer commit past them by marking them as a gap in its own bookkeeping
    (`Consumer._add_gap`, how it passes transaction markers). Only those: a gap over records
    it did deliver would repeat their offsets in its acked list, and each repeat costs its
    commit a round (it looks for runs of consecutive offsets)."""
    add_gap = getattr(app.consumer, "_add_gap", None)
    if add_gap is not None and hi > lo:
        await add_gap(TP(topic, partition), lo, hi - 1)


class _Releases:
    """`_release` for the events topic, where several followers read the same skipped
    records back: each range is marked once (a repeat would cost the commit a round)."""

    def __init__(self, app: faust.App, topic: str) -> None:
        self.app = app
        self.topic = topic
        self.done: set[tuple[int, int, int]] = set()

    async def __call__(self, partition: int, lo: int, hi: int) -> None:
        if (partition, lo, hi) in self.done:
            return
        self.done.add((partition, lo, hi))
        await _release(self.app, self.topic, partition, lo, hi)

    def forget(self) -> None:
        """A rebalance: the consumer forgot its gaps of revoked partitions too."""
        self.done.clear()


def _committed(app: faust.App, topic: str, partition: int) -> int:
    """The group's committed offset of `topic[partition]` as Faust's consumer knows it (0:
    none), where its deliveries after an assignment start."""
    offsets = getattr(app.consumer, "_committed_offset", None) or {}
    return int(offsets.get(TP(topic, partition)) or 0)


def _worker_key(config: StreamConfig) -> KeyFile | None:
    """The worker's key file, checked (None: the worker signs nothing).

    Raises:
        KeyFileError: the key file cannot be read or is open to others, or `log_keys` are
            set without one (the worker would refuse its own unsigned events).
    """
    if config.worker_key_file is None:
        if config.log_keys or config.unsigned_log_prefix:
            raise KeyFileError(
                "log keys (or unsigned_log_prefix) are set but no worker_key_file: the "
                "controller would write unsigned events its own readers refuse"
            )
        return None
    return load_key(Path(config.worker_key_file))


def _log_trust(config: StreamConfig, key: KeyFile | None) -> LogTrust | None:
    """The keys the worker's readers take events and checkpoints from (None: all).

    Raises:
        KeyFileError: a log key is not an Ed25519 public key.
    """
    if key is None:
        return None
    try:
        return LogTrust.of(
            [key.public_key, *config.log_keys], unsigned_prefix=config.unsigned_log_prefix
        )
    except LogTrustError as err:
        raise KeyFileError(str(err)) from None


def _initial(config: StreamConfig) -> Callable[[str], ClusterState]:
    """The state of a cluster before its first event, with the configured id window."""
    return functools.partial(initial_state, seen_window=config.seen_window)


@dataclass
class Health:
    """What `/health` and `/ready` report: every loop of the worker."""

    controller: Controller | None = None
    loops: list[TelemetryLoop] = field(default_factory=list)
    audits: list[AuditAgent] = field(default_factory=list)
    ready: bool = False

    def problems(self) -> list[str]:
        """What is wrong now (empty: all is well)."""
        out = []
        for loop in self.loops:
            if loop.failed is not None:
                out.append(f"telemetry loop stopped: {loop.failed}")
        c = self.controller
        if c is not None and c.failing_since is not None:
            out.append(f"controller appends failing for {time.monotonic() - c.failing_since:.0f} s")
        if c is not None and c.replicas.broken:
            out.extend(str(err) for err in c.replicas.broken.values())
        wall = time.time()  # the audit agents say when in wall-clock time
        for audit in self.audits:
            if audit.failing_since is not None:
                out.append(
                    f"history writes failing for {wall - audit.failing_since:.0f} s: "
                    f"{audit.last_error}"
                )
        return out


def _add_health(app: faust.App, health: Health) -> None:
    @app.page("/health")
    async def alive(web: Any, request: Any) -> Any:
        # Liveness: every loop runs (a loop that cannot go on stops the worker; this says
        # so while it is still on its way down, or when a loop died without raising).
        dead = [p for p in health.problems() if p.startswith("telemetry loop stopped")]
        return web.json({"ok": not dead, "problems": dead}, status=503 if dead else 200)

    @app.page("/ready")
    async def ready(web: Any, request: Any) -> Any:
        problems = health.problems()
        if not health.ready:
            problems.insert(0, "partitions not assigned yet")
        return web.json(
            {"ready": not problems, "problems": problems}, status=503 if problems else 200
        )


class Loop(Protocol):
    """A loop of the worker outside Faust's consumer (telemetry, audit)."""

    joined: asyncio.Event

    def start(self) -> None: ...

    async def stop(self) -> None: ...


class WebConfigError(ValueError):
    """The worker's views cannot be served as configured."""


class _StartsWithApp(faust.Service):
    """Runs the worker's own loops and the fence's ticker from the moment the app starts until
    it stops."""

    def __init__(self, loops: list[Loop], fence: Fence) -> None:
        super().__init__()
        self.loops = loops
        self.fence = fence
        self._ticker: asyncio.Task[None] | None = None

    async def on_start(self) -> None:
        running = asyncio.get_running_loop()
        _tasks_dump.install(running)  # replaces mode's SIGUSR1 answer, which stops at agents
        self._ticker = running.create_task(self.fence.run())
        for loop in self.loops:
            loop.start()

    async def on_stop(self) -> None:
        for loop in self.loops:
            await loop.stop()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker


def _policy_agent(name: str, follower: Follower) -> Any:
    async def agent(stream: Any) -> None:
        async def body() -> None:
            async for batch in stream.take_events(BATCH, within=POLICY_WITHIN):
                await follower.process(batch)

        await guarded(name, body)

    agent.__name__ = name
    return agent


def _add_views(app: faust.App, views: ClusterViews, private: Private) -> None:
    """The cluster views and `/metrics` (what they answer: `_views`)."""

    async def about(web: Any, cluster: str, respond: Callable[[Answer], Any]) -> Any:
        """`respond(answer)`, or 404 for a cluster in no log, 503 for a log not read."""
        try:
            found = await views.cluster(cluster)
        except Unread as err:
            return web.json({"error": str(err)}, status=503)
        if found is None:
            return web.json({"error": "unknown cluster"}, status=404)
        return respond(found)

    @app.page("/clusters/")
    @private
    async def clusters(web: Any, request: Any) -> Any:
        found, missing = await views.clusters()
        headers = (
            {"X-Rackplane-Unread-Partitions": ",".join(map(str, missing))} if missing else None
        )
        return web.json([a.summary() for a in found], headers=headers)

    @app.page("/clusters/{cluster}/")
    @private
    async def cluster(web: Any, request: Any, cluster: str) -> Any:
        return await about(web, cluster, lambda a: web.json(a.summary()))

    @app.page("/clusters/{cluster}/racks/")
    @private
    async def racks(web: Any, request: Any, cluster: str) -> Any:
        return await about(web, cluster, lambda a: web.json(racks_of(a.state), headers=a.headers()))

    @app.page("/clusters/{cluster}/jobs/")
    @private
    async def jobs(web: Any, request: Any, cluster: str) -> Any:
        try:
            page = Page.of(request.query)
        except ValueError as err:
            return web.json({"error": str(err)}, status=400)

        def paged(a: Answer) -> Any:
            shown, after = page.cut(jobs_of(a.state))
            headers = a.headers()
            if after is not None:
                headers["X-Next-After"] = after
            return web.json(shown, headers=headers)

        return await about(web, cluster, paged)

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        body = views.projections.metrics.render()
        return web.bytes(body, content_type="text/plain; version=0.0.4")


Private = Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]
"""Wraps a view so that it answers 401 without the configured bearer token."""


def _token_check(token: str | None) -> Private:
    """A `Private` for `token` (None: views are open; only a loopback bind runs so)."""
    expected = f"Bearer {token}".encode() if token is not None else None

    def private(view: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        if expected is None:
            return view

        @functools.wraps(view)
        async def checked(web: Any, request: Any, **kwargs: Any) -> Any:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return web.json(
                    {"error": "this view needs the worker's bearer token"},
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="rackplane"'},
                )
            return await view(web, request, **kwargs)

        return checked

    return private


@dataclass(frozen=True)
class Page:
    """`?limit=N&after=JOB` of a list view: at most `limit` rows after the row `after`."""

    limit: int = 500
    after: str | None = None

    MAX: ClassVar[int] = 5_000

    @classmethod
    def of(cls, query: Any) -> Page:
        """The page a request's query asks for.

        Raises:
            ValueError: `limit` is not a whole number from 1 to `MAX`.
        """
        raw = query.get("limit")
        limit = cls.limit
        if raw is not None:
            if not str(raw).isdigit() or not 1 <= int(raw) <= cls.MAX:
                raise ValueError(f"limit must be a whole number from 1 to {cls.MAX}, not {raw!r}")
            limit = int(raw)
        return cls(limit=limit, after=query.get("after") or None)

    def cut(self, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
        """The rows of this page, and the `after` of the next (None: this is the last)."""
        start = 0
        if self.after is not None:
            ids = [str(r.get("job")) for r in rows]
            start = ids.index(self.after) + 1 if self.after in ids else len(rows)
        shown = rows[start : start + self.limit]
        more = start + self.limit < len(rows)
        return shown, (str(shown[-1].get("job")) if more and shown else None)


def _configured_sink(config: StreamConfig) -> AuditSink | None:
    """The DuckDB history (`--db`), or JSON lines (`--audit-dir`), or none."""
    if config.db:
        from rackplane.history import DuckDBAuditSink  # an adapter of its own: loaded on demand

        return DuckDBAuditSink(config.db)
    return JsonlAuditSink(config.audit_dir) if config.audit_dir else None


def run_worker(config: StreamConfig, *, loglevel: str = "warning") -> None:
    """Create and check the topics, then run one worker until SIGTERM or Ctrl-C.

    Raises:
        WebConfigError: the views would be open beyond this machine (`StreamConfig.web_problem`).
        TopicsError: the topics cannot hold a log that never forgets (see `topics`).
        KeyFileError: the worker's key file cannot be read or is open to others.
    """
    problem = config.web_problem()
    if problem is not None:
        raise WebConfigError(problem)
    # A key file or log key it cannot use stops it here, before it talks to the broker.
    _log_trust(config, _worker_key(config))
    _quiet.quiet_kafka_clients()
    # The topology's fabric distances load networkx on first use (the CLI's start-up is
    # spared it); a worker loads it before it serves, not in its first placement, where it
    # held the event loop for 0.2 s (seen by a loop-stall watch on `up`'s worker).
    import networkx  # noqa: F401

    asyncio.run(ensure_topics(config))
    app = create_app(config)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    _faust_fixes.without_spinner(worker)
    worker.execute_from_commandline()
