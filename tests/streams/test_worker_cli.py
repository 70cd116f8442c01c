"""`rackplane worker` refuses what cannot work, with a message that says why."""

from __future__ import annotations

from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.streams import EmbeddedBroker

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
