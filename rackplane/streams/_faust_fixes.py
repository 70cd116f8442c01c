"""Adjustments to faust-streaming's Kafka driver, in one place, each with its reason.

Fetch wait: Faust hard-codes `fetch_max_wait_ms=1500` for worker consumers. Tansu answers a
fetch only when the wait runs out if nothing was there when it arrived (no early wake-up), so
every hop through the pipeline cost ~0.75 s on average (seen: 0.7-1.7 s per command). The
worker's consumer takes the app's `StreamConfig.fetch_wait_ms` instead (set by `use_fetch_wait`);
on Apache Kafka, fetches return as soon as data arrives either way.

Start-up spinner: at log level WARNING and above, Faust's worker draws a progress spinner
that turns on every log record, and to see them all it sets the root logger to DEBUG, for
good: every `log.debug` of aiokafka, mode and Faust then builds a record that no handler
prints (aiokafka's producer logs one per message sent: 10,220 records in a 22 s profile of
the latency benchmark), and the worker's log file fills with terminal escape codes.
`without_spinner` turns it off, so the root logger keeps the configured level.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as driver

DEFAULT_FETCH_WAIT_MS = 20
_PATCHED = "_rackplane_fetch_wait"
_APP_ATTR = "_rackplane_fetch_wait_ms"


def use_fetch_wait(app: Any, fetch_wait_ms: int) -> None:
    """Give the worker consumers of `app` this fetch wait (installs the patch if needed)."""
    apply()
    setattr(app, _APP_ATTR, fetch_wait_ms)


def without_spinner(worker: Any) -> None:
    """Turn off the start-up spinner of a `faust.Worker` (before it runs)."""
    worker.spinner = None


def apply() -> None:
    """Install the adjustments (idempotent)."""
    thread = driver.AIOKafkaConsumerThread
    if getattr(thread, _PATCHED, False):
        return
    original = thread._create_worker_consumer

    def create(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = getattr(self.app, _APP_ATTR, DEFAULT_FETCH_WAIT_MS)
        return consumer

    thread._create_worker_consumer = create  # type: ignore[method-assign]
    setattr(thread, _PATCHED, True)
