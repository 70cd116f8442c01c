"""`rackplane broker | worker`: run the embedded broker, run a pipeline worker."""

from __future__ import annotations

import dataclasses
import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from rackplane.cli._config import ConfigFile, settings
from rackplane.cli._render import errors, fail
from rackplane.streams.config import StreamConfig


def register(app: typer.Typer) -> None:
    """Add the streaming commands to the CLI."""
    app.command()(broker)
    app.command()(worker)


def broker(
    port: Annotated[
        int | None,
        typer.Option(min=1, max=65_535, help="Port to listen on (default: a free one)."),
    ] = None,
    log: Annotated[Path | None, typer.Option(help="File for the broker's output.")] = None,
) -> None:
    """Run the embedded Kafka-protocol broker (Tansu, memory storage) until Ctrl-C."""
    from rackplane.streams import EmbeddedBroker, EmbeddedBrokerError

    if log is not None:
        _check_writable_file(log, "--log")
    try:
        b = EmbeddedBroker(port, log_path=log).start()
    except EmbeddedBrokerError as err:
        fail(str(err))
    except OSError as err:
        fail(f"cannot start the embedded broker: {err.strerror or err}")
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
    config_file: ConfigFile = None,
    broker: Annotated[
        str | None, typer.Option(help="kafka://host:port of the cluster's brokers.")
    ] = None,
    exactly_once: Annotated[
        bool | None,
        typer.Option("--exactly-once/--at-least-once", help="Kafka transactions (Apache Kafka)."),
    ] = None,
    prefix: Annotated[str | None, typer.Option(help="Topic prefix.")] = None,
    partitions: Annotated[int | None, typer.Option(help="Partitions of each topic.")] = None,
    replication: Annotated[int | None, typer.Option(help="Replication of new topics.")] = None,
    app_id: Annotated[str | None, typer.Option(help="Consumer group / app id.")] = None,
    web_bind: Annotated[str | None, typer.Option(help="Address of the views.")] = None,
    web_port: Annotated[int | None, typer.Option(help="Port of the views and /metrics.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Worker data directory.")] = None,
    audit_dir: Annotated[Path | None, typer.Option(help="Write the audit trail here.")] = None,
    db: Annotated[
        Path | None,
        typer.Option(help="Record the history into this DuckDB file (record_history on)."),
    ] = None,
    policies: Annotated[str | None, typer.Option(help="Policy agents to run.")] = None,
    gpu_manager: Annotated[
        bool | None, typer.Option("--gpu-manager/--no-gpu-manager", help="Run the GPU Manager.")
    ] = None,
    projections: Annotated[
        bool | None, typer.Option("--projections/--no-projections", help="Run the projections.")
    ] = None,
    max_message_bytes: Annotated[
        int | None, typer.Option(help="Larger messages are rejected before decoding.")
    ] = None,
    fetch_wait_ms: Annotated[
        int | None,
        typer.Option(
            help="Longest a fetch waits at the broker when nothing is there, ms (default 20; "
            "Apache Kafka: 100-500 cuts idle fetches)."
        ),
    ] = None,
    max_event_bytes: Annotated[
        int | None,
        typer.Option(help="Largest record batch of events; a bigger decision is rejected."),
    ] = None,
    outage_limit: Annotated[
        float | None,
        typer.Option(help="Seconds of failed appends before the worker exits non-zero."),
    ] = None,
    allow_finite_retention: Annotated[
        bool | None,
        typer.Option(
            "--allow-finite-retention",
            help="Start even if the events topic forgets (finite retention).",
        ),
    ] = None,
    checkpoint_every: Annotated[
        int | None,
        typer.Option(help="Events of a partition between checkpoints (snapshots); 0: none."),
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="Log level (quiet by default).")] = None,
    worker_key_file: Annotated[
        Path | None,
        typer.Option(
            help="Key file the policies, the GPU Manager and the controller sign with; "
            "the worker then takes only events and checkpoints signed by it or --log-key."
        ),
    ] = None,
    log_key: Annotated[
        list[str] | None,
        typer.Option(help="Public key (base64) of another worker whose events are trusted."),
    ] = None,
    unsigned_log_prefix: Annotated[
        bool | None,
        typer.Option(
            "--unsigned-log-prefix",
            help="Take unsigned events until a partition's first signed one (an older log).",
        ),
    ] = None,
    seen_window: Annotated[
        int | None,
        typer.Option(min=1, hidden=True, help="Command ids remembered for dedupe (fault suite)."),
    ] = None,
) -> None:
    """Run a pipeline worker: controller, policies, GPU Manager, projections.

    Flags override RACKPLANE_* variables, which override the config file (docs/CONFIG.md).
    """
    from rackplane.keyfiles import KeyFileError
    from rackplane.streams.app import WebConfigError, run_worker
    from rackplane.streams.topics import TopicsError

    s = settings(
        config_file,
        broker=broker,
        exactly_once=exactly_once,
        topic_prefix=prefix,
        partitions=partitions,
        replication=replication,
        app_id=app_id,
        web_bind=web_bind,
        web_port=web_port,
        data_dir=data_dir,
        audit_dir=audit_dir,
        policies=policies,
        history_db=db,
        record_history=True if db is not None else None,
        gpu_manager=gpu_manager,
        projections=projections,
        max_message_bytes=max_message_bytes,
        max_event_bytes=max_event_bytes,
        outage_limit=outage_limit,
        allow_finite_retention=allow_finite_retention,
        checkpoint_every=checkpoint_every,
        fetch_wait_ms=fetch_wait_ms,
        log_level=log_level,
        worker_key_file=worker_key_file,
        log_keys=tuple(log_key) if log_key else None,
        unsigned_log_prefix=unsigned_log_prefix,
    )
    config = s.stream_config()
    if seen_window is not None:
        config = dataclasses.replace(config, seen_window=seen_window)
    if config.db and config.audit_dir:
        fail("choose one audit sink: --db FILE (DuckDB) or --audit-dir DIR (JSON lines)")
    _check_paths(config)
    _check_web_port(config.web_bind, config.web_port)
    if config.exactly_once:
        _check_transactions(config)
    from aiokafka.errors import KafkaConnectionError

    try:
        run_worker(config, loglevel=s.log_level)
    except (TopicsError, WebConfigError, KeyFileError) as err:
        fail(str(err))
    except KafkaConnectionError as err:
        fail(f"cannot reach the brokers at {config.broker}: {err}")


def _check_writable_file(path: Path, option: str) -> None:
    """One line when `path` cannot be a file written here: a directory, or no such parent."""
    if path.is_dir():
        fail(f"{option}: {path} is a directory; expected a file")
    if not path.parent.is_dir():
        fail(f"{option}: cannot write {path}: no directory {path.parent}")


def _check_paths(config: StreamConfig) -> None:
    """The worker's own paths, checked before it talks to a broker (else a traceback once the
    agents start): the data and audit directories are not files, the history is not a
    directory and has a parent."""
    for path, option in ((config.datadir, "--data-dir"), (config.audit_dir, "--audit-dir")):
        if path and Path(path).exists() and not Path(path).is_dir():
            fail(f"{option}: {path} is a file; expected a directory")
    if config.db:
        _check_writable_file(Path(config.db), "--db")


def _check_web_port(bind: str, port: int) -> None:
    """Fail in one line, before the broker is asked anything, when the views cannot listen at
    `bind`:`port` (the web server would find it only after the topics and the agents started,
    and end the worker with a traceback). Bound as aiohttp binds: with SO_REUSEADDR, so a port
    left in TIME_WAIT by a worker that just stopped is not refused."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        fail(f"--web-bind: cannot resolve {bind}: {err.strerror}")
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as err:
                why = {
                    errno.EADDRINUSE: "is in use (another worker's views?)",
                    errno.EACCES: "needs privileges this user lacks",
                    errno.EADDRNOTAVAIL: "is not an address of this machine",
                }.get(err.errno or 0, f"cannot be bound ({err.strerror or err})")
                fail(
                    f"--web-port: {bind}:{port} {why}: the worker serves its views and /metrics "
                    "there; pass a free --web-port (or set web_port)"
                )


def _check_transactions(config: StreamConfig) -> None:
    """Fail with a clear message when the broker has no transactions (Tansu has none)."""
    import asyncio
    import uuid

    from aiokafka import AIOKafkaProducer

    async def probe() -> None:
        producer = AIOKafkaProducer(
            **config.kafka_options(), transactional_id=f"rackplane-probe-{uuid.uuid4().hex}"
        )
        try:
            await asyncio.wait_for(producer.start(), 30)
        finally:
            await producer.stop()

    try:
        asyncio.run(probe())
    except Exception as err:  # any failure to open a transactional producer says the same
        fail(
            f"--exactly-once needs Kafka transactions, which the broker at {config.bootstrap} "
            f"does not offer ({type(err).__name__}); run without --exactly-once (at-least-once, "
            "deduplicated) or against Apache Kafka"
        )
