"""The simulated job runtime: one job's progress, checkpoints and GPU-time accounts.

Rules of this file:
- Work is measured in seconds at full speed. A running job progresses at `rate` (1, less when
  a slice spans racks or runs degraded: `recovery`) after paying `overhead` (the restart
  overhead after a preemption or a migration; the stall of a swap or a degrade).
- A managed job checkpoints every `checkpoint` seconds of progress; a restart loses the
  progress since its last checkpoint (all of it without checkpoints); a swap or a degrade
  restarts it too, from the later of that and its last in-memory checkpoint. Interactive
  sessions and inference services keep their progress: their work is wall time.
- GPU-seconds are accumulated piecewise: `allocated` while the job holds nodes, `useful` for
  the progress it keeps (progress x GPUs held while making it). Goodput is useful / allocated.
  A degraded job's GPUs count at its pace: a boost that more than keeps pace earns nothing
  above it (its price is power, which the model does not count).
- What a swap or a degrade costs is also kept by cause (`lost_gpu_s`): the rolled-back
  progress x GPUs, the stall x GPUs as it is paid, and, while degraded, GPUs x the pace lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rackplane.models import NodeId
from rackplane.sim.workload import Arrival


@dataclass(slots=True)
class JobRun:
    """The runtime's view of one job."""

    arrival: Arrival
    remaining: float
    """Seconds of full-speed work still to do (at the last checkpoint kept)."""
    checkpoint: float | None
    keeps_progress: bool
    version: int = 0
    """Bumped whenever a pending start or completion becomes stale (lazy cancellation)."""
    sizes: tuple[int, ...] = ()
    """Nodes per slice as submitted (the cluster's slice size resolved)."""
    slices: dict[int, tuple[NodeId, ...]] = field(default_factory=dict)
    gpus: int = 0
    penalty: float = 0.0
    """Step-time penalty of the current placement (`CommModel.job_penalty`)."""
    rate: float = 1.0
    slow: float = 0.0
    """Pace lost to a degraded slice (`rate` would be this much higher without it)."""
    running: bool = False
    first_placed_at: datetime | None = None
    finished_at: datetime | None = None
    ever_cross_rack: bool = False
    restarts: int = 0
    # Current run segment (since the last start or restart).
    mark: datetime | None = None
    overhead: float = 0.0
    stall_cause: str = ""
    """The cause charged for `overhead` as it is paid ("" for a restart the events charge)."""
    progress: float = 0.0
    progress_gpu_s: float = 0.0
    unmeasured: float = 0.0
    """Progress of this segment made before measuring started (its GPU-time is not counted)."""
    # Accounts.
    alloc_mark: datetime | None = None
    allocated_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0
    penalty_gpu_s: float = 0.0
    """Allocated GPU-seconds weighted by the penalty in force (for its mean)."""
    cross_rack_gpu_s: float = 0.0
    """Allocated GPU-seconds lost to slower steps: weighted by penalty / (1 + penalty)."""
    worst_penalty: float = 0.0
    lost_gpu_s: dict[str, float] = field(default_factory=dict)
    """GPU-seconds lost to swaps and degrades, by cause (`swap`, `degrade`)."""

    @classmethod
    def of(cls, arrival: Arrival) -> JobRun:
        """A job that has just arrived."""
        interval = arrival.spec.checkpoint_interval
        return cls(
            arrival=arrival,
            remaining=arrival.work.total_seconds(),
            checkpoint=interval.total_seconds() if interval else None,
            keeps_progress=arrival.spec.keeps_progress,
        )

    @property
    def nodes(self) -> int:
        """Nodes held now."""
        return sum(len(n) for n in self.slices.values())

    def account(self, now: datetime) -> None:
        """Bring the GPU-time accounts and the run segment up to `now`."""
        if self.alloc_mark is not None:
            dt = (now - self.alloc_mark).total_seconds()
            self.allocated_gpu_s += self.gpus * dt
            self.penalty_gpu_s += self.gpus * dt * self.penalty
            self.cross_rack_gpu_s += self.gpus * dt * self.penalty / (1.0 + self.penalty)
            self.alloc_mark = now
        if self.running and self.mark is not None:
            dt = (now - self.mark).total_seconds()
            paid = min(self.overhead, dt)
            self.overhead -= paid
            if paid and self.stall_cause:
                self._charge(self.stall_cause, paid * self.gpus)
            productive = dt - paid
            self.progress += productive * self.rate
            self.progress_gpu_s += productive * self.rate * self.gpus
            if self.slow:
                self._charge("degrade", productive * self.slow * self.gpus)
            self.mark = now

    def _charge(self, cause: str, gpu_s: float) -> None:
        self.lost_gpu_s[cause] = self.lost_gpu_s.get(cause, 0.0) + gpu_s

    def hold(self, now: datetime, slices: dict[int, tuple[NodeId, ...]], gpus: int) -> None:
        """The job holds these slices from `now` on (a placement, a swap, a degrade)."""
        self.account(now)
        self.slices = slices
        self.gpus = gpus
        if self.alloc_mark is None:
            self.alloc_mark = now
        if self.first_placed_at is None:
            self.first_placed_at = now

    def pace(
        self, now: datetime, penalty: float, rate: float, *, cross_rack: bool, slow: float = 0.0
    ) -> None:
        """From `now` on, steps are `penalty` slower and progress runs at `rate`, `slow` of
        the pace lost to a degraded slice."""
        self.account(now)
        self.penalty = penalty
        self.worst_penalty = max(self.worst_penalty, penalty)
        self.ever_cross_rack = self.ever_cross_rack or cross_rack
        self.rate = rate
        self.slow = slow

    def release(self, now: datetime) -> None:
        """The job gave its nodes back."""
        self.account(now)
        self.slices = {}
        self.gpus = 0
        self.alloc_mark = None
        self.penalty = 0.0

    def start(self, now: datetime, restart_overhead: timedelta) -> None:
        """The job's processes run: progress resumes (after the overhead, on a restart)."""
        self.account(now)
        self.running = True
        self.mark = now
        self.overhead = restart_overhead.total_seconds() if self.restarts else 0.0
        self.stall_cause = ""
        self.progress = self.unmeasured = 0.0
        self.progress_gpu_s = 0.0

    def finish_time(self) -> datetime:
        """When the job completes if nothing happens to it."""
        assert self.running and self.mark is not None
        left = max(0.0, self.remaining - self.progress)
        return self.mark + timedelta(seconds=self.overhead + left / max(self.rate, 1e-9))

    def restart(
        self,
        now: datetime,
        restart_overhead: timedelta,
        *,
        keeps_running: bool,
        cause: str = "",
        memory_checkpoint: float | None = None,
    ) -> None:
        """Back to the last checkpoint: a preemption (`keeps_running` False), a migration, or
        (with `cause` "swap" or "degrade") a node failure the job survives in place, whose
        rollback and stall are charged to `cause`; `memory_checkpoint` is the in-memory
        checkpoint interval (seconds of progress) such a failure may fall back to."""
        self.account(now)
        lost = self._lost(memory_checkpoint)
        kept = self.progress - lost
        self.remaining = max(0.0, self.remaining - kept)
        # What is lost is the latest progress: count the measured part of what is kept.
        measured = self.progress - self.unmeasured
        if measured > 0:
            per_second = self.progress_gpu_s / measured
            self.useful_gpu_s += per_second * max(0.0, kept - self.unmeasured)
            if cause:
                self._charge(cause, per_second * min(lost, measured))
        self.progress = self.unmeasured = 0.0
        self.progress_gpu_s = 0.0
        self.restarts += 1
        if keeps_running and self.running:
            self.overhead = restart_overhead.total_seconds()
            self.stall_cause = cause
            self.mark = now
        else:
            self.running = False
            self.mark = None

    def _lost(self, memory_checkpoint: float | None = None) -> float:
        """Progress since the last checkpoint kept: on disk, or in memory when given."""
        if self.keeps_progress:
            return 0.0
        lost = self.progress if self.checkpoint is None else self.progress % self.checkpoint
        if memory_checkpoint is not None:
            lost = min(lost, self.progress % memory_checkpoint)
        return lost

    def complete(self, now: datetime) -> None:
        """The job finished: all its progress is kept."""
        self.account(now)
        self.useful_gpu_s += self.progress_gpu_s
        self.remaining = 0.0
        self.progress = 0.0
        self.progress_gpu_s = 0.0
        self.running = False
        self.finished_at = now
        self.release(now)

    def measure(self, now: datetime) -> None:
        """Measuring starts at `now`: the accounts restart from zero (the run goes on)."""
        self.account(now)
        self.allocated_gpu_s = self.useful_gpu_s = 0.0
        self.penalty_gpu_s = self.cross_rack_gpu_s = 0.0
        self.progress_gpu_s = 0.0
        self.lost_gpu_s.clear()
        self.unmeasured = self.progress
        self.worst_penalty = self.penalty

    def close(self, now: datetime) -> None:
        """The simulation ends: progress not yet checkpointed counts (the job goes on)."""
        self.account(now)
        self.useful_gpu_s += self.progress_gpu_s
        self.progress_gpu_s = 0.0
