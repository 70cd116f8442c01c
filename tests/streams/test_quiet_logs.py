"""The Kafka client's retries during an outage do not bury the worker's own log lines."""

from __future__ import annotations

import logging

import pytest

from rackplane.streams._quiet import RateLimit


def test_a_repeated_client_error_is_said_once_per_window_with_how_many_were_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    limit = RateLimit(window=30.0, clock=lambda: now[0])
    logger = logging.getLogger("aiokafka.test.quiet")
    logger.addFilter(limit)
    try:
        with caplog.at_level(logging.WARNING, logger="aiokafka.test.quiet"):
            for _ in range(300):  # 30 s of a retry every 100 ms
                logger.error("Unable connect to node with id %s", 1)
                now[0] += 0.1
            logger.warning("Heartbeat failed")  # another kind: through at once
            now[0] += 1.0
            logger.error("Unable connect to node with id %s", 1)
    finally:
        logger.removeFilter(limit)
    assert [r.getMessage() for r in caplog.records] == [
        "Unable connect to node with id 1",
        "Heartbeat failed",
        "Unable connect to node with id 1 (299 more like it in the last 31 s)",
    ]
