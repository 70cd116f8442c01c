"""`rackplane broker | worker`: run the embedded broker, run a pipeline worker."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from rackplane.cli._render import errors, fail


def register(app: typer.Typer) -> None:
    """Add the streaming commands to the CLI."""
    app.command()(broker)
    app.command()(worker)


def broker(
    port: Annotated[
        int | None, typer.Option(help="Port to listen on (default: a free one).")
    ] = None,
    log: Annotated[Path | None, typer.Option(help="File for the broker's output.")] = None,
) -> None:
    """Run the embedded Kafka-protocol broker (Tansu, memory storage) until Ctrl-C."""
    from rackplane.streams import EmbeddedBroker, EmbeddedBrokerError

    try:
        b = EmbeddedBroker(port, log_path=log).start()
    except EmbeddedBrokerError as err:
        fail(str(err))
    errors.print(f"[green]broker ready[/] at {b.url} (memory storage; Ctrl-C stops it)")
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stop and b.running:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        b.stop()
    errors.print("broker stopped")


def worker(
    broker: Annotated[str, typer.Option(help="kafka://host:port of the cluster's brokers.")] = (
        "kafka://127.0.0.1:9092"
    ),
    exactly_once: Annotated[
        bool, typer.Option("--exactly-once", help="Kafka transactions (Apache Kafka only).")
    ] = False,
    prefix: Annotated[str, typer.Option(help="Topic prefix.")] = "rackplane",
    partitions: Annotated[int, typer.Option(help="Partitions of each topic.")] = 4,
    app_id: Annotated[str, typer.Option(help="Consumer group / app id.")] = "rackplane",
    web_port: Annotated[int, typer.Option(help="Port of the JSON views and /metrics.")] = 6066,
    data_dir: Annotated[str, typer.Option(help="Worker data directory.")] = ".rackplane/worker",
    audit_dir: Annotated[str | None, typer.Option(help="Write the audit trail here.")] = None,
    db: Annotated[
        str | None, typer.Option(help="Record the history into this DuckDB file.")
    ] = None,
    policies: Annotated[str, typer.Option(help="Policy agents to run.")] = "spare_swap,tas,defrag",
    gpu_manager: Annotated[bool, typer.Option(help="Run the GPU Manager (telemetry).")] = True,
    projections: Annotated[bool, typer.Option(help="Run the projections and views.")] = True,
    max_message_bytes: Annotated[
        int, typer.Option(help="Larger messages are rejected before decoding.")
    ] = 1_048_576,
    log_level: Annotated[str, typer.Option(help="Log level (quiet by default).")] = "warning",
) -> None:
    """Run a pipeline worker: controller, policies, GPU Manager, projections."""
    from rackplane.streams.app import POLICIES, run_worker
    from rackplane.streams.config import StreamConfig

    if db and audit_dir:
        fail("choose one audit sink: --db FILE (DuckDB) or --audit-dir DIR (JSON lines)")
    chosen = tuple(p for p in policies.split(",") if p)
    unknown = [p for p in chosen if p not in POLICIES]
    if unknown:
        fail(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    config = StreamConfig(
        broker=broker,
        prefix=prefix,
        partitions=partitions,
        app_id=app_id,
        exactly_once=exactly_once,
        web_port=web_port,
        datadir=data_dir,
        audit_dir=audit_dir,
        db=db,
        policies=chosen,
        max_message_bytes=max_message_bytes,
        gpu_manager=gpu_manager,
        projections=projections,
    )
    try:
        config.bootstrap  # noqa: B018  (validates the URL)
    except ValueError as err:
        fail(str(err))
    if exactly_once:
        _check_transactions(config.bootstrap)
    run_worker(config, loglevel=log_level)


def _check_transactions(bootstrap: str) -> None:
    """Fail with a clear message when the broker has no transactions (Tansu has none)."""
    import asyncio
    import uuid

    from aiokafka import AIOKafkaProducer

    async def probe() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"rackplane-probe-{uuid.uuid4().hex}"
        )
        try:
            await asyncio.wait_for(producer.start(), 30)
        finally:
            await producer.stop()

    try:
        asyncio.run(probe())
    except Exception as err:  # any failure to open a transactional producer says the same
        fail(
            f"--exactly-once needs Kafka transactions, which the broker at {bootstrap} does not "
            f"offer ({type(err).__name__}); run without --exactly-once (at-least-once, "
            "deduplicated) or against Apache Kafka"
        )
