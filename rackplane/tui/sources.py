"""Where the console's events come from and where its commands go.

A `Source` hands the console the events of one cluster (history first, then new ones as they
arrive) and the rejected input, and sends the operator's commands. Four of them:
- `MemorySource`: a list of events; commands are kept in `sent` (tests, snapshots, benchmarks);
- `EngineSource`: the in-process engine (`rackplane tui --demo`): each command is decided and
  applied at once, the policies react, and the events are delivered as a live log's would be;
- `LiveSource`: a running pipeline over Kafka; commands go to the commands topic exactly as the
  CLI sends them (`Client.send`), keyed by cluster; it gives up on a broker that does not
  answer within `CONNECT_TIMEOUT_S`, naming the address;
- `history_source(path)`: a recorded history (DuckDB file or Parquet folder, read through
  `rackplane.history`); read-only.
The time travel does not depend on the source: the console folds whatever events it is given.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import ValidationError

from rackplane._errtext import named
from rackplane.models import Command, Event, Rejection

if TYPE_CHECKING:
    from rackplane.engine import Engine
    from rackplane.streams.config import StreamConfig

OnEvents = Callable[[list[Event]], None]
OnRejections = Callable[[list[Rejection]], None]
CONNECT_TIMEOUT_S = 8.0
"""How long the live source waits for the broker's first answer before it says it cannot
reach it (the console then shows that in its banner, and tries again)."""


class SourceError(RuntimeError):
    """A source cannot serve: a broker out of reach, a file that is not a history, ..."""


class ReadOnlySource(SourceError):
    """The source takes no commands (a recorded history)."""


class Source(Protocol):
    """What the console needs from the outside world."""

    cluster: str
    description: str
    live: bool
    """True when new events keep arriving (and commands can be sent)."""
    mode: str
    """What the status line calls a live source at its head: LIVE (a broker), DEMO (the
    in-process engine)."""
    connected: bool
    """False until the source reaches what it reads (a broker); the console says so."""

    async def run(self, on_events: OnEvents, on_rejections: OnRejections) -> None:
        """Deliver the history, then (when live) new events until cancelled.

        Raises:
            SourceError: it cannot (or can no longer) serve; the message names where.
        """
        ...

    async def send(self, command: Command) -> Sequence[Event] | None:
        """Send one command; return the events it caused when the source applied it itself
        (the in-process engine), None when it only sent it (they come back on the log).

        Raises:
            SourceError: it cannot be sent.
        """
        ...


class MemorySource:
    """Events from a list; sent commands are kept, in order, in `sent` (and do nothing)."""

    mode = "LIVE"
    """A stand-in for a live log (tests)."""
    connected = True

    def __init__(
        self,
        events: Sequence[Event],
        *,
        cluster: str | None = None,
        rejections: Sequence[Rejection] = (),
        live: bool = True,
        description: str = "in memory",
    ) -> None:
        if cluster is None:
            if not events:
                raise SourceError("no events and no cluster: nothing to show")
            cluster = events[0].cluster
        self.cluster = cluster
        self.events = list(events)
        self.rejections = list(rejections)
        self.live = live
        self.description = description
        self.sent: list[Command] = []
        self._on_events: OnEvents | None = None

    async def run(self, on_events: OnEvents, on_rejections: OnRejections) -> None:
        self._on_events = on_events
        on_events([e for e in self.events if e.cluster == self.cluster])
        if self.rejections:
            on_rejections(self.rejections)

    def push(self, events: Sequence[Event]) -> None:
        """Deliver more events, as a live log would (tests)."""
        self.events.extend(events)
        if self._on_events is not None:
            self._on_events(list(events))

    async def send(self, command: Command) -> Sequence[Event] | None:
        if not self.live:
            raise ReadOnlySource(f"{self.description} is read-only: commands cannot be sent")
        self.sent.append(command)
        return None


class EngineSource(MemorySource):
    """The in-process engine: a command is decided against its state and applied at once, the
    policies react to it, and every event that follows is delivered as from a live log
    (`rackplane tui --demo`: a cordon or a rack fault really happens there and shows).

    Args:
        engine: the engine, at the state `events` fold to.
        events: the events so far (the story the demo starts from).
        description: what the status line says the source is.
    """

    mode = "DEMO"

    def __init__(
        self, engine: Engine, events: Sequence[Event], *, description: str = "in-process engine"
    ) -> None:
        super().__init__(events, cluster=engine.state.cluster, description=description)
        self.engine = engine

    async def send(self, command: Command) -> list[Event]:
        try:
            events = self.engine.handle(command)
        except Exception as err:  # a policy loop, a command for another cluster: said plainly
            raise SourceError(f"the engine could not apply {command.type}: {err}") from err
        self.sent.append(command)
        self.push(events)
        return events


class LiveSource:
    """A running pipeline: tails the events and rejected topics, sends to the commands topic."""

    mode = "LIVE"

    def __init__(
        self,
        broker: str,
        *,
        cluster: str | None,
        prefix: str = "rackplane",
        config: StreamConfig | None = None,
        sign: Callable[[Command], Command] | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        """Args:
        broker: kafka://host:port.
        cluster: the cluster to show (None: the first on the event log).
        prefix: topic prefix.
        config: the full connection settings (security included) when the caller has them;
            `broker` and `prefix` are then taken from it.
        sign: signs each command sent (the operator's key file: `KeyFile.sign`).
        connect_timeout: seconds to wait for the broker's first answer.
        """
        self.sign = sign
        from rackplane.streams.config import StreamConfig

        self.config = config or StreamConfig(broker=broker, prefix=prefix)
        try:
            self.config.bootstrap  # noqa: B018  (validates the URL)
        except ValueError as err:
            raise SourceError(str(err)) from err
        self.cluster = cluster or ""
        self.description = f"{self.config.broker} ({self.config.prefix}.*)"
        self.live = True
        self.connected = False
        self.connect_timeout = connect_timeout
        self._client: object | None = None

    async def first_cluster(self, client: object, timeout: float = 10.0) -> str:
        """The cluster of the first event on the log (when none was named)."""

        async def first() -> str:
            async for event in client.events():  # type: ignore[attr-defined]
                return str(event.cluster)
            raise SourceError("the event log ended")

        try:
            return await asyncio.wait_for(first(), timeout)
        except TimeoutError:
            raise SourceError(
                f"{self.config.broker} answers, but no event on {self.config.topic('events')} "
                f"within {timeout:.0f} s: is the pipeline running? (or pass --cluster)"
            ) from None

    async def run(self, on_events: OnEvents, on_rejections: OnRejections) -> None:
        from rackplane.streams.client import Client

        try:
            async with Client(self.config, connect_timeout=self.connect_timeout) as client:
                self.connected = True
                if not self.cluster:
                    self.cluster = await self.first_cluster(client)
                self._client = client
                try:
                    await asyncio.gather(
                        self._tail(client, "events", on_events),
                        self._tail(client, "rejected", on_rejections),
                    )
                finally:
                    self._client = None
        except (SourceError, asyncio.CancelledError):
            raise
        except Exception as err:  # the client's own error, said plainly
            raise SourceError(f"cannot reach {self.description}: {named(err)}") from err
        finally:
            self.connected = False

    async def _tail(self, client: object, topic: str, deliver: Callable[[list], None]) -> None:  # type: ignore[type-arg]
        from rackplane.models import REJECTIONS
        from rackplane.streams.codec import decode_event
        from rackplane.streams.eventlog import is_marker

        consumer = client.reader(topic)  # type: ignore[attr-defined]
        try:
            await asyncio.wait_for(consumer.start(), self.connect_timeout)
        except TimeoutError:
            await consumer.stop()
            raise SourceError(
                f"cannot reach {self.description}: no answer for {self.config.topic(topic)} "
                f"within {self.connect_timeout:.0f} s"
            ) from None
        key = self.cluster.encode()
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=250, max_records=5_000)
                out: list[object] = []
                for records in batch.values():
                    for r in records:
                        if not r.value or is_marker(r.headers):
                            continue
                        try:
                            if topic == "events":
                                if r.key == key:
                                    event = decode_event(r.value)
                                    if client.trusted(r, event):  # type: ignore[attr-defined]
                                        out.append(event)
                            else:
                                out.append(REJECTIONS.validate_json(r.value))
                        except ValidationError:
                            continue  # the pipeline routes undecodable input to `rejected`
                if out:
                    deliver(out)
        finally:
            await consumer.stop()

    async def send(self, command: Command) -> None:
        """Send to the commands topic; the events it causes come back on the log."""
        client = self._client
        if client is None:
            raise SourceError("not connected to the broker yet")
        if self.sign is not None:
            command = self.sign(command)
        try:
            await client.send(command)  # type: ignore[attr-defined]
        except Exception as err:  # the broker's own error, said plainly
            raise SourceError(f"cannot send to {self.description}: {err}") from err


class HistorySource(MemorySource):
    """A recorded history: its events and rejections, loaded once; read-only."""


def history_source(path: Path, *, cluster: str | None = None) -> HistorySource:
    """Load one cluster's history from a DuckDB file or a Parquet folder.

    Raises:
        SourceError: the path is missing or not a history, or it holds several clusters and
            none was named, or not the one named.
    """
    if not path.exists():
        raise SourceError(f"{path}: no such file or folder")
    try:  # lazily: only --db needs the history package
        history = importlib.import_module("rackplane.history")
    except ImportError as err:
        raise SourceError(f"reading a history needs rackplane.history: {err}") from err
    # Its own errors name the path (a gap: the cluster and the seq too): said as they are.
    said_plainly: type[Exception] = getattr(history, "HistoryError", SourceError)

    try:
        with history.open_history(path) as reader:
            clusters = reader.clusters()
            if cluster is None:
                if len(clusters) != 1:
                    names = ", ".join(clusters) or "none"
                    raise SourceError(f"{path} holds clusters {names}: pick one with --cluster")
                cluster = clusters[0]
            elif cluster not in clusters:
                raise SourceError(
                    f"{path} has no cluster {cluster!r} (it has {', '.join(clusters)})"
                )
            events = reader.events(cluster)
            rejections = reader.rejections(cluster)
    except SourceError:
        raise
    except said_plainly as err:
        raise SourceError(str(err)) from err
    except Exception as err:  # duckdb/parquet errors, said plainly
        raise SourceError(f"{path}: cannot read history: {named(err)}") from err
    return HistorySource(
        events, cluster=cluster, rejections=rejections, live=False, description=f"history {path}"
    )
