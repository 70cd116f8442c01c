"""An exception as one line: its type named once (`rackplane._errtext.named`)."""

from __future__ import annotations

from aiokafka.errors import KafkaConnectionError

from rackplane._errtext import named


def test_a_message_that_names_its_type_is_not_prefixed_again() -> None:
    err = KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1)]")
    assert str(err).startswith("KafkaConnectionError")  # aiokafka's own format
    assert named(err) == "KafkaConnectionError: Unable to bootstrap from [('127.0.0.1', 1)]"


def test_other_errors_get_their_type_and_an_empty_message_is_the_type() -> None:
    assert named(ValueError("bad")) == "ValueError: bad"
    assert named(TimeoutError()) == "TimeoutError"
