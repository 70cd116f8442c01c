"""What an operator waits for: whole `rackplane` commands on a live `rackplane up`.

Starts `rackplane up --headless --tansu` (or `--kafka`) on the 128-rack example cluster (the
broker, a worker and the demo load placing and finishing jobs), waits until the cluster is
registered and runs jobs, then runs each command `runs` times as its own process, the way an
operator types it: the live reads (`status`, `jobs`, `job`, `racks`, `rack`) and `submit` of a
16-node job, `--no-wait` (the events the command caused directly) and with the chain (until it
has been quiet for `SETTLE_S`). Each is timed from the process's start to its exit, imports
included, with the CPU seconds the process used (user + sys: other work on the machine
lengthens the wall time far more than it); `rackplane submit --help` alone is timed too (a
fresh interpreter each run: what a submit costs before it talks to the broker). The 1-minute
load average is read before each command.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]
ROOT = Path(__file__).resolve().parents[1]
CLUSTER_FILE = ROOT / "examples" / "gb200-128.yaml"
CLUSTER = "gb200-128"
_RACKPLANE = (sys.executable, "-m", "rackplane")
READY_S = 120.0
"""How long `rackplane up` may take to run its first jobs."""


@contextlib.contextmanager
def _live_up(
    say: Progress, extra: tuple[str, ...] = ("--tansu",), started: list[int] | None = None
) -> Iterator[str]:
    """A `rackplane up --headless *extra` (by default on the embedded Tansu) in its own process
    group for the block; yields its broker (and appends up's PID, its process group, to
    `started` when given)."""
    with tempfile.TemporaryDirectory(prefix="rackplane-bench-cli-") as tmp:
        log = Path(tmp) / "up.log"
        with log.open("w") as out:  # a file, not a pipe: nobody reads up's output meanwhile
            proc = subprocess.Popen(
                [*_RACKPLANE, "up", "--headless", *extra, "--cluster", str(CLUSTER_FILE)],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if started is not None:
            started.append(proc.pid)
        try:
            broker = _wait_ready(proc, log, say)
            yield broker
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # up stops its worker and broker on TERM
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, say: Progress) -> str:
    """The broker `up` names once its cluster is registered and runs jobs."""
    deadline = time.monotonic() + READY_S
    broker = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"rackplane up exited {proc.returncode}: {log.read_text()}")
        if broker is None:
            named = [x for x in log.read_text().splitlines() if x.startswith("broker ")]
            broker = named[0].split()[1] if named else None
            if broker is not None:
                say(f"cli: up on {broker}, waiting for {CLUSTER} to run jobs")
        if broker is not None:
            out = _rackplane("status", "--broker", broker, "--json", check=False)
            if out.returncode == 0 and any(
                c["cluster"] == CLUSTER and c["jobs_running"] > 0 for c in json.loads(out.stdout)
            ):
                return broker
        time.sleep(1.0)
    raise RuntimeError(f"{CLUSTER} runs no job {READY_S:.0f} s after rackplane up started")


def _rackplane(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_RACKPLANE, *args], cwd=ROOT, capture_output=True, text=True, check=check
    )


class _Runs:
    """What the runs of one command took: wall seconds, CPU seconds, load before each."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.load: list[float] = []

    def time(self, argv: list[str], *, cwd: Path = ROOT, env: dict[str, str] | None = None) -> None:
        """Run `argv` once, a fresh process (in `cwd`, with `env`), and note what it took."""
        self.load.append(os.getloadavg()[0])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
        self.wall.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu.append(
            after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        )  # the process's own CPU time: what other work on the machine does not add
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[2:])} exited {done.returncode}: {done.stderr}")

    def row(self, what: str, target: float | None) -> dict[str, Any]:
        return {
            "command": what,
            "runs": len(self.wall),
            "median s": statistics.median(self.wall),
            "worst s": max(self.wall),
            "CPU median s": statistics.median(self.cpu),
            "target s": target,
            "load (1 min)": f"{min(self.load):.2f}-{max(self.load):.2f}",
        }


def run_all(say: Progress, *, runs: int = 5, up: str = "tansu") -> list[dict[str, Any]]:
    """Rows of the whole commands' times on a live 128-rack cluster, on the broker `up`
    (`tansu` or `kafka`) that `rackplane up` starts."""
    rows = []
    say("cli: rackplane submit --help")
    imports = _Runs()
    for _ in range(runs):
        imports.time([*_RACKPLANE, "submit", "--help"])
    rows.append(imports.row("submit --help (start-up, no broker)", None))
    with _live_up(say, (f"--{up}",)) as broker:
        at = ["--broker", broker]
        jobs = json.loads(_rackplane("jobs", "--cluster", CLUSTER, *at, "--json").stdout)
        job = next(j["job"] for j in jobs if j["status"] == "running")
        ids = itertools.count()
        reads: list[tuple[str, list[str]]] = [
            ("status", ["status"]),
            ("jobs --cluster", ["jobs", "--cluster", CLUSTER]),
            ("job JOB --cluster", ["job", job, "--cluster", CLUSTER]),
            ("racks --cluster", ["racks", "--cluster", CLUSTER]),
            ("rack RACK --cluster", ["rack", "r001", "--cluster", CLUSTER]),
        ]
        for what, args in reads:
            say(f"cli: {what}")
            read = _Runs()
            for _ in range(runs):
                read.time([*_RACKPLANE, *args, *at])
            rows.append(read.row(what, 1.0))
        for what, extra, target in (
            ("submit --no-wait", ["--no-wait"], 0.5),
            ("submit (with the chain)", [], None),
        ):
            say(f"cli: {what}")
            submits = _Runs()
            for _ in range(runs):  # a new job id each run: a resent id is a no-op
                job_id = f"bench-cli-{os.getpid()}-{next(ids)}"
                argv = [*_RACKPLANE, "submit", "--cluster", CLUSTER, "--job", job_id]
                submits.time([*argv, "--nodes", "16", *extra, *at])
            rows.append(submits.row(what, target))
    return rows
