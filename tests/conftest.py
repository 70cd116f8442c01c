"""Fixtures shared by every test directory: the broker the broker tiers run against.

`RACKPLANE_TEST_BROKER=kafka://host:port` (set by `scripts/kafka/kafka_server.py run`) points
the broker tiers at that broker; without it one embedded Tansu broker serves the session.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings

from rackplane.streams import EmbeddedBroker

# Hypothesis' deadline and its too_slow health check time each example: on a shared two-core
# machine (CI, or a developer's while other work runs) they fail tests that assert nothing wrong.
# Tests here assert behaviour, never time (benchmarks measure it: bench/).
settings.register_profile("rackplane", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rackplane")

# pytest-xdist's workers run with COLUMNS=80 and LINES=24 in their environment, and a Rich
# console made at import (the CLI's) keeps the width it found then, whatever a test's CliRunner
# sets later: drop them, so a worker renders as a serial run does.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

ENV_VAR = "RACKPLANE_TEST_BROKER"

# Consumer-group joins wait about half the session timeout on Tansu (STACK_NOTES.md), and a
# member that replaces another waits out the old one's session there (Tansu's first group
# generation is 0, for which aiokafka sends no LeaveGroup). 6 s is the smallest session timeout
# Apache Kafka accepts by default (group.min.session.timeout.ms).
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 1_000


@dataclass(frozen=True)
class BrokerUnderTest:
    """Where the suite's broker listens and what it is (`tansu`, or `external` from the URL)."""

    bootstrap: str
    kind: str


def _bootstrap_from_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme != "kafka" or not rest:
        raise pytest.UsageError(f"{ENV_VAR}={url!r}: expected kafka://host:port[,host:port]")
    return rest.rstrip("/")


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerUnderTest]:
    """The broker under test: `$RACKPLANE_TEST_BROKER`, else an embedded Tansu."""
    url = os.environ.get(ENV_VAR)
    if url:
        yield BrokerUnderTest(bootstrap=_bootstrap_from_url(url), kind="external")
        return
    with EmbeddedBroker() as embedded:
        yield BrokerUnderTest(bootstrap=embedded.bootstrap, kind="tansu")


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """The root logger's handlers and level as they were before each test. A command run
    in-process that sets up logging (`log_to_stderr`: `basicConfig(force=True)`) leaves a
    handler on the test's captured stream, closed once the test ends; a later test's log
    record then fails in it ("--- Logging error ---" on stderr, which the CLI tests read)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
