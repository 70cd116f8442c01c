"""`rackplane ...`: the command line. An adapter: it reads files, calls the core, renders.

`main()` loads only the module of the command it runs (`_ONE_MODULE`: `submit` needs
`_client`, not the simulator's, the console's or the history's commands), so an operator's
every command does not pay for importing all the others; `--help`, a command not in the table
and `rackplane.cli.app` (the tests' way in) build the whole CLI.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import sys
from typing import Any, NoReturn

import typer
from typer.main import get_command_name
from typer.models import CommandInfo

import rackplane
from rackplane._gc import cycle_collection_paused

HELP = "Event-sourced control plane for rack-scale GPU clusters (NVL72 and alike)."

_MODULES = (
    "_streams",
    "_client",
    "_rack",
    "_read",
    "_recorder",
    "_up",
    "_sim",
    "_exporter",
    "_tui",
    "_replay",
    "_history",
    "_kube",
    "_slurm",
)
"""The command modules with a `register(app)`, in the order the whole CLI adds them."""

_ONE_MODULE = {
    **dict.fromkeys(("broker", "worker"), "_streams"),
    **dict.fromkeys(
        (
            "register",
            "submit",
            "cancel",
            "cordon",
            "uncordon",
            "health",
            "repair",
            "allow-interactive",
        ),
        "_client",
    ),
    "rack-health": "_rack",
    **dict.fromkeys(
        (
            "status",
            "jobs",
            "job",
            "racks",
            "rack",
            "queues",
            "reservations",
            "reserve",
            "unreserve",
        ),
        "_read",
    ),
    "recorder": "_recorder",
    "up": "_up",
    **dict.fromkeys(("capacity", "reliability", "simulate"), "_sim"),
    "exporter": "_exporter",
    "tui": "_tui",
    "replay": "_replay",
    "history": "_history",
    "kube": "_kube",
    "slurm": "_slurm",
}
"""Command -> the one module that registers it (tests/cli/test_cli_imports.py checks each)."""


def build(
    modules: tuple[str, ...] = _MODULES, *, everything: bool = True, only: str | None = None
) -> typer.Typer:
    """The CLI with the commands of `modules` (and, when `everything`, the groups and
    commands this package adds itself: topology, config, keys, demo, version); with `only`,
    just that command of them (Typer turns every registered command into a Click command,
    parameters and all, before it runs one)."""
    app = typer.Typer(
        name="rackplane",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    if not everything:
        # A Typer app with a single command would run it without its name: a callback keeps
        # `rackplane submit ...` a subcommand, as in the whole CLI.
        app.callback(help=HELP)(_nothing)
    # Importing the commands builds pydantic models and their schemas: objects that live as
    # long as the process, so the cyclic collector's walks over them free nothing and cost
    # every command 3-7% of its start (tests/cli/test_cli_imports.py: it runs again after).
    with cycle_collection_paused():
        if everything:
            from rackplane.cli._config import config_app
            from rackplane.cli._demo import demo
            from rackplane.cli._keys import keys_app
            from rackplane.cli._topology import topology_app

            app.add_typer(topology_app, name="topology")
            app.add_typer(config_app, name="config")
            app.add_typer(keys_app, name="keys")
            app.command()(demo)
        for name in modules:
            importlib.import_module(f"rackplane.cli.{name}").register(app)
    if only is not None:
        app.registered_commands = [c for c in app.registered_commands if _name(c) == only]
    if everything:
        app.command()(version)
    return app


def _name(command: CommandInfo) -> str:
    """The name a registered command is called by."""
    if command.name is not None:
        return command.name
    return get_command_name(getattr(command.callback, "__name__", ""))


def _nothing() -> None:
    """No options of its own: the subcommand does the work."""


def version() -> None:
    """Print rackplane's version."""
    typer.echo(f"rackplane {rackplane.__version__}")


def __getattr__(name: str) -> Any:
    """`rackplane.cli.app`: the whole CLI, built on first use."""
    if name == "app":
        app = build()
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_NO_PYDANTIC_PLUGINS = ("PYDANTIC_DISABLE_PLUGINS", "__all__")
"""pydantic looks up plugins (the `pydantic` entry points of every installed distribution)
when it builds its first validator: 10-17 ms of a client command's ~300 ms of CPU before it
sends, for plugins rackplane does not use. The command line skips the look unless the
variable is set (`PYDANTIC_DISABLE_PLUGINS=` empty: load them all); `import rackplane` as a
library does not touch it."""


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault(*_NO_PYDANTIC_PLUGINS)
    module = _ONE_MODULE.get(sys.argv[1]) if len(sys.argv) > 1 else None
    with cycle_collection_paused():
        app = build() if module is None else build((module,), everything=False, only=sys.argv[1])
        # What the start built (modules, classes, models and their schemas) lives as long as
        # the process: frozen, the collector's walks leave it alone. Unfrozen, the first
        # collection after the pause walked all of it: 2.3% of a submit's instructions.
        gc.freeze()
    try:
        app()
    except SystemExit as done:
        if module not in _QUICK_EXIT:
            raise
        leave(done.code)


_QUICK_EXIT = frozenset({"_client", "_read", "_rack"})
"""The command modules whose commands leave nothing for the interpreter to do at exit: a
client command has closed its connections, stopped its event loop and written its output
when its function returns, and none registers an `atexit` hook or starts a thread or a
process that outlives it (tests/streams/test_cli.py: against a live worker, no thread left
and no exit hook but logging's; tests/cli/test_quick_exit.py: output and status whole). Such
a command ends with `leave`."""


def leave(code: object) -> NoReturn:
    """End the process now with `code` (a `SystemExit`'s: None is 0, a text is printed to
    stderr and is 1), once standard output and error are flushed and logging's handlers
    closed, without the interpreter's finalization: that frees, one by one, every module,
    pydantic model and schema the command loaded, ~75 ms of a client command's ~0.45 s here
    (docs/BENCHMARKS.md), only for the operating system to take the memory back anyway.
    A standard output whose reader is gone when it is flushed here ends with status 120, as
    Python's own finalization does (one gone while the command writes is click's: status 1,
    as before)."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    logging.shutdown()
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):  # the reader went away, or stdout was closed
        status = status or 120
    with contextlib.suppress(BrokenPipeError, ValueError):
        sys.stderr.flush()
    os._exit(status)
