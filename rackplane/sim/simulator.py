"""The discrete-event simulator: the real controller and policies, a simulated job runtime,
simulated failures, and virtual time.

Theory of operation:

1. Draw the run's inputs from the seed, before anything runs: the arrivals (`workload`) and
   every failure and repair (`failures`). They do not depend on the policy, so every policy
   compared on one seed meets the same jobs and the same failures.
2. Build an `Engine` with the preset's policies and a virtual clock, and register the
   topology with the preset's settings.
3. Pop the next action from a heap of (time, seq, kind, key, version), set the clock, and send
   its command (ids `sim-<n>`): a job arrives (`SubmitJob`), starts (`StartJob`), completes
   (`CompleteJob`); a node fails (`ReportNodeHealth` failed) or is repaired (`RepairNode`); a
   rack fails or recovers (`ReportRackHealth`). A capacity sample is taken every
   `runtime.sample_minutes`. Metrics count from the end of `runtime.warmup_days` on (the
   cluster starts empty; a warm-up lets it fill before anything is measured).
4. The engine returns the events of the command's whole cascade, policy reactions included.
   The runtime reads them: a placement schedules the job's start; a start schedules its
   completion after its remaining work; a preemption or a migration sends the job back to its
   last checkpoint; a swap or a degrade sends it back to its last checkpoint too (in memory or
   on disk) and stalls it while it restarts (`recovery`); a swap, a migration or a degrade
   changes its pace. A pending start or completion that no longer holds is cancelled lazily:
   every job has a version, bumped on each change, and an action whose version is stale is
   dropped when popped.
5. At the end, every job's account is closed and the metrics computed (`report`); on a
   shared cluster (queues set) also per queue: holdings integrated after every command,
   waits, preemptions by cause, and Jain's index over the queues (`_queues`).

Nothing here reads a clock or draws unseeded randomness: the same scenario, policy and seed
give the same metrics.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from rackplane._gc import cycle_collection_paused
from rackplane.engine import Engine
from rackplane.models import (
    Command,
    CommandRejected,
    CompleteJob,
    Event,
    Health,
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobId,
    JobPlaced,
    JobPreempted,
    JobStarted,
    JobStatus,
    JobSubmitted,
    NodeId,
    NodeSwapped,
    RackHealth,
    RackId,
    RegisterTopology,
    RepairNode,
    ReportNodeHealth,
    ReportRackHealth,
    SliceDegraded,
    SliceMigrated,
    StartJob,
    SubmitJob,
)
from rackplane.policies import preset
from rackplane.projections import ClusterState
from rackplane.sim._metrics import Collector
from rackplane.sim._queues import QueueCollector
from rackplane.sim._runtime import JobRun
from rackplane.sim.failures import Failure, expected_unavailability, failure_schedule
from rackplane.sim.report import PolicyMetrics, SimReport
from rackplane.sim.scenario import Scenario, check_days
from rackplane.sim.workload import Arrival, generate_arrivals

Observer = Callable[[ClusterState, Sequence[Event]], None]
"""Called after every command with the state and the events of its cascade (tests)."""
Progress = Callable[[float], None]
"""Called at every capacity sample with the share of simulated time done."""

_ARRIVE, _START, _COMPLETE, _FAIL, _REPAIR_NODE, _REPAIR_RACK, _SAMPLE, _MEASURE, _INPUT = range(9)
_ACTORS = frozenset({"sim:operator", "sim:workload", "sim:runtime", "sim:failures"})


class VirtualClock:
    """The simulated "now" (tz-aware UTC), moved forward by the simulator only."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Simulation:
    """One run of one policy on one scenario (see the module docstring).

    Args:
        scenario: what to simulate.
        policy: a preset name (`rackplane.policies.PRESETS`).
        seed: overrides the scenario's seed.
        days: overrides the scenario's measured days (after `runtime.warmup_days`).
        observer: called after every command (state, events); for tests.
        progress: called at every sample with the share of simulated time done.
        arrivals: the jobs to run instead of the scenario's workload (a what-if replay).
        failures: the failures to meet instead of drawing them from the failure model.
        inputs: other commands to send at given times (operator actions of a replay).

    Raises:
        ScenarioError: `days` that cannot be simulated (`check_days`).
    """

    def __init__(
        self,
        scenario: Scenario,
        policy: str,
        *,
        seed: int | None = None,
        days: float | None = None,
        observer: Observer | None = None,
        progress: Progress | None = None,
        arrivals: Sequence[Arrival] | None = None,
        failures: Sequence[Failure] | None = None,
        inputs: Sequence[tuple[datetime, Command]] = (),
    ) -> None:
        self.scenario = scenario
        self.arrivals = arrivals
        self.failures = failures
        self.inputs = inputs
        self.policy = policy
        self.seed = scenario.seed if seed is None else seed
        if days is not None:
            check_days(days, start=scenario.start, warmup_days=scenario.runtime.warmup_days)
        self.start = scenario.start
        self.measure_from = self.start + timedelta(days=scenario.runtime.warmup_days)
        self.end = self.measure_from + timedelta(days=scenario.days if days is None else days)
        policies, self.settings = preset(policy, scenario.settings)
        self.clock = VirtualClock(self.start)
        topology = scenario.topology
        self.engine = Engine(topology.cluster, clock=self.clock, policies=policies)
        self.rack_of: dict[NodeId, RackId] = {n: r.id for r in topology.racks for n in r.nodes}
        self.gpus_of: dict[NodeId, int] = {
            n: r.gpus_per_node for r in topology.racks for n in r.nodes
        }
        self.observer = observer
        self.progress = progress
        self.runs: dict[JobId, JobRun] = {}
        self.heap: list[tuple[datetime, int, int, Any, int]] = []
        self.order = itertools.count()
        self.ids = itertools.count(1)
        self.node_down: dict[NodeId, datetime] = {}
        self.rack_down: dict[RackId, datetime] = {}
        self.versions: Counter[str] = Counter()
        self.down_per_rack: Counter[RackId] = Counter()
        self.overhead = self.settings.restart_overhead
        recovery = scenario.recovery
        self.recovery = recovery
        self.swap_stall = recovery.swap_stall(self.overhead)
        self.degrade_stall = recovery.degrade_stall(self.overhead)
        self.memory_checkpoint = recovery.memory_checkpoint_seconds
        self.startup = timedelta(minutes=scenario.runtime.startup_minutes)
        self.sample_every = timedelta(minutes=scenario.runtime.sample_minutes)
        self.collector: Collector | None = None
        self.queues: QueueCollector | None = None
        if self.settings.queues:
            self.queues = QueueCollector(self.settings, topology.node_count)

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> PolicyMetrics:
        """Simulate from the scenario's start to its end; return the metrics.

        The cyclic garbage collector is paused for the run: a simulated year makes almost no
        cyclic garbage (its 41 full collections found none), and their passes over a heap
        that grows with the year cost 20 s of a 70 s full-stack year (50 s without)."""
        with cycle_collection_paused():
            return self._run()

    def _run(self) -> PolicyMetrics:
        s = self.scenario
        self._send(RegisterTopology, "sim:operator", topology=s.topology, settings=self.settings)
        self.collector = Collector(self.policy, self.engine.state)
        self._push(self.measure_from, _MEASURE, None)  # first among equal times
        nodes = s.topology.node_count
        arrivals = self.arrivals
        if arrivals is None:
            # Jobs are capped to what the cluster can ever hold outside its spares (the
            # scenario's, the same for every policy compared): a larger one is refused.
            keep = s.settings.spares_per_rack
            room = sum(max(0, len(r.nodes) - keep) for r in s.topology.racks) if keep else nodes
            arrivals = generate_arrivals(
                s.workload,
                nodes=nodes,
                cap=room or nodes,
                start=self.start,
                end=self.end,
                seed=self.seed,
                slice_size=self.settings.slice_size,
            )
        for a in arrivals:
            self._push(a.at, _ARRIVE, a)
        failures = self.failures
        if failures is None:
            failures = failure_schedule(
                s.topology, s.failures, start=self.start, end=self.end, seed=self.seed
            )
        for f in failures:
            self._push(f.at, _FAIL, f)
        for at, command in self.inputs:
            self._push(at, _INPUT, command)
        while self.heap:
            at, _, kind, key, version = heapq.heappop(self.heap)
            if at >= self.end:
                break
            self.clock.now = at
            self._dispatch(kind, key, version)
        metrics = self.collector.finish(
            self.engine.state,
            self.runs,
            start=self.measure_from,
            end=self.end,
            gpu_hour_usd=s.cost.gpu_hour_usd,
        )
        if self.queues is None:
            return metrics
        queues, jain = self.queues.finish(self.runs, start=self.measure_from, end=self.end)
        return metrics.model_copy(update={"queues": queues, "jain_index": jain})

    def _push(self, at: datetime, kind: int, key: Any, version: int = 0) -> None:
        heapq.heappush(self.heap, (at, next(self.order), kind, key, version))

    def _dispatch(self, kind: int, key: Any, version: int) -> None:
        state = self.engine.state
        if kind == _ARRIVE:
            self._arrive(key)
        elif kind == _START:
            job = state.jobs.get(key)
            if job is not None and job.status is JobStatus.PLACED and self._current(key, version):
                self._send(StartJob, "sim:runtime", job=key)
        elif kind == _COMPLETE:
            job = state.jobs.get(key)
            if job is not None and job.status is JobStatus.RUNNING and self._current(key, version):
                self._send(CompleteJob, "sim:runtime", job=key)
        elif kind == _FAIL:
            self._fail(key)
        elif kind == _REPAIR_NODE:
            if self.versions[f"node:{key}"] == version:
                del self.node_down[key]
                self.down_per_rack[self.rack_of[key]] -= 1
                self._send(RepairNode, "sim:failures", node=key, note="repaired")
        elif kind == _REPAIR_RACK:
            if self.versions[f"rack:{key}"] == version:
                del self.rack_down[key]
                self._send(ReportRackHealth, "sim:failures", rack=key, health=RackHealth.HEALTHY)
        elif kind == _SAMPLE:
            assert self.collector is not None
            self.collector.sample(state, self.down_per_rack)
            if self.progress is not None:
                self.progress((self.clock.now - self.start) / (self.end - self.start))
            self._push(self.clock.now + self.sample_every, _SAMPLE, None)
        elif kind == _INPUT:
            self._handle(key)
        elif kind == _MEASURE:
            assert self.collector is not None
            self.collector.measure(self.clock.now, self.runs)
            if self.queues is not None:
                self.queues.measure(self.clock.now, state)
            self._dispatch(_SAMPLE, None, 0)

    def _current(self, job: JobId, version: int) -> bool:
        run = self.runs.get(job)
        return run is not None and run.version == version

    def _send(self, make: type[Command], actor: str, **fields: Any) -> list[Event]:
        command = make(
            id=f"sim-{next(self.ids)}",
            cluster=self.scenario.topology.cluster,
            actor=actor,
            **fields,
        )
        return self._handle(command)

    def _handle(self, command: Command) -> list[Event]:
        events = self.engine.handle(command)
        self._react(events)
        if self.collector is not None:
            self.collector.observe(events, runtime_actors=_ACTORS)
        if self.queues is not None:
            self.queues.observe(self.clock.now, self.engine.state, events)
        if self.observer is not None:
            self.observer(self.engine.state, events)
        return events

    # -- inputs --------------------------------------------------------------------------------

    def _arrive(self, arrival: Arrival) -> None:
        self.runs[arrival.spec.id] = JobRun.of(arrival)
        events = self._send(SubmitJob, "sim:workload", job=arrival.spec)
        if any(isinstance(e, CommandRejected) for e in events):
            del self.runs[arrival.spec.id]  # counted as a runtime rejection

    def _fail(self, f: Failure) -> None:
        if f.node is not None:
            key = f"node:{f.node}"
            already = f.node in self.node_down
            if already and f.repaired_at <= self.node_down[f.node]:
                return
            self.node_down[f.node] = f.repaired_at
            self.versions[key] += 1
            self._push(f.repaired_at, _REPAIR_NODE, f.node, self.versions[key])
            if not already:
                self.down_per_rack[f.rack] += 1
                self._send(
                    ReportNodeHealth,
                    "sim:failures",
                    node=f.node,
                    health=Health.FAILED,
                    cause=f.cause,
                )
            return
        key = f"rack:{f.rack}"
        already = f.rack in self.rack_down
        if already and f.repaired_at <= self.rack_down[f.rack]:
            return
        self.rack_down[f.rack] = f.repaired_at
        self.versions[key] += 1
        self._push(f.repaired_at, _REPAIR_RACK, f.rack, self.versions[key])
        if not already:
            self._send(
                ReportRackHealth,
                "sim:failures",
                rack=f.rack,
                health=RackHealth.FAILED,
                cause=f.cause,
            )

    # -- the runtime: reading the events -------------------------------------------------------

    def _react(self, events: Sequence[Event]) -> None:
        for e in events:
            if isinstance(e, JobSubmitted):
                run = self.runs.get(e.job.id)
                if run is not None:
                    run.sizes = e.job.slice_sizes
                continue
            job = getattr(e, "job", None)
            run = self.runs.get(job) if isinstance(job, str) else None
            if run is None:
                continue
            at = e.at
            if isinstance(e, JobPlaced):
                run.hold(at, {s.index: s.nodes for s in e.slices}, self._gpus(e.slices))
                self._pace(run, at)
                run.version += 1
                self._push(at + self.startup, _START, run.arrival.spec.id, run.version)
            elif isinstance(e, JobStarted):
                run.start(at, self.overhead)
                self._reschedule(run)
            elif isinstance(e, JobPreempted):
                run.restart(at, self.overhead, keeps_running=False)
                run.release(at)
                run.version += 1
            elif isinstance(e, SliceMigrated):
                run.restart(at, self.overhead, keeps_running=True)
                self._reshape(run, at, e.slice, e.new_nodes)
            elif isinstance(e, NodeSwapped):
                self._survive(run, at, "swap", self.swap_stall)
                nodes = tuple(e.new_node if n == e.old_node else n for n in run.slices[e.slice])
                self._reshape(run, at, e.slice, nodes)
            elif isinstance(e, SliceDegraded):
                self._survive(run, at, "degrade", self.degrade_stall)
                gone = set(e.removed)
                nodes = tuple(n for n in run.slices[e.slice] if n not in gone)
                self._reshape(run, at, e.slice, nodes)
            elif isinstance(e, JobCompleted):
                run.complete(at)
                run.version += 1
            elif isinstance(e, JobFailed | JobCancelled):
                run.release(at)
                run.version += 1

    def _survive(self, run: JobRun, at: datetime, cause: str, stall: timedelta) -> None:
        """A node failure the job rides out in place: the whole job rolls back to its last
        checkpoint and stalls (`recovery`). A job placed but not yet started loses nothing."""
        if run.running:
            run.restart(
                at,
                stall,
                keeps_running=True,
                cause=cause,
                memory_checkpoint=self.memory_checkpoint,
            )

    def _gpus(self, slices: Sequence[Any]) -> int:
        return sum(self.gpus_of[n] for s in slices for n in s.nodes)

    def _reshape(self, run: JobRun, at: datetime, index: int, nodes: tuple[NodeId, ...]) -> None:
        slices = dict(run.slices)
        slices[index] = nodes
        run.hold(at, slices, sum(self.gpus_of[n] for ns in slices.values() for n in ns))
        self._pace(run, at)
        if run.running:
            self._reschedule(run)

    def _pace(self, run: JobRun, at: datetime) -> None:
        comm = self.scenario.comm
        penalty = comm.job_penalty(run.slices.values(), self.rack_of)
        cross = any(len({self.rack_of[n] for n in ns}) > 1 for ns in run.slices.values())
        rate = 1.0 / (1.0 + penalty) if self.scenario.runtime.slow_cross_rack_jobs else 1.0
        degraded = 1.0
        if run.sizes:
            degraded = self.recovery.job_pace(
                ((len(ns), run.sizes[i]) for i, ns in run.slices.items()),
                boosted=self.settings.ntp_power_boost,
            )
        run.pace(at, penalty, rate * degraded, cross_rack=cross, slow=rate * (1.0 - degraded))

    def _reschedule(self, run: JobRun) -> None:
        run.version += 1
        self._push(run.finish_time(), _COMPLETE, run.arrival.spec.id, run.version)


def simulate(
    scenario: Scenario,
    policy: str,
    *,
    seed: int | None = None,
    days: float | None = None,
    observer: Observer | None = None,
    progress: Progress | None = None,
) -> PolicyMetrics:
    """Run one policy on a scenario; see `Simulation`."""
    sim = Simulation(scenario, policy, seed=seed, days=days, observer=observer, progress=progress)
    return sim.run()


def compare(
    scenario: Scenario,
    policies: Sequence[str],
    *,
    seed: int | None = None,
    days: float | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> SimReport:
    """Run several policies on the same scenario and seed.

    Args:
        scenario: what to simulate.
        policies: preset names, in the order to report them.
        seed: overrides the scenario's seed.
        days: overrides the scenario's duration.
        progress: called with (policy, share of its simulated time done).

    Raises:
        ValueError: an unknown policy name.
        ScenarioError: `days` that cannot be simulated (`check_days`).
    """
    results = []
    for name in policies:

        def tick(done: float, name: str = name) -> None:
            if progress is not None:
                progress(name, done)

        results.append(simulate(scenario, name, seed=seed, days=days, progress=tick))
    return SimReport(
        scenario=scenario.name,
        seed=scenario.seed if seed is None else seed,
        days=scenario.days if days is None else days,
        racks=len(scenario.topology.racks),
        nodes=scenario.topology.node_count,
        expected_node_unavailability=expected_unavailability(scenario.failures),
        policies=tuple(results),
    )
