"""A workload adapter (`rackplane kube`, `rackplane slurm`) as a process of a test's own: in
its own session (killed with everything it started), its output in `adapter-<n>.log`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


class AdapterProcess:
    """Starts, kills and stops one adapter; `log()` is the tail of every start's output."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, *args: str) -> None:
        """`python -m rackplane ARGS`."""
        self.starts += 1
        out = (self.tmp / f"adapter-{self.starts}.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rackplane", *args],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process = None

    def log(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-6000:] for p in sorted(self.tmp.glob("adapter-*.log"))
        )
