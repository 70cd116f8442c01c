"""Keep the worker's log readable while the broker is away.

aiokafka logs every failed connection, fetch, metadata refresh and produce retry, at ERROR or
WARNING, every 100 ms per client: a 30 s Kafka outage wrote 13,000 lines into a worker's log,
burying the few lines rackplane itself writes (`appending events failed ...`, `... works
again after N s`). `quiet_kafka_clients` puts a filter on aiokafka's loggers that lets the
first record of each kind (logger, level, message template) through, then holds the same
kind back for `window` seconds and says how many it held when the next one comes through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

AIOKAFKA_LOGGERS = (
    "aiokafka",
    "aiokafka.admin.client",
    "aiokafka.client",
    "aiokafka.cluster",
    "aiokafka.conn",
    "aiokafka.consumer.consumer",
    "aiokafka.consumer.fetcher",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.consumer.subscription_state",
    "aiokafka.producer.producer",
    "aiokafka.producer.sender",
)
WINDOW_S = 30.0


class RateLimit(logging.Filter):
    """Let one record of a kind through per `window` seconds (see the module docstring)."""

    def __init__(self, window: float = WINDOW_S, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.window = window
        self.clock = clock
        self._last: dict[tuple[str, int, str], float] = {}
        self._held: dict[tuple[str, int, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.window:
            self._held[kind] = self._held.get(kind, 0) + 1
            return False
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        if held and last is not None:
            record.msg = f"{record.msg} ({held} more like it in the last {now - last:.0f} s)"
        return True


def quiet_kafka_clients(window: float = WINDOW_S) -> RateLimit:
    """Install one `RateLimit` on every aiokafka logger (idempotent); return it."""
    for f in logging.getLogger(AIOKAFKA_LOGGERS[0]).filters:
        if isinstance(f, RateLimit):
            return f
    limit = RateLimit(window)
    for name in AIOKAFKA_LOGGERS:
        logging.getLogger(name).addFilter(limit)
    return limit
