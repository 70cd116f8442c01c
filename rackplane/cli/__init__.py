"""`rackplane ...`: the command line. An adapter: it reads files, calls the core, renders."""

from __future__ import annotations

import typer

import rackplane
from rackplane._gc import cycle_collection_paused

# Importing the commands builds ~80 pydantic models and their schemas: objects that live as
# long as the process, so the cyclic collector's walks over them free nothing and cost every
# command 3-7% of its start (tests/cli/test_cli_imports.py: the collector runs again after).
with cycle_collection_paused():
    from rackplane.cli import (
        _client,
        _exporter,
        _history,
        _kube,
        _rack,
        _read,
        _recorder,
        _replay,
        _sim,
        _slurm,
        _streams,
        _tui,
        _up,
    )
    from rackplane.cli._config import config_app
    from rackplane.cli._demo import demo
    from rackplane.cli._keys import keys_app
    from rackplane.cli._topology import topology_app

app = typer.Typer(
    name="rackplane",
    help="Event-sourced control plane for rack-scale GPU clusters (NVL72 and alike).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(topology_app, name="topology")
app.add_typer(config_app, name="config")
app.add_typer(keys_app, name="keys")
app.command()(demo)
_streams.register(app)
_client.register(app)
_rack.register(app)
_read.register(app)
_recorder.register(app)
_up.register(app)
_sim.register(app)
_exporter.register(app)
_tui.register(app)
_replay.register(app)
_history.register(app)
_kube.register(app)
_slurm.register(app)


@app.command()
def version() -> None:
    """Print rackplane's version."""
    typer.echo(f"rackplane {rackplane.__version__}")


def main() -> None:
    """Console-script entry point."""
    app()
