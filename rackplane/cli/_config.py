"""`rackplane config show | doc`, and the one way commands read their settings."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rackplane.cli._render import console, fail, print_json
from rackplane.config import ConfigError, Loaded, RackplaneSettings, load_settings, masked

config_app = typer.Typer(
    help="The effective configuration (defaults < file < RACKPLANE_* env < flags).",
    no_args_is_help=True,
)

ConfigFile = Annotated[
    Path | None,
    typer.Option(
        "--config", help="YAML config file (default: $RACKPLANE_CONFIG).", show_default=False
    ),
]


def load(config_file: Path | None, **flags: Any) -> Loaded:
    """The effective settings for a command; a bad layer exits with its reason (status 2)."""
    quiet_library_logs()
    try:
        return load_settings(config_file, flags)
    except ConfigError as err:
        fail(_one_line(err))
    except UnicodeDecodeError as err:  # the settings' reader lets this one through
        path = config_file or os.environ.get("RACKPLANE_CONFIG")
        fail(f"config file {path}: expected UTF-8 text (byte {err.start} cannot be decoded)")


def positive_seconds(value: float) -> float:
    """A `--timeout` (a typer callback): a positive, finite number of seconds, or one line
    naming the option (NaN waited not at all, a negative value neither)."""
    if not (math.isfinite(value) and value > 0):
        fail(f"--timeout: expected a positive number of seconds, got {value}")
    return value


def quiet_library_logs() -> None:
    """Keep aiokafka's and asyncio's records off stderr unless the command sets up logging.

    Without a handler of their own they reach stderr through logging's last resort: aiokafka's
    "Unable connect to ...", asyncio's "Unclosed AIOKafkaConsumer" and its repr, beside the
    one line a command prints about the same broker. A command that logs (`log_to_stderr`)
    still gets them through the root logger.
    """
    for library in ("aiokafka", "asyncio"):
        logger = logging.getLogger(library)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


def _one_line(err: ConfigError) -> str:
    """A YAML syntax error as `config file F:LINE: not valid YAML: PROBLEM` (PyYAML's own text
    spans four lines, with a caret under the column)."""
    cause = err.__cause__
    mark = getattr(cause, "problem_mark", None)
    head, sep, _ = str(err).partition(": not valid YAML:")
    if sep and mark is not None:
        problem = getattr(cause, "problem", None) or "cannot be parsed"
        context = getattr(cause, "context", None)
        return f"{head}:{mark.line + 1}: not valid YAML: {problem}" + (
            f" ({context})" if context else ""
        )
    return " ".join(str(err).split())


def settings(config_file: Path | None, **flags: Any) -> RackplaneSettings:
    """`load(...).settings`."""
    return load(config_file, **flags).settings


@config_app.command()
def show(
    config_file: ConfigFile = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the effective configuration, where each value came from, secrets masked."""
    loaded = load(config_file)
    values = masked(loaded.settings)
    if json_out:
        print_json({"file": str(loaded.file) if loaded.file else None, "settings": values})
        return
    where = f" (file: {loaded.file})" if loaded.file else " (no config file)"
    t = Table(title=f"Effective configuration{where}", title_justify="left", header_style="bold")
    for col in ("setting", "value", "from"):
        t.add_column(col)
    for name, value in values.items():
        shown = "-" if value is None else _text(value)
        t.add_row(name, shown, loaded.origins[name])
    console.print(t)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items()) or "(no overrides)"
    return str(value)


@config_app.command()
def doc() -> None:
    """Print docs/CONFIG.md (generated from the settings model)."""
    from rackplane.config import render_config_doc

    typer.echo(render_config_doc(), nl=False)


@config_app.command()
def acls(
    bootstrap: Annotated[
        str, typer.Option(help="host:port of the broker, in the printed commands.")
    ] = "BROKER:9092",
    worker: Annotated[str, typer.Option(help="The workers' SASL user.")] = "worker",
    client: Annotated[str, typer.Option(help="The CLI's and console's SASL user.")] = "client",
    exporter: Annotated[str, typer.Option(help="The exporters' SASL user.")] = "exporter",
    command_config: Annotated[
        str, typer.Option(help="The admin's client properties file, in the printed commands.")
    ] = "admin.properties",
    config_file: ConfigFile = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the `kafka-acls.sh` commands that give each component only what it needs, for
    the configured topic prefix and app id (docs/OPERATIONS.md, "The broker's ACLs")."""
    from rackplane.streams.acls import Principals, command_lines
    from rackplane.streams.acls import acls as all_acls

    s = settings(config_file)
    who = Principals(worker=worker, client=client, exporter=exporter)
    if json_out:
        rows = all_acls(s.topic_prefix, s.app_id, who)
        print_json([dataclasses.asdict(a) for a in rows])
        return
    lines = command_lines(
        s.topic_prefix, s.app_id, who, bootstrap=bootstrap, command_config=command_config
    )
    for line in lines:
        typer.echo(line)
