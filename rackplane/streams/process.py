"""A pipeline worker run as a child process: start, wait until ready, stop, or kill."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

from rackplane.streams._children import die_with_parent
from rackplane.streams.config import StreamConfig
from rackplane.streams.embedded import free_port

READY = '"event": "worker.ready"'


class WorkerError(RuntimeError):
    """The worker exited or did not become ready."""


class WorkerProcess:
    """`python -m rackplane worker ...` for one `StreamConfig`, its output in a log file."""

    def __init__(
        self,
        config: StreamConfig,
        *,
        log_path: Path | None = None,
        data_dir: Path | None = None,
        web_port: int | None = None,
        loglevel: str = "warning",
    ) -> None:
        self.config = config
        self.web_port = web_port or free_port()
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="rackplane-worker-"))
        self.log_path = log_path or self.data_dir / "worker.log"
        self.loglevel = loglevel
        self.process: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def argv(self) -> list[str]:
        c = self.config
        args = [
            sys.executable, "-m", "rackplane", "worker",
            "--broker", c.broker,
            "--prefix", c.prefix,
            "--partitions", str(c.partitions),
            "--app-id", c.app_id,
            "--web-port", str(self.web_port),
            "--data-dir", str(self.data_dir / "faust"),
            "--policies", ",".join(c.policies),
            "--log-level", self.loglevel,
            "--max-message-bytes", str(c.max_message_bytes),
            "--max-event-bytes", str(c.max_event_bytes),
            "--outage-limit", str(c.outage_limit),
            "--checkpoint-every", str(c.checkpoint_every),
            "--fetch-wait-ms", str(c.fetch_wait_ms),
        ]  # fmt: skip
        if c.seen_window is not None:
            args += ["--seen-window", str(c.seen_window)]
        if c.allow_finite_retention:
            args.append("--allow-finite-retention")
        if c.exactly_once:
            args.append("--exactly-once")
        if not c.gpu_manager:
            args.append("--no-gpu-manager")
        if not c.projections:
            args.append("--no-projections")
        if c.audit_dir:
            args += ["--audit-dir", c.audit_dir]
        if c.db:
            args += ["--db", c.db]
        if c.worker_key_file:
            args += ["--worker-key-file", c.worker_key_file]
        for key in c.log_keys:
            args += ["--log-key", key]
        if c.unsigned_log_prefix:
            args.append("--unsigned-log-prefix")
        return args

    def start(self, *, ready_timeout: float = 90.0) -> Self:
        """Start the worker and wait until it has its partitions."""
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            env = None
            if self.config.web_token is not None:  # a secret: the environment, not argv
                env = {**os.environ, "RACKPLANE_WEB_TOKEN": self.config.web_token}
            self.process = subprocess.Popen(
                self.argv(),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self.wait_ready(ready_timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        """Block until the worker says it is ready (its partitions are assigned)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if READY in self.log_text():
                return
            if self.process is None or self.process.poll() is not None:
                raise WorkerError(f"worker exited before it was ready:\n{self.log_tail()}")
            time.sleep(0.1)
        raise WorkerError(f"worker not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def log_text(self) -> str:
        """What this run of the worker wrote so far."""
        with self.log_path.open("rb") as f:
            f.seek(self._log_offset)
            return f.read().decode("utf-8", "replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    @property
    def pid(self) -> int:
        """The worker's process id. Raises WorkerError when it is not running."""
        if self.process is None:
            raise WorkerError("the worker is not started")
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker's whole process group: a crash, nothing flushed."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after `timeout`. Idempotent."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
