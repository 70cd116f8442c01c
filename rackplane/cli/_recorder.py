"""`rackplane recorder`: the one writer of a pipeline's DuckDB history, apart from the workers.

However many workers run, one recorder reads every partition of the events, commands and
rejected topics in a consumer group of its own (the audit's: `streams/audit_agent.py`) and
stores them into one history file, committing offsets only for what is stored. While it
records it publishes a reading copy every few seconds (`DuckDBAuditSink.publish`), which
`history`, `replay`, `tui --db` and `history export` read when the file itself is held.
Stopped (Ctrl-C, SIGTERM), it writes what it holds and releases the file; restarted, it goes
on where its group's offsets stand, deduplicating what it reads again.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Annotated

import typer

from rackplane.cli._config import ConfigFile, settings
from rackplane.cli._render import errors, fail, log_to_stderr


def register(app: typer.Typer) -> None:
    """Add `rackplane recorder` to the CLI."""
    app.command()(recorder)


def recorder(
    db: Annotated[
        Path | None,
        typer.Option(
            "--db", help="The DuckDB history to record into (default: the `history_db` setting)."
        ),
    ] = None,
    broker: Annotated[
        str | None, typer.Option(help="kafka://host:port of the pipeline's brokers.")
    ] = None,
    prefix: Annotated[str | None, typer.Option(help="Topic prefix.")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "warning",
    config_file: ConfigFile = None,
) -> None:
    """Record the pipeline's events, commands and rejections into one DuckDB history."""
    from rackplane.history import DuckDBAuditSink, HistoryError
    from rackplane.logtrust import LogTrustError
    from rackplane.streams.audit_agent import audit_loop

    s = settings(config_file, broker=broker, topic_prefix=prefix)
    config = s.stream_config()
    path = db or s.history_db
    try:
        trust = config.log_trust()
    except LogTrustError as err:
        fail(str(err))
    asyncio.run(_reachable(config.kafka_options(), s.broker))
    try:
        sink = DuckDBAuditSink(path)
    except HistoryError as err:
        fail(str(err))
    # Only now: a refusal above leaves no handler behind on a stream its caller may close.
    log_to_stderr(log_level)

    async def run() -> int:
        loop = audit_loop(config, sink, where=str(path.resolve()), trust=trust)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        loop.start()
        await loop.joined.wait()
        errors.print(
            f"[green]recording[/] {config.topic('events')}, {config.topic('commands')} and "
            f"{config.topic('rejected')} on {s.broker} into {path} (Ctrl-C stops)",
            highlight=False,
            soft_wrap=True,
        )
        await stop.wait()
        await loop.stop()
        return loop.published

    try:
        published = asyncio.run(run())
    finally:
        try:
            sink.close()
        except HistoryError as err:
            fail(str(err))
    errors.print(f"recorder stopped ({published} reading copies published)", highlight=False)


async def _reachable(kafka: dict[str, object], broker: str) -> None:
    """Exit in one line when no broker answers at `broker` within 8 s."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    from rackplane.streams.client import CONNECT_TIMEOUT_S

    probe = AIOKafkaConsumer(**kafka, group_id=None)
    said = logging.getLogger("aiokafka")
    level = said.level
    said.setLevel(logging.CRITICAL)  # its ERROR line would say again what the one below says
    try:
        await asyncio.wait_for(probe.start(), CONNECT_TIMEOUT_S)
    except TimeoutError:
        fail(f"cannot reach {broker}: no Kafka answer within {CONNECT_TIMEOUT_S:.0f} s")
    except KafkaError as err:
        fail(f"cannot reach {broker}: {err}")
    finally:
        await probe.stop()
        said.setLevel(level)
