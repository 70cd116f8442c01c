"""The Faust app: topics, agents, tables and web views of one rackplane worker.

`create_app(config)` builds everything from a `StreamConfig` (no module-level app, so tests
and benchmarks build as many isolated apps as they need); `run_worker(config)` runs one.

| agent | reads | writes |
|---|---|---|
| controller | commands | events (the only writer), rejected |
| spare_swap, tas, defrag | events | commands |
| gpu_manager | telemetry (a plain consumer loop), events | commands, rejected |
| projections | events | tables `occupancy`, `jobs`; rejected |
| audit (when configured) | events, commands, rejected | the audit sink |
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import faust
from pydantic import ValidationError

from rackplane.models import COMMANDS, REJECTIONS
from rackplane.policies import Defrag, SpareSwap, TopologyAwareScheduler
from rackplane.policies.base import Policy
from rackplane.policies.gpu_health import GpuHealthRules
from rackplane.policies.health import HealthClassifier
from rackplane.projections import state_digest
from rackplane.streams import _faust_fixes, _heap
from rackplane.streams.agents import Controller, GpuManager, PolicyRunner, Replicas
from rackplane.streams.audit import AuditSink, JsonlAuditSink
from rackplane.streams.codec import decode_event
from rackplane.streams.config import StreamConfig
from rackplane.streams.eventlog import EventLog, is_marker
from rackplane.streams.projection_agent import Projections
from rackplane.streams.senders import FastSender, SharedProducer, sender_for
from rackplane.streams.telemetry_loop import TelemetryLoop

log = logging.getLogger("rackplane.worker")

POLICIES: dict[str, Callable[[], Policy]] = {
    "spare_swap": SpareSwap,
    "tas": TopologyAwareScheduler,
    "defrag": Defrag,
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
        datadir=config.datadir,
        producer_max_request_size=max(config.max_message_bytes * 2, 1_048_576),
        consumer_max_fetch_size=max(config.max_message_bytes * 4, 4_194_304),
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
    logs: list[EventLog] = []
    replicas: list[Replicas] = []

    def replica() -> Replicas:
        eventlog = EventLog(
            config.kafka_options(),
            config.topic("events"),
            read_committed=exactly_once,
            fetch_wait_ms=config.fetch_wait_ms,
            seen_window=config.seen_window,
        )
        logs.append(eventlog)
        r = Replicas(eventlog, after_rebuild=_heap.settle)
        replicas.append(r)
        return r

    limit = config.max_message_bytes
    shared = SharedProducer(config.kafka_options(), max_request_size=max(limit * 2, 1_048_576))
    events_out = sender_for(events, shared, exactly_once=exactly_once)
    commands_out = sender_for(commands, shared, exactly_once=exactly_once)
    rejected_out = sender_for(rejected, shared, exactly_once=exactly_once)
    controller = Controller(
        replica(), events_out, rejected_out, topic=commands.get_topic_name(), limit=limit
    )

    @app.agent(commands, name="controller")
    async def control(stream: Any) -> None:
        async for batch in stream.take_events(BATCH, within=WITHIN):
            await controller.process(batch)

    for name in config.policies:
        runner = PolicyRunner(POLICIES[name](), replica(), commands_out)
        app.agent(events, name=name)(_policy_agent(runner))

    loops: list[TelemetryLoop] = []
    if config.gpu_manager:
        manager = GpuManager(
            classifier or GpuHealthRules(),
            replica(),
            FastSender(shared, commands.get_topic_name()),  # outside Faust: not transactional
            FastSender(shared, rejected.get_topic_name()),
            topic=telemetry.get_topic_name(),
            limit=limit,
        )
        loops.append(
            TelemetryLoop(
                config.kafka_options(),
                telemetry.get_topic_name(),
                f"{config.app_id}.telemetry",
                manager,
                session_timeout=config.session_timeout,
                fetch_wait_ms=max(config.fetch_wait_ms, TELEMETRY_FETCH_WAIT_MS),
            )
        )

        @app.agent(events, name="gpu_manager_events")
        async def gpu_manager_events(stream: Any) -> None:
            async for batch in stream.take_events(BATCH, within=POLICY_WITHIN):
                await manager.on_events(batch)

        # Started with the app, not as an app task (those wait for Faust's partitions): the
        # telemetry group's join (~3 s on Tansu) then overlaps Faust's own.
        app.add_dependency(_StartsWithApp(loops))

    if config.projections:
        occupancy = app.Table(
            "occupancy", default=None, partitions=config.partitions, use_partitioner=True
        )
        jobs = app.Table("jobs", default=None, partitions=config.partitions, use_partitioner=True)
        projections = Projections(
            replica(), occupancy, jobs, rejected_out, topic=events.get_topic_name(), limit=limit
        )

        @app.agent(events, name="projections")
        async def project(stream: Any) -> None:
            async for batch in stream.take_events(BATCH, within=PROJECTION_WITHIN):
                await projections.process(batch)

        _add_views(app, projections)

    @app.page("/clusters/{cluster}/controller/")
    async def controller_view(web: Any, request: Any, cluster: str) -> Any:
        state = controller.replicas.states.get(cluster)
        if state is None:
            return web.json({"error": "this worker holds no state of that cluster"}, status=404)
        return web.json({"cluster": cluster, "seq": state.seq, "digest": state_digest(state)})

    sink = audit if audit is not None else _configured_sink(config)
    if sink is not None:
        _add_audit(app, sink, commands=commands, events=events, rejected=rejected)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # mode types no async receiver
    async def on_revoked(sender: Any, *args: Any, **kwargs: Any) -> None:
        # Another worker may now write these clusters: rebuild on next use.
        for r in replicas:
            r.forget()

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def on_assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        assigned = args[0] if args else kwargs.get("assigned", ())

        async def announce() -> None:
            # Ready means every consumer of the worker has its partitions, the telemetry
            # loop's too (its own group).
            for loop in loops:
                await loop.joined.wait()
            _heap.settle(collect=True)
            line = {"event": "worker.ready", "app": config.app_id, "partitions": len(assigned)}
            print(json.dumps(line), file=sys.stderr, flush=True)

        app.add_future(announce())  # not awaited here: a rebalance callback must not block

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def on_shutdown(sender: Any, *args: Any, **kwargs: Any) -> None:
        for loop in loops:
            await loop.stop()
        for eventlog in logs:
            await eventlog.stop()
        await shared.stop()
        if sink is not None:
            sink.close()

    return app


class _StartsWithApp(faust.Service):
    """Runs the telemetry loops from the moment the app starts until it stops."""

    def __init__(self, loops: list[TelemetryLoop]) -> None:
        super().__init__()
        self.loops = loops

    async def on_start(self) -> None:
        for loop in self.loops:
            loop.start()

    async def on_stop(self) -> None:
        for loop in self.loops:
            await loop.stop()


def _policy_agent(runner: PolicyRunner) -> Any:
    async def agent(stream: Any) -> None:
        async for batch in stream.take_events(BATCH, within=POLICY_WITHIN):
            await runner.process(batch)

    agent.__name__ = runner.name
    return agent


def _add_views(app: faust.App, projections: Projections) -> None:
    @app.page("/clusters/")
    async def clusters(web: Any, request: Any) -> Any:
        return web.json(projections.clusters())

    def rows_or_404(web: Any, rows: list[dict[str, Any]] | None) -> Any:
        if rows is None:
            return web.json({"error": "unknown cluster"}, status=404)
        return web.json(rows)

    @app.page("/clusters/{cluster}/racks/")
    async def racks(web: Any, request: Any, cluster: str) -> Any:
        return rows_or_404(web, projections.racks(cluster))

    @app.page("/clusters/{cluster}/jobs/")
    async def jobs(web: Any, request: Any, cluster: str) -> Any:
        return rows_or_404(web, projections.job_rows(cluster))

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        return web.bytes(projections.metrics.render(), content_type="text/plain; version=0.0.4")


def _configured_sink(config: StreamConfig) -> AuditSink | None:
    """The DuckDB history (`--db`), or JSON lines (`--audit-dir`), or none."""
    if config.db:
        from rackplane.history import DuckDBAuditSink  # an adapter of its own: loaded on demand

        return DuckDBAuditSink(config.db)
    return JsonlAuditSink(config.audit_dir) if config.audit_dir else None


def _add_audit(app: faust.App, sink: AuditSink, **topics: Any) -> None:
    feeds = (
        ("events", decode_event, sink.record_events),
        ("commands", COMMANDS.validate_json, sink.record_commands),
        ("rejected", REJECTIONS.validate_json, sink.record_rejections),
    )
    for name, parse, record in feeds:
        app.agent(topics[name], name=f"audit_{name}")(_audit_agent(parse, record))


def _audit_agent(parse: Callable[[bytes], Any], record: Callable[[list[Any]], None]) -> Any:
    async def agent(stream: Any) -> None:
        async for batch in stream.take_events(BATCH, within=0.05):
            record(_decodable(batch, parse))

    return agent


def _decodable(batch: Sequence[Any], parse: Callable[[bytes], Any]) -> list[Any]:
    """What decodes in a batch, in order; markers and garbage are skipped (the agent that
    owns the topic sends garbage to `rejected`, which the audit also records)."""
    out = []
    for ev in batch:
        message = ev.message
        if is_marker(message.headers) or message.value is None:
            continue
        try:
            out.append(parse(message.value))
        except (ValidationError, ValueError):
            continue
    return out


def run_worker(config: StreamConfig, *, loglevel: str = "warning") -> None:
    """Run one worker until SIGTERM or Ctrl-C."""
    app = create_app(config)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    _faust_fixes.without_spinner(worker)
    worker.execute_from_commandline()
