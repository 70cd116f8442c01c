"""`rackplane tui`: the operator console, live over a broker, on a recorded history, or a demo."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated

import typer

from rackplane.cli._config import ConfigFile, settings
from rackplane.cli._render import errors, fail

MAX_DEMO_RACKS = 1_024
"""The largest `--demo`: its story grows with the racks (1,024 take minutes here)."""


def register(app: typer.Typer) -> None:
    """Add `tui` to the CLI."""
    app.command()(tui)


def operator(actor: str | None) -> str:
    """The actor of the console's commands (as the CLI's: operator:$USER by default)."""
    return actor or f"operator:{getpass.getuser()}"


def tui(
    config_file: ConfigFile = None,
    broker: Annotated[
        str | None,
        typer.Option(help="kafka://host:port of the running system (live; default: settings)."),
    ] = None,
    db: Annotated[
        Path | None, typer.Option(help="A recorded history (DuckDB file or Parquet folder).")
    ] = None,
    cluster: Annotated[
        str | None, typer.Option(help="Cluster id (default: the only or first one).")
    ] = None,
    demo: Annotated[
        int | None,
        typer.Option(
            help="No broker: a seeded story on this many racks, then the in-process engine "
            "applies your commands."
        ),
    ] = None,
    prefix: Annotated[str | None, typer.Option(help="Topic prefix.")] = None,
    actor: Annotated[str | None, typer.Option(help="Who acts (default operator:$USER).")] = None,
) -> None:
    """Open the operator console: cluster, jobs, events, alerts, queues; actions; time travel.

    Broker, prefix, Kafka security and actor come from the settings (config file < RACKPLANE_*
    < flags; docs/CONFIG.md), like every client command's."""
    from rackplane.keyfiles import KeyFileError, load_key
    from rackplane.tui import ConsoleApp, LiveSource, Source, SourceError
    from rackplane.tui.sources import history_source

    source: Source
    try:
        if db is not None:
            with errors.status(f"loading the history in {db} ..."):
                source = history_source(db, cluster=cluster)
        elif demo is not None:
            if demo < 8:
                fail("--demo needs at least 8 racks")
            if demo > MAX_DEMO_RACKS:  # the story on 1,024 racks takes minutes to tell already
                fail(f"--demo tells its story on at most {MAX_DEMO_RACKS:,} racks, not {demo:,}")
            from rackplane.tui.sample import demo_source

            with errors.status(f"running the demo story on {demo} racks ..."):
                source = demo_source(demo)
        else:
            s = settings(config_file, broker=broker, topic_prefix=prefix, actor=actor)
            config = s.stream_config()
            actor = s.actor
            sign = None
            if s.key_file is not None:  # the console signs and acts as the key file's actor
                key = load_key(s.key_file)
                if actor and actor != key.actor:
                    fail(f"the key file {s.key_file} signs as {key.actor!r}, not {actor!r}")
                actor, sign = key.actor, key.sign
            source = LiveSource(
                config.broker, cluster=cluster, prefix=config.prefix, config=config, sign=sign
            )
    except (SourceError, KeyFileError) as err:
        fail(str(err))
    ConsoleApp(source, actor=operator(actor)).run()
