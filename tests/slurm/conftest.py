"""The Slurm tier's pieces: the cluster of `make test-slurm` (a real slurmctld 22.05 with one
slurmd per simulated node, from `scripts/slurm/slurm_cluster.py`) and a small driver for its
commands.

Runs in `make test-slurm` (the cluster started around pytest; `RACKPLANE_TEST_SLURM_CONF`,
`RACKPLANE_TEST_SLURM_BIN`, `RACKPLANE_TEST_SLURM_DIR`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

ENV_VARS = ("RACKPLANE_TEST_SLURM_CONF", "RACKPLANE_TEST_SLURM_BIN", "RACKPLANE_TEST_SLURM_DIR")
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm" / "slurm_cluster.py"
RACKS = {f"rack{r:02d}": [f"r{r:02d}n{n:02d}" for n in range(1, 19)] for r in range(1, 4)}
NODES = [node for nodes in RACKS.values() for node in nodes]
JOB_FORMAT = "%i|%T|%D|%r|%N|%n"
"""No user text (%j, %k): those may hold '|' themselves (fixtures/README.md)."""

T = TypeVar("T")


@dataclass(frozen=True)
class Job:
    """One line of `squeue -o JOB_FORMAT`."""

    id: int
    state: str
    node_count: int
    reason: str
    nodes: str  # %N: where it runs ("" while pending)
    required: str  # %n: its ReqNodeList ("" when none)


class Slurm:
    """The test cluster's commands, by their wrappers in `bin_dir` (no environment needed)."""

    def __init__(self, conf: Path, bin_dir: Path, work_dir: Path) -> None:
        self.conf, self.bin_dir, self.work_dir = conf, bin_dir, work_dir

    def cmd(self, name: str, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            [str(self.bin_dir / name), *args], capture_output=True, text=True, timeout=30,
            check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"{name} {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
        return done.stdout

    def sbatch(self, *args: str) -> int:
        """Submit to partition gpu, output to /dev/null, run in the cluster's jobs/ directory."""
        out = self.cmd(
            "sbatch", "--parsable", "--output=/dev/null", f"--chdir={self.work_dir / 'jobs'}",
            "-p", "gpu", *args,
        )  # fmt: skip
        return int(out.strip().split(";")[0])

    def job(self, job_id: int) -> Job:
        line = self.cmd("squeue", "-h", "--states=all", "-j", str(job_id), "-o", JOB_FORMAT)
        fields = line.rstrip("\n").split("|")
        assert len(fields) == 6, f"squeue -j {job_id}: {line!r}"
        return Job(int(fields[0]), fields[1], int(fields[2]), *fields[3:])

    def hostnames(self, hostlist: str) -> list[str]:
        return self.cmd("scontrol", "show", "hostnames", hostlist).split() if hostlist else []

    def node(self, name: str) -> tuple[str, str]:
        """(`%T`, `%E`): e.g. ("drained", "rackplane: cordoned"), ("down*", "Not responding")."""
        state, _, reason = (
            self.cmd("sinfo", "-h", "-N", "-n", name, "-o", "%T|%E").strip().partition("|")
        )
        return state, reason

    def node_states(self) -> dict[str, str]:
        lines = self.cmd("sinfo", "-h", "-N", "-o", "%N|%T").split()
        return dict(line.split("|", 1) for line in lines)

    def nodes_json(self) -> dict[str, dict[str, Any]]:
        """`sinfo --json`'s nodes by name."""
        return {n["name"]: n for n in json.loads(self.cmd("sinfo", "--json"))["nodes"]}

    def until(
        self, what: str, probe: Callable[[], T], ok: Callable[[T], bool], timeout: float
    ) -> T:
        """Poll `probe()` until `ok(value)`; return the value. Fails with the last one."""
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if ok(value):
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not {what} within {timeout:.0f} s; last: {value!r}")
            time.sleep(0.2)

    def until_state(self, job_id: int, state: str, timeout: float = 30.0) -> Job:
        return self.until(
            f"job {job_id} {state}", lambda: self.job(job_id), lambda j: j.state == state, timeout
        )

    def slurmd(self, action: str, node: str) -> int:
        """`kill-node` or `start-node` of scripts/slurm/slurm_cluster.py; returns the pid."""
        done = subprocess.run(
            [sys.executable, str(SCRIPT), action, node, "--dir", str(self.work_dir)],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{action} {node}: {done.stdout}{done.stderr}"
        return int(done.stdout.strip())

    def settle(self) -> None:
        """Cancel every job, resume every node an admin drained or downed, and wait for all
        nodes idle: the next test starts from a quiet cluster."""
        jobs = self.cmd("squeue", "-h", "-o", "%A").split()
        if jobs:
            self.cmd("scancel", *jobs)
        self.until(
            "no job active", lambda: self.cmd("squeue", "-h", "-o", "%A").split(),
            lambda left: not left, 30.0,
        )  # fmt: skip
        states = self.node_states()
        hurt = [n for n, s in states.items() if s in ("drained", "draining", "down")]
        if hurt:
            self.cmd("scontrol", "update", f"NodeName={','.join(hurt)}", "State=RESUME")
        self.until(
            "every node idle", self.node_states,
            lambda s: all(s.get(n) == "idle" for n in NODES), 30.0,
        )  # fmt: skip


@pytest.fixture(scope="session")
def slurm_cluster() -> Slurm:
    missing = [name for name in ENV_VARS if not os.environ.get(name)]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not set: the Slurm tier needs its cluster; run `make test-slurm`"
        )
    conf, bin_dir, work_dir = (Path(os.environ[name]) for name in ENV_VARS)
    return Slurm(conf, bin_dir, work_dir)


@pytest.fixture
def slurm(slurm_cluster: Slurm) -> Iterator[Slurm]:
    """The cluster, settled again after the test (its jobs cancelled, its nodes resumed)."""
    yield slurm_cluster
    slurm_cluster.settle()
