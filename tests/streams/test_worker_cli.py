"""`rackplane worker` refuses what cannot work, with a message that says why."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.projections import initial_state
from rackplane.projections.state import SEEN_COMMANDS_WINDOW
from rackplane.streams import EmbeddedBroker, free_port
from rackplane.streams.config import StreamConfig
from rackplane.streams.process import WorkerProcess

runner = CliRunner()


def test_exactly_once_on_a_broker_without_transactions_is_refused_clearly() -> None:
    with EmbeddedBroker() as tansu:  # Tansu has no transactions (STACK_NOTES)
        result = runner.invoke(app, ["worker", "--broker", tansu.url, "--exactly-once"])
    assert result.exit_code == 2
    assert "needs Kafka transactions" in result.stderr
    assert "Traceback" not in result.output


def test_a_broker_url_without_the_kafka_scheme_is_refused() -> None:
    result = runner.invoke(app, ["worker", "--broker", "localhost:9092"])
    assert result.exit_code == 2
    assert "expected kafka://host:port" in result.stderr


def test_an_unknown_policy_is_refused() -> None:
    result = runner.invoke(app, ["worker", "--policies", "tas,magic"])
    assert result.exit_code == 2
    assert "magic" in result.stderr


def test_the_dedupe_window_reaches_the_worker_command_line_and_stays_out_of_help(
    tmp_path: Path,
) -> None:
    argv = WorkerProcess(StreamConfig(seen_window=7), data_dir=tmp_path).argv()
    assert argv[argv.index("--seen-window") + 1] == "7"
    assert "--seen-window" not in WorkerProcess(StreamConfig(), data_dir=tmp_path).argv()
    assert "--seen-window" not in runner.invoke(app, ["worker", "--help"]).output


def test_a_fresh_state_takes_the_dedupe_window_it_is_given() -> None:
    assert initial_state("c1", seen_window=3).seen.window == 3
    assert initial_state("c1").seen.window == SEEN_COMMANDS_WINDOW


def test_the_worker_says_in_one_line_that_it_cannot_reach_the_brokers(
    tmp_path: Path,
) -> None:
    argv = ["worker", "--broker", "kafka://127.0.0.1:1", "--data-dir", str(tmp_path)]
    # a free web port: the worker checks its port before the brokers (6066 may be taken)
    result = runner.invoke(app, [*argv, "--web-port", str(free_port())])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    (line,) = [x for x in result.stderr.strip().splitlines() if x.startswith("error:")]
    assert "cannot reach the brokers at kafka://127.0.0.1:1" in line
