"""Slurm alone versus `rackplane slurm`: the same seeded job trace, placed twice on one cluster.

Needs the Slurm test cluster (`make bench-slurm` starts it: 8 racks x 18 nodes, one leaf
switch per rack under a spine, topology/tree, Slurm 22.05; `RACKPLANE_TEST_SLURM_*`). One
cluster, no job_submit.lua: the two halves run one after the other on it.

1. The trace (`make_trace`, seeded): 64 jobs arriving at random over 180 s, about 35% of
   16 nodes, 15% of 32 and the rest of 2-8; each `--wrap "sleep D"`, D 10-60 s, with
   `--exclusive` and `--time` D + 30 s rounded up to minutes. Five node failures at fixed
   times (20-80% of the window): `scontrol update State=DOWN Reason=bench` on the k-th node
   (in name order) of the running 16-node job whose run started first (a 32-node job, then
   any, when none runs), `State=RESUME` 30 s later. The same rule picks the node in both
   halves, from what squeue showed a moment before.
2. Slurm alone: submitted as they are with `--switches=K@1:00:00`, K = ceil(n/16) (a 16-node
   job or a smaller one within one leaf, a 32-node job within two), and the cluster's
   `max_switch_wait` raised from its default of 300 s to 3600 s (slurm.conf of the throwaway
   cluster edited, `scontrol reconfigure`), so no job gives up its switch count for a wait.
3. rackplane: an embedded Tansu, a worker and `rackplane slurm` each a process of their own;
   the same jobs submitted `--hold` with `--comment "rackplane: slice-size=S"` (S = 16, or
   the job's size when smaller) and no `--switches`: rackplane places them (2 spares per
   rack), the adapter sets ReqNodeList and releases.

Measured by polling `squeue` every 0.5 s (no accounting database): a run opens when a job is
first seen RUNNING (or RUNNING on another node set) and closes when it is seen otherwise.
- slices rack-local: a run of a 16- or 32-node job whose nodes can be cut into 16-node
  slices each in one rack (every rack holds a multiple of 16 of its nodes); a small job's
  run: in one rack. Also, for 16/32-node runs, whether they span the fewest racks possible
  for Slurm, ceil(n/18) (a 32-node job on 18 + 14 nodes of two racks passes this one only).
- wait: submit -> first RUNNING, median and p90 (nearest rank).
- utilisation: node-seconds of every run / (nodes x makespan), over all 144 nodes and over
  the 128 that are not rackplane's spares; makespan: first submit -> last run's end.
- failures: the job that ran on the downed node; what happened next (running again, and
  after how long from the DOWN; or its end state when it never ran again). Moves: runs cut
  short with no failure behind them (rackplane's defrag or preemption requeues a job);
  node-s cut short: the node-seconds of every run that did not end its job.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackplane.importers.hostlist import expand_hostlist

Progress = Callable[[str], None]
PER_RACK, SPARES, SLICE = 18, 2, 16
POLL_S = 0.5
DOWN_FOR_S = 30.0
SWITCH_WAIT, MAX_SWITCH_WAIT_S = "1:00:00", 3600
FAILURES = ((0.2, 3), (0.35, 9), (0.5, 0), (0.65, 12), (0.8, 6))
"""(when, as a fraction of the arrival window; k: which node of the victim, in name order)."""
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL",
                   "DEADLINE", "OUT_OF_MEMORY", "PREEMPTED"})  # fmt: skip


@dataclass(frozen=True)
class Job:
    """One job of the trace."""

    index: int
    at: float
    """Seconds after the trace's start."""
    nodes: int
    seconds: int


@dataclass(frozen=True)
class Failure:
    at: float
    k: int


def make_trace(
    seed: int = 18, jobs: int = 64, window: float = 180.0
) -> tuple[list[Job], list[Failure]]:
    """The jobs and node failures of one run (module docstring, 1)."""
    rng = random.Random(seed)
    out = []
    for i, at in enumerate(sorted(rng.uniform(0, window) for _ in range(jobs))):
        r = rng.random()
        nodes = 16 if r < 0.35 else 32 if r < 0.5 else rng.choice((2, 4, 6, 8))
        out.append(Job(i, round(at, 1), nodes, rng.randint(10, 60)))
    return out, [Failure(round(window * f, 1), k) for f, k in FAILURES]


@dataclass
class Run:
    start: float
    nodes: tuple[str, ...]
    end: float | None = None


@dataclass
class Record:
    """One submitted job as squeue showed it."""

    job: Job
    slurm_id: str
    submitted: float
    runs: list[Run] = field(default_factory=list)
    state: str = "PENDING"

    @property
    def running(self) -> Run | None:
        return self.runs[-1] if self.runs and self.runs[-1].end is None else None


@dataclass(frozen=True)
class Hit:
    at: float
    node: str
    record: Record
    run: Run


class _Slurm:
    def __init__(self, bin_dir: Path, work_dir: Path) -> None:
        self.bin_dir, self.work_dir = bin_dir, work_dir

    def cmd(self, name: str, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin_dir / name), *args], capture_output=True, text=True, timeout=30,
            check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(args)}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    def until_idle(self, nodes: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.cmd("sinfo", "-h", "-N", "-t", "idle", "-o", "%N").split()) < nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not every node idle in {timeout:.0f} s")
            time.sleep(0.5)


class _Half:
    """One placement of the trace: submit, fail nodes, poll squeue until every job ended."""

    def __init__(
        self, slurm: _Slurm, trace: list[Job], failures: list[Failure], *, rackplane: bool,
        say: Progress, limit_s: float,
    ) -> None:  # fmt: skip
        self.slurm, self.trace, self.failures = slurm, trace, failures
        self.rackplane, self.say, self.limit_s = rackplane, say, limit_s
        self.name = "rackplane" if rackplane else "Slurm alone"
        self.records: dict[str, Record] = {}
        self.hits: list[Hit] = []
        self.downs: list[tuple[float, str]] = []
        self.unfinished = 0

    def submit(self, job: Job, now: float) -> None:
        args = ["--parsable", "--output=/dev/null", f"--chdir={self.slurm.work_dir / 'jobs'}",
                "-p", "gpu", "--exclusive", "-N", str(job.nodes), f"--job-name=b{job.index}",
                f"--time={math.ceil((job.seconds + 30) / 60)}"]  # fmt: skip
        if self.rackplane:
            args += ["--hold", "--comment", f"rackplane: slice-size={min(job.nodes, SLICE)}"]
        else:
            args.append(f"--switches={math.ceil(job.nodes / SLICE)}@{SWITCH_WAIT}")
        out = self.slurm.cmd("sbatch", *args, "--wrap", f"sleep {job.seconds}")
        jid = out.strip().split(";")[0]
        self.records[jid] = Record(job, jid, now)

    def poll(self, now: float) -> None:
        out = self.slurm.cmd("squeue", "-h", "-a", "--states=all", "-p", "gpu", "-o", "%i|%T|%N")
        for line in out.splitlines():
            jid, state, hosts = line.split("|", 2)
            r = self.records.get(jid)
            if r is None:
                continue
            r.state = state
            run = r.running
            nodes = tuple(expand_hostlist(hosts)) if hosts and state == "RUNNING" else ()
            if run is not None and (state != "RUNNING" or set(nodes) != set(run.nodes)):
                run.end = now
            if state == "RUNNING" and r.running is None:
                r.runs.append(Run(now, nodes))

    def fail(self, f: Failure, now: float) -> None:
        running = [r for r in self.records.values() if r.running is not None]
        for pick in (lambda r: r.job.nodes == 16, lambda r: r.job.nodes == 32, lambda r: True):
            victims = [r for r in running if pick(r)]
            if victims:
                break
        else:
            self.say(f"slurm: {self.name}: nothing runs at {now:.0f} s, no failure")
            return
        victim = min(victims, key=lambda r: (r.runs[-1].start, r.job.index))
        run = victim.runs[-1]
        node = sorted(run.nodes)[f.k % len(run.nodes)]
        self.slurm.cmd("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=bench")
        self.hits.append(Hit(now, node, victim, run))
        self.downs.append((now + DOWN_FOR_S, node))

    def run(self) -> _Half:
        arrivals, failures = list(self.trace), list(self.failures)
        t0 = time.monotonic()
        while True:
            now = time.monotonic() - t0
            while arrivals and arrivals[0].at <= now:
                self.submit(arrivals.pop(0), time.monotonic() - t0)
            self.poll(now)
            while failures and failures[0].at <= now:
                self.poll(time.monotonic() - t0)
                self.fail(failures.pop(0), time.monotonic() - t0)
            for at, node in [d for d in self.downs if d[0] <= now]:
                self.slurm.cmd("scontrol", "update", f"NodeName={node}", "State=RESUME")
                self.downs.remove((at, node))
            left = [r for r in self.records.values() if r.state not in ENDED or r.running]
            self.say(f"slurm: {self.name}: {now:.0f} s, {len(self.records)} submitted, "
                     f"{len(left)} not ended")  # fmt: skip
            if not arrivals and not failures and not self.downs and not left:
                return self
            if now > self.limit_s:
                self.unfinished = len(left)
                self.say(f"slurm: {self.name}: {len(left)} jobs left at the limit: cancelled")
                self.slurm.cmd("scancel", *(r.slurm_id for r in left))
                for r in left:
                    if r.running is not None:
                        r.running.end = now
                for _, node in self.downs:
                    self.slurm.cmd("scontrol", "update", f"NodeName={node}", "State=RESUME")
                return self
            time.sleep(max(0.0, POLL_S - (time.monotonic() - t0 - now)))


def _rack(node: str) -> str:
    return node.split("n", 1)[0]  # r03n07 -> r03 (the test cluster's names)


def slices_rack_local(nodes: tuple[str, ...]) -> bool:
    """The run's nodes cut into 16-node slices each in one rack (a small job: one rack)."""
    per_rack = Counter(map(_rack, nodes))
    if len(nodes) < SLICE:
        return len(per_rack) == 1
    return all(c % SLICE == 0 for c in per_rack.values())


def fewest_racks(nodes: tuple[str, ...]) -> bool:
    return len(set(map(_rack, nodes))) == math.ceil(len(nodes) / PER_RACK)


def _p90(xs: list[float]) -> float | None:
    return sorted(xs)[math.ceil(0.9 * len(xs)) - 1] if xs else None


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _share(runs: list[Run], ok: Callable[[tuple[str, ...]], bool]) -> str:
    return f"{sum(ok(r.nodes) for r in runs)} of {len(runs)}"


def _after(hit: Hit) -> Run | None:
    later = [r for r in hit.record.runs if r.start > hit.run.start]
    return later[0] if later else None


def _end(run: Run) -> float:
    assert run.end is not None
    return run.end


def _node_s(run: Run) -> float:
    return len(run.nodes) * (_end(run) - run.start)


def summary(h: _Half, total_nodes: int, usable_nodes: int) -> dict[str, Any]:
    """The half's numbers by row name (module docstring, measures)."""
    recs = list(h.records.values())
    runs = [(r, run) for r in recs for run in r.runs if run.end is not None]
    first = min(r.submitted for r in recs)
    makespan = max(_end(run) for _, run in runs) - first
    busy = sum(_node_s(run) for _, run in runs)
    # a run that did not finish its job: cut short by a failure, a move or the time limit
    lost = sum(_node_s(run) for r, run in runs if run is not r.runs[-1] or r.state != "COMPLETED")
    of = {size: [run for r, run in runs if r.job.nodes == size] for size in (16, 32)}
    small = [run for r, run in runs if r.job.nodes < SLICE]
    waits = {size: [r.runs[0].start - r.submitted for r in recs if r.job.nodes == size and r.runs]
             for size in (16, 32)}  # fmt: skip
    small_waits = [r.runs[0].start - r.submitted for r in recs if r.job.nodes < SLICE and r.runs]
    completed = sum(r.state == "COMPLETED" for r in recs)
    restarts = sum(len(r.runs) - 1 for r in recs if r.runs)
    moved = restarts - sum(_after(hit) is not None for hit in h.hits)
    back = [run.start - hit.at for hit in h.hits if (run := _after(hit)) is not None]
    return {
        "jobs completed (of the trace)": f"{completed} of {len(h.trace)}",
        "makespan s (first submit -> last end)": makespan,
        "16-node runs: slice in one rack": _share(of[16], slices_rack_local),
        "32-node runs: both slices rack-local": _share(of[32], slices_rack_local),
        "16/32-node runs in the fewest racks, ceil(n/18)": _share(of[16] + of[32], fewest_racks),
        "small-job runs in one rack": _share(small, slices_rack_local),
        "wait 16-node, median s": _median(waits[16]),
        "wait 16-node, p90 s": _p90(waits[16]),
        "wait 32-node, median s": _median(waits[32]),
        "wait 32-node, p90 s": _p90(waits[32]),
        "wait small (2-8 nodes), median s": _median(small_waits),
        f"utilisation, all {total_nodes} nodes %": 100 * busy / (total_nodes * makespan),
        f"utilisation, {usable_nodes} non-spare nodes %": 100 * busy / (usable_nodes * makespan),
        "node-s of runs cut short": lost,
        "jobs hit by a node failure": len(h.hits),
        "... running again, median s after DOWN": _median(back),
        "... never ran again": sum(_after(hit) is None for hit in h.hits),
        "runs cut short by the placer, no failure (moves)": moved,
        "jobs left at the time limit (cancelled)": h.unfinished,
    }


def hit_rows(h: _Half) -> list[dict[str, Any]]:
    rows = []
    for hit in h.hits:
        again = _after(hit)
        if again is None:
            outcome, after = f"never ran again ({hit.record.state})", None
        else:
            moved = len(set(again.nodes) - set(hit.run.nodes))
            outcome = f"requeued, ran again: {moved} of {len(again.nodes)} nodes new"
            after = again.start - hit.at
        rows.append({"placement": h.name, "DOWN at s": hit.at, "node": hit.node,
                     "job": f"{hit.record.slurm_id} ({hit.record.job.nodes} nodes)",
                     "outcome": outcome, "running again after s": after})  # fmt: skip
    return rows


def _raise_switch_wait(slurm: _Slurm, conf: Path) -> None:
    text = conf.read_text()
    if "max_switch_wait" not in text:
        text = re.sub(r"^(SchedulerParameters=.*)$", rf"\1,max_switch_wait={MAX_SWITCH_WAIT_S}",
                      text, count=1, flags=re.M)  # fmt: skip
        conf.write_text(text)
        slurm.cmd("scontrol", "reconfigure")
    shown = slurm.cmd("scontrol", "show", "config")
    if f"max_switch_wait={MAX_SWITCH_WAIT_S}" not in shown:
        raise RuntimeError("slurmctld did not take max_switch_wait")


async def _until_registered(config: Any, cluster: str, adapter: subprocess.Popen[bytes]) -> None:
    """Wait until the adapter has registered the racks it read from slurmctld."""
    from rackplane.streams.client import Client
    from rackplane.streams.mirror import ClusterMirror

    mirror = ClusterMirror(config, cluster)
    async with Client(config) as client:
        task = asyncio.create_task(mirror.follow(client))
        try:
            deadline = time.monotonic() + 90
            while not mirror.state.registered:
                if adapter.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("rackplane slurm did not register the topology")
                await asyncio.sleep(0.2)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def run_all(
    say: Progress, *, quick: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both halves on the cluster of `make bench-slurm`; (the comparison, the jobs hit)."""
    from rackplane.streams import EmbeddedBroker
    from rackplane.streams.config import StreamConfig
    from rackplane.streams.process import WorkerProcess
    from rackplane.streams.topics import ensure_topics

    names = ("RACKPLANE_TEST_SLURM_BIN", "RACKPLANE_TEST_SLURM_DIR", "RACKPLANE_TEST_SLURM_CONF")
    if not all(os.environ.get(n) for n in names):
        raise SystemExit("the slurm benchmark needs the test cluster: run `make bench-slurm`")
    bin_dir, work_dir, conf = (Path(os.environ[n]) for n in names)
    slurm = _Slurm(bin_dir, work_dir)
    nodes = slurm.cmd("sinfo", "-h", "-N", "-o", "%N").split()
    racks = len({_rack(n) for n in nodes})
    total, usable = len(nodes), racks * (PER_RACK - SPARES)
    trace, failures = make_trace(jobs=24 if quick else 64, window=60 if quick else 180)
    limit = trace[-1].at + 240
    _raise_switch_wait(slurm, conf)
    started = time.monotonic()
    alone = _Half(slurm, trace, failures, rackplane=False, say=say, limit_s=limit).run()
    alone_s = time.monotonic() - started
    slurm.until_idle(total)
    tag = uuid.uuid4().hex[:6]
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        config = StreamConfig(broker=broker.url, prefix=f"b{tag}", app_id=f"b{tag}", partitions=2)
        asyncio.run(ensure_topics(config))
        worker = WorkerProcess(config, data_dir=Path(tmp))
        worker.start()
        log = Path(tmp) / "adapter.log"
        cluster = f"bench-{tag}"
        adapter = subprocess.Popen(
            [sys.executable, "-m", "rackplane", "slurm", "--cluster", cluster, "--partition",
             "gpu", "--bin", str(bin_dir), "--interval", "0.5", "--broker", config.broker,
             "--prefix", config.prefix],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            say("slurm: rackplane: waiting for the adapter to register the racks")
            asyncio.run(_until_registered(config, cluster, adapter))
            started = time.monotonic()
            ours = _Half(slurm, trace, failures, rackplane=True, say=say, limit_s=limit).run()
            ours_s = time.monotonic() - started
        except BaseException:
            print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
            raise
        finally:
            if adapter.poll() is None:
                os.killpg(adapter.pid, signal.SIGTERM)
                adapter.wait(20)
            worker.stop()
    a, b = summary(alone, total, usable), summary(ours, total, usable)
    rows = [{"what": k, "Slurm alone (--switches)": a[k], "rackplane slurm": b[k]} for k in a]
    say(f"slurm: halves took {alone_s:.0f} s and {ours_s:.0f} s")
    return rows, hit_rows(alone) + hit_rows(ours)
