"""One fault case from set-up to verdict: topics, supervised workers, load, follower, check.

async with FaultCase("broker-killed", broker, tmp_path, report_dir) as case:
    await case.start_load()
    ...                                  # the fault, under load
    verdict = await case.finish()        # stop the load, settle, check, report
assert not verdict.problems, verdict.describe()
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

from rackplane.keyfiles import KeyFile
from rackplane.logtrust import LogTrust
from rackplane.streams.config import StreamConfig
from tests.faults._check import Verdict, check_all
from tests.faults._load import Follower, Load, Sender, Sent
from tests.faults._topics import create_topics
from tests.faults._worker import Supervisor
from tests.faults.conftest import FaultBroker

REGISTER_TIMEOUT = 60.0


class FaultCase:
    """Everything one case runs; `__aexit__` stops all of it, also when the case failed."""

    def __init__(
        self,
        name: str,
        broker: FaultBroker,
        tmp: Path,
        report_dir: Path,
        *,
        clusters: int = 3,
        workers: int = 1,
        db: bool = True,
        create: bool = True,
        events_topic: dict[str, str] | None = None,
        commands_topic: dict[str, str] | None = None,
        rate: float = 40.0,
        reserved: tuple[tuple[int, str], ...] = (),
        signed: bool = False,
        **config: Any,
    ) -> None:
        """`signed`: the worker has a key (it signs every event and checkpoint, and its
        readers take only what it signed); the check then wants every event signed."""
        tag = uuid.uuid4().hex[:6]
        self.name = f"{name}-{broker.kind}"
        self.broker = broker
        self.tmp = tmp
        self.report_dir = report_dir
        self.db = tmp / "history.duckdb" if db else None
        prefix = f"f{tag}"
        fields: dict[str, Any] = {"partitions": 2, **config}
        if self.db is not None:
            fields["db"] = str(self.db)
        self.trust: LogTrust | None = None
        if signed:
            key = KeyFile.new("worker:faults")
            key.save(tmp / "worker.key")
            fields["worker_key_file"] = str(tmp / "worker.key")
            self.trust = LogTrust.of([key.public_key])
        self.config = StreamConfig(broker=broker.url, prefix=prefix, app_id=prefix, **fields)
        self.create = create
        self.events_topic = events_topic
        self.commands_topic = commands_topic
        self.clusters = [f"c{tag}-{i}" for i in range(clusters)]
        # One DuckDB file has one writer: with two workers each records its own history.
        self.supervisors = [
            Supervisor(
                self.config
                if workers == 1 or self.db is None
                else dataclasses.replace(self.config, db=str(tmp / f"history{i}.duckdb")),
                tmp / f"worker{i}",
                name=f"worker{i}",
            )
            for i in range(workers)
        ]
        self.sender = Sender(self.config)
        self.follower = Follower(self.config)
        self.load = Load(
            self.sender,
            self.clusters,
            rate=rate,
            reserved=[(self.clusters[i], n) for i, n in reserved],
        )
        self.verdict = Verdict(self.name)
        self.started = time.monotonic()
        self._stop_load = asyncio.Event()
        self._load_task: asyncio.Task[None] | None = None
        self._load_started: float | None = None

    @property
    def worker(self) -> Supervisor:
        return self.supervisors[0]

    async def __aenter__(self) -> FaultCase:
        if self.create:
            await create_topics(self.config, events=self.events_topic, commands=self.commands_topic)
        await self.sender.__aenter__()
        if not self.create:
            # The worker makes the topics: nothing of the case may touch them before (a
            # consumer's metadata request auto-creates a topic, with the broker's defaults).
            await asyncio.gather(*(s.start() for s in self.supervisors))
            self.follower.start()
            return self
        self.follower.start()
        await asyncio.gather(*(s.start() for s in self.supervisors))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop_load.set()
        if self._load_task is not None:
            await asyncio.gather(self._load_task, return_exceptions=True)
        await self.follower.stop()
        await self.sender.__aexit__()
        await asyncio.gather(*(s.stop() for s in self.supervisors))

    async def register(self) -> None:
        """Register every cluster and wait until each registration is decided."""
        sent = self.load.register()
        deadline = time.monotonic() + REGISTER_TIMEOUT
        while not all(self.follower.decided(s) is not None for s in sent):
            if time.monotonic() > deadline:
                logs = "\n".join(w.log_tail(20) for w in self.supervisors)
                waited = f"{REGISTER_TIMEOUT:.0f} s"
                raise AssertionError(f"registrations not decided in {waited}:\n{logs}")
            await asyncio.sleep(0.1)

    async def start_load(self, *, register: bool = True) -> None:
        """Register the clusters (unless told not to) and start the load."""
        if register:
            await self.register()
        self._load_started = time.monotonic()
        self._load_task = asyncio.get_running_loop().create_task(self.load.run(self._stop_load))

    async def stop_load(self) -> None:
        self._stop_load.set()
        if self._load_task is not None:
            await self._load_task
            if self._load_started is not None:
                seconds = time.monotonic() - self._load_started
                self.verdict.facts["load_s"] = round(seconds, 1)
                self.verdict.facts["load_commands_per_s"] = round(self.load.commands / seconds, 1)
            self._load_task = None

    async def finish(self, *, probe: bool = True) -> Verdict:
        """Stop the load, let the log settle, check everything, write the report."""
        await self.stop_load()
        await self.sender.drain()
        bounds: dict[str, float] = {}
        if probe:
            outcome = await self.settle()
            self.load.probes()
            await self.sender.drain()
            if outcome != "settled":  # already waited once for what is lost or looping
                bounds = {"stall": 10.0, "timeout": 30.0}
        await self.settle(**bounds)
        v = await check_all(
            self.name,
            self.config,
            sent=self.sender.sent,
            clusters=set(self.clusters),
            workers=self.supervisors,
            stop_workers=self.stop_workers,
            dbs=[Path(s.config.db) for s in self.supervisors if s.config.db],
            v=self.verdict,
            trust=self.trust,
        )
        v.counts["commands_sent_by_load"] = self.load.commands
        v.counts["samples_sent_by_load"] = self.load.samples
        v.facts["broker"] = self.broker.kind
        v.facts["wall_s"] = round(time.monotonic() - self.started, 1)
        v.write(self.report_dir)
        return v

    async def settle(self, **kwargs: Any) -> str:
        """Wait until the log is quiet (`Follower.settle`); returns how it ended."""
        outcome = await self.follower.settle(self.sender.sent, **kwargs)
        self.verdict.facts.setdefault("settles", []).append(outcome)
        if outcome["settle"] != "settled":
            for s in self.supervisors:  # what they wait on, into their logs
                s.dump_stacks()
            await asyncio.sleep(1.0)
        return str(outcome["settle"])

    async def stop_workers(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.supervisors))

    def fault(self, what: str, **details: Any) -> None:
        """Note a fault injected (counted, with when it happened)."""
        self.verdict.counts["faults_injected"] += 1
        at = round(time.monotonic() - self.started, 1)
        self.verdict.facts.setdefault("faults", []).append({"what": what, "at_s": at, **details})

    def with_config(self, **changes: Any) -> StreamConfig:
        return dataclasses.replace(self.config, **changes)

    def sent(self, topic: str) -> list[Sent]:
        return [s for s in self.sender.sent if s.topic == topic]
