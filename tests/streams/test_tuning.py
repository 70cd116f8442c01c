"""The worker's latency knobs: the fetch wait setting reaches every consumer; the heap settles.

No broker needed: consumers are built, never started.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from rackplane.config import load_settings
from rackplane.streams import _heap
from rackplane.streams._deliveries import CatchUp
from rackplane.streams._following import FollowerCatchUp
from rackplane.streams.agents import Ticker
from rackplane.streams.app import TELEMETRY_FETCH_WAIT_MS, create_app
from rackplane.streams.client import Client
from rackplane.streams.config import StreamConfig
from rackplane.streams.eventlog import EventLog
from rackplane.streams.process import WorkerProcess
from rackplane.streams.telemetry_loop import TelemetryLoop

WANT_WAIT = 7


def test_the_fetch_wait_comes_from_the_settings_and_reaches_the_worker_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().settings.stream_config().fetch_wait_ms == 20  # the default
    monkeypatch.setenv("RACKPLANE_FETCH_WAIT_MS", str(WANT_WAIT))
    config = load_settings().settings.stream_config()
    assert config.fetch_wait_ms == WANT_WAIT
    argv = WorkerProcess(config).argv()
    assert argv[argv.index("--fetch-wait-ms") + 1] == str(WANT_WAIT)


@pytest.mark.parametrize("wait", [WANT_WAIT, 300])
async def test_every_consumer_of_the_worker_and_the_client_waits_as_configured(wait: int) -> None:
    config = StreamConfig(
        broker="kafka://127.0.0.1:1", prefix="tuning", app_id="tuning", fetch_wait_ms=wait
    )
    app = create_app(config)
    built = [app.consumer._thread._create_worker_consumer(app.transport)]  # Faust's agents
    built.append(EventLog(config.kafka_options(), "tuning.events", fetch_wait_ms=wait).reader())
    built.append(Client(config).reader("events"))
    loops = [
        loop for child in app._children for loop in getattr(child, "loops", ()) if child
    ]  # the loops started with the app: the catch-ups of the controller and the followers,
    # the policies' ticker (it reads nothing: no consumer), the telemetry loop
    assert [type(loop) for loop in loops] == [CatchUp, FollowerCatchUp, Ticker, TelemetryLoop]
    controller = loops[0].read_and_decide.__self__  # type: ignore[attr-defined]
    built.append(controller.reader.consumer())  # what the consumer skipped, read back
    built.append(loops[1].reader.consumer())  # the same for the followers of the events
    built.append(loops[3].consumer())
    # Telemetry needs no millisecond latency: its loop never waits less than the floor.
    want_telemetry = max(wait, TELEMETRY_FETCH_WAIT_MS)
    try:
        assert [c._fetch_max_wait_ms for c in built] == [*[wait] * 5, want_telemetry]
    finally:
        for c in built:
            await c.stop()


class _Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Give the objects a test froze back to the collector."""
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_settling_frees_cyclic_garbage_first_and_freezes_what_lives() -> None:
    garbage = _Cycle()
    dead = weakref.ref(garbage)
    del garbage
    alive: Any = _Cycle()
    frozen = _heap.settle(collect=True)
    assert dead() is None, "cyclic garbage was collected, not frozen"
    assert frozen == gc.get_freeze_count() > 0
    assert not any(o is alive for o in gc.get_objects()), "alive is frozen"
