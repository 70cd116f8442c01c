"""A worker under a supervisor: restarted whenever it exits, as Kubernetes would.

An exited worker is not a failure by itself (issue 15 asks loops that cannot recover to exit
so that a supervisor restarts them); a lost or doubled decision is, and `_check` looks for
those. The supervisor counts what it saw: exits (with their status), restarts, and the kills
a case asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import resource
import signal
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackplane.streams.config import StreamConfig
from rackplane.streams.process import WorkerError, WorkerProcess

READY_TIMEOUT = 60.0
BACKOFF = 1.0
FIRST_START_TRIES = 3


@dataclass
class Supervised:
    """What happened to one supervised worker."""

    exits: list[int] = field(default_factory=list)
    """Exit statuses of the exits the supervisor saw (not the kills it was asked for)."""
    restarts: int = 0
    kills: int = 0
    not_ready: int = 0
    """Starts that did not print `worker.ready` in time (the process kept running)."""


class Supervisor:
    """Starts a `WorkerProcess` and keeps it running until `stop()`."""

    def __init__(self, config: StreamConfig, data_dir: Path, *, name: str = "worker") -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.config = config
        self.worker = WorkerProcess(config, data_dir=data_dir, loglevel="warning")
        self.seen = Supervised()
        self.fsize_limit: int | None = None
        """While set, every worker process gets this RLIMIT_FSIZE soft limit (a full disk)."""
        self._task: asyncio.Task[None] | None = None
        self._held = False
        self._starting = False

    @property
    def web(self) -> str:
        return f"http://127.0.0.1:{self.worker.web_port}"

    async def start(self) -> Supervisor:
        """Start the worker, wait until it is ready, and watch it from then on.

        Raises:
            AssertionError: it exited before it was ready `FIRST_START_TRIES` times.
        """
        await self._start(tries=FIRST_START_TRIES)
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def stop(self) -> None:
        """Stop watching and stop the worker (SIGTERM, then SIGKILL)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while self._starting:
            await asyncio.sleep(0.1)
        await asyncio.to_thread(self.worker.stop)

    async def kill(self) -> None:
        """SIGKILL the worker wherever it is (starting, rebuilding, deciding): a crash. The
        supervisor restarts it."""
        while self.worker.process is None:
            await asyncio.sleep(0.01)
        self.worker.kill()
        self.seen.kills += 1

    def dump_stacks(self) -> None:
        """Have the running worker write where its tasks wait to its log (SIGUSR1:
        `rackplane.streams._tasks_dump`)."""
        process = self.worker.process
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGUSR1)

    @contextlib.asynccontextmanager
    async def held(self) -> Any:
        """Stop the worker cleanly and keep it stopped inside the block; start it after."""
        self._held = True
        while self._starting:
            await asyncio.sleep(0.1)
        await asyncio.to_thread(self.worker.stop)
        try:
            yield
        finally:
            self._held = False
            await self._start()

    async def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until the worker runs and said it is ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._starting and self.worker.running and self.ready:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} not ready in {timeout:.0f} s:\n{self.log_tail()}")

    @property
    def ready(self) -> bool:
        return '"event": "worker.ready"' in self.worker.log_text()

    def log_tail(self, lines: int = 40) -> str:
        return self.worker.log_tail(lines)

    def apply_fsize_limit(self) -> None:
        """Give the running worker the current RLIMIT_FSIZE soft limit (or lift it)."""
        process = self.worker.process
        if process is None or process.poll() is not None:
            return
        _, hard = resource.prlimit(process.pid, resource.RLIMIT_FSIZE)
        soft = resource.RLIM_INFINITY if self.fsize_limit is None else self.fsize_limit
        with contextlib.suppress(ProcessLookupError):
            resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (soft, hard))

    async def _start(self, tries: int | None = None) -> None:
        self._starting = True
        try:
            for _ in itertools.count() if tries is None else range(tries):
                thread = asyncio.to_thread(self.worker.start, ready_timeout=READY_TIMEOUT)
                starting = asyncio.ensure_future(thread)
                # A full disk applies to a worker started during it: as soon as its pid exists
                # (long before it opens any file: the interpreter still imports).
                while self.fsize_limit is not None and not starting.done():
                    self.apply_fsize_limit()
                    await asyncio.sleep(0.02)
                try:
                    await starting
                    return
                except WorkerError:
                    if self.worker.running:  # alive, just slow to say ready: keep it
                        self.seen.not_ready += 1
                        return
                    exited = self.worker.process  # None: killed while starting
                    if exited is not None:
                        status = exited.returncode
                        self.seen.exits.append(-1 if status is None else status)
                        self.worker.process = None
                    self.seen.restarts += 1
                    await asyncio.sleep(BACKOFF if exited is not None else 0.0)
            raise AssertionError(
                f"{self.name} exited before it was ready {tries} times:\n{self.log_tail()}"
            )
        finally:
            self._starting = False

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            if self._held or self._starting:
                continue
            process = self.worker.process
            if process is not None and process.poll() is None:
                continue
            if process is not None:  # it exited by itself (a kill sets process to None)
                self.seen.exits.append(process.returncode)
                self.worker.process = None
            self.seen.restarts += 1
            await self._start()


def get_json(url: str, timeout: float = 10.0) -> tuple[int, Any]:
    """(status, parsed body) of a GET; (0, error text) when the worker does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, None
    except (OSError, ValueError) as err:
        return 0, str(err)


def get_text(url: str, timeout: float = 10.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return str(r.read().decode())
    except (OSError, ValueError):
        return None


METRIC_CLUSTER = re.compile(r'cluster="([^"]*)"')


def metric_clusters(text: str) -> set[str]:
    """Cluster labels on `/metrics`."""
    return set(METRIC_CLUSTER.findall(text))
