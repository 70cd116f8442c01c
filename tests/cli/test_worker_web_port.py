"""`rackplane worker` whose web port is taken: one line naming the port, before the broker.

The views and /metrics used to find the port taken only once the topics and agents were up,
and the worker ended with a 40-line traceback from aiohttp's bind. None of these workers
reaches a broker: kafka://127.0.0.1:9 is a port nothing listens on, so a refusal that names
the web port was made before the brokers were asked anything.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from tests.cli._output import one_error_line

runner = CliRunner()
DEAD_BROKER = ["--broker", "kafka://127.0.0.1:9"]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process listens on (here: this one) on 127.0.0.1."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_taken_web_port_is_refused_in_one_line_naming_it(taken_port: int, tmp_path: Path) -> None:
    args = ["worker", *DEAD_BROKER, "--web-port", str(taken_port), "--data-dir", str(tmp_path)]
    line = one_error_line(runner.invoke(app, args))
    assert line == (
        f"error: --web-port: 127.0.0.1:{taken_port} is in use (another worker's views?): the "
        "worker serves its views and /metrics there; pass a free --web-port (or set web_port)"
    )


def test_a_taken_web_port_from_the_environment_is_refused_the_same_way(
    taken_port: int, tmp_path: Path
) -> None:
    result = runner.invoke(
        app,
        ["worker", *DEAD_BROKER, "--data-dir", str(tmp_path)],
        env={"RACKPLANE_WEB_PORT": str(taken_port)},
    )
    assert f"127.0.0.1:{taken_port} is in use" in one_error_line(result)


def test_a_web_bind_that_is_not_this_machines_is_refused_in_one_line(tmp_path: Path) -> None:
    args = ["worker", *DEAD_BROKER, "--web-bind", "192.0.2.1", "--data-dir", str(tmp_path)]
    result = runner.invoke(app, args, env={"RACKPLANE_WEB_TOKEN": "t" * 40})
    assert "192.0.2.1:6066 is not an address of this machine" in one_error_line(result)


def test_a_free_web_port_lets_the_worker_go_on_to_the_brokers(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port free a moment ago: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    args = ["worker", *DEAD_BROKER, "--web-port", str(free), "--data-dir", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "cannot reach the brokers at kafka://127.0.0.1:9" in line
