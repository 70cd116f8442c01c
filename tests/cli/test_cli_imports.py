"""What `rackplane` loads before it runs a command: every command pays for it.

The live read commands and `submit` must answer within a second on a 128-rack cluster, and
importing the CLI was most of that. These are behaviour tests, not timings: they name the
heavy packages that must stay out of the CLI's start and out of the read and submit paths.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from rackplane.cli import _defaults

# numpy: rackplane.sim and the history; duckdb: the history; faust: the worker; textual: the
# console; matplotlib: the plots; networkx: the fabric graph, built only by commands that place.
HEAVY = ("numpy", "duckdb", "faust", "mode", "textual", "matplotlib", "networkx")
# The core packages a read or a submit has no use for (the sim loads numpy; policies, engine
# and importers are rules and parsers the worker and the planning commands use).
UNNEEDED_CORE = ("rackplane.sim", "rackplane.policies", "rackplane.engine", "rackplane.importers")


def _loaded_after(*modules: str) -> set[str]:
    """The top-level packages and rackplane packages in a fresh interpreter after importing
    `modules`."""
    code = (
        "import json, sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    names = json.loads(out.stdout)
    return {n.split(".")[0] for n in names} | {
        ".".join(n.split(".")[:2]) for n in names if n.startswith("rackplane.")
    }


def test_starting_the_cli_loads_no_heavy_package() -> None:
    loaded = _loaded_after("rackplane.cli")
    assert sorted(loaded & {*HEAVY, *UNNEEDED_CORE}) == []


@pytest.mark.parametrize(
    "modules",
    [
        pytest.param(
            (
                "rackplane.cli",
                "rackplane.streams.live",
                "rackplane.streams.projection_agent",
                "rackplane.timeline",
            ),
            id="the read commands (status, jobs, job, racks, rack)",
        ),
        pytest.param(("rackplane.cli", "rackplane.streams.client"), id="submit and the client"),
    ],
)
def test_a_read_or_a_submit_loads_no_heavy_package(modules: tuple[str, ...]) -> None:
    loaded = _loaded_after(*modules)
    assert sorted(loaded & {*HEAVY, *UNNEEDED_CORE}) == []


def test_a_client_printing_events_does_not_load_the_fold() -> None:
    code = (
        "import json, sys\n"
        "import rackplane.cli._client, rackplane.streams.client, rackplane.timeline\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('rackplane.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert sorted(loaded & {"rackplane.projections", "rackplane.projections.evolve"}) == []


def test_the_fold_is_the_function_however_its_module_was_first_imported() -> None:
    """`evolve` names a module and its function: the package must give the function (a lazy
    package init once gave the module to code that imported the module first)."""
    code = (
        "import rackplane.projections.evolve\n"
        "from rackplane.projections import evolve\n"
        "print(callable(evolve) and evolve.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "rackplane.projections.evolve"


def test_the_defaults_the_help_names_are_the_cores() -> None:
    from rackplane.importers import POD_LABEL, SUPERPOD_LABEL
    from rackplane.policies import PRESETS
    from rackplane.sim import DEFAULT_SLICE_SIZES

    assert _defaults.DEFAULT_SLICE_SIZES == DEFAULT_SLICE_SIZES
    assert _defaults.PRESETS == PRESETS
    assert (_defaults.POD_LABEL, _defaults.SUPERPOD_LABEL) == (POD_LABEL, SUPERPOD_LABEL)


def test_the_cyclic_collector_runs_again_once_the_cli_is_imported() -> None:
    code = "import gc, rackplane.cli; print(gc.isenabled())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def _command_names(app: Any) -> set[str]:
    import typer.main

    group = typer.main.get_command(app)
    return set(group.commands)  # type: ignore[attr-defined]


def test_each_command_the_table_names_is_registered_by_its_module_alone() -> None:
    from rackplane import cli

    by_module: dict[str, set[str]] = {}
    for command, module in cli._ONE_MODULE.items():
        by_module.setdefault(module, set()).add(command)
    for module, commands in by_module.items():
        assert _command_names(cli.build((module,), everything=False)) == commands, module


def test_a_command_run_by_name_is_the_only_one_built_and_keeps_its_name() -> None:
    from rackplane import cli

    for command, module in cli._ONE_MODULE.items():
        app = cli.build((module,), everything=False, only=command)
        assert _command_names(app) == {command}, command


def test_every_command_of_the_command_modules_is_in_the_table() -> None:
    from rackplane import cli

    own = _command_names(cli.build((), everything=True))
    assert _command_names(cli.app) - own == set(cli._ONE_MODULE)


def test_running_a_command_loads_only_its_module() -> None:
    code = (
        "import json, sys\n"
        "sys.argv = ['rackplane', 'submit', '--help']\n"
        "import rackplane.cli as cli\n"
        "cli.leave = sys.exit  # not os._exit: this process goes on to print what it loaded\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    names = set(json.loads(out.stdout.splitlines()[-1]))
    assert "Usage: rackplane submit" in out.stdout
    assert "rackplane.cli._client" in names
    others = {f"rackplane.cli.{m}" for m in ("_sim", "_tui", "_history", "_up", "_kube", "_demo")}
    assert sorted(names & others) == []


_PLUGINS_SEEN = (
    "import os, sys\n"
    "sys.argv = ['rackplane', 'version']\n"
    "from rackplane.cli import main\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "from pydantic.plugin._loader import get_plugins\n"
    "print(repr(os.environ.get('PYDANTIC_DISABLE_PLUGINS')), get_plugins() == ())\n"
)


@pytest.mark.parametrize(
    ("given", "seen"),
    [
        pytest.param(None, "'__all__' True", id="unset: the command line skips the look"),
        pytest.param("", "'' False", id="set empty by the user: plugins are looked up"),
    ],
)
def test_the_command_line_skips_pydantic_plugins_unless_told(given: str | None, seen: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if given is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = given
    out = subprocess.run(
        [sys.executable, "-c", _PLUGINS_SEEN], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.splitlines()[-1] == seen


def test_importing_the_cli_leaves_pydantic_plugins_alone() -> None:
    code = "import os, rackplane.cli\nprint(repr(os.environ.get('PYDANTIC_DISABLE_PLUGINS')))"
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "None"


def test_what_the_start_built_is_frozen_before_the_command_runs() -> None:
    """The collector's walks leave the start's objects alone (`gc.freeze` in `main`): the
    command itself sees a frozen heap holding the CLI and its models."""
    code = (
        "import gc, sys\n"
        "sys.argv = ['rackplane', 'submit', '--help']\n"
        "import rackplane.cli as cli\n"
        "def leave(code):\n"
        "    print('frozen', gc.get_freeze_count())\n"
        "    sys.exit(code)\n"
        "cli.leave = leave\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    frozen = int(out.stdout.splitlines()[-1].removeprefix("frozen "))
    assert frozen > 50_000, frozen  # the modules, typer's command and the pydantic models (~72,000)
