"""The recovery model: what a swap and a degrade cost the job they happen to.

A node fails under a running slice; the controller swaps it for a spare or, under NTP, lets
the slice go on without it (`policies/spare_swap.py`). Neither is free. The simulated runtime
(`_runtime`) charges, with the settings of a scenario's `recovery:` section:

1. Rollback, for both: the whole job goes back to its last checkpoint, in memory or on disk,
   whichever is later. The job's data-parallel replicas step together: the step that the
   failure broke is lost on every replica, and frameworks restart every rank from one
   checkpoint (the other replicas' progress since it is thrown away with the broken one's), so
   the charge is the job's GPUs x the work since that checkpoint, not only the failed slice's.
   Disk checkpoints come every `checkpoint_interval` of the job (`checkpoint_minutes` of a
   workload class, 30 by default); `memory_checkpoint_minutes` adds in-memory checkpoints,
   which survive a node failure because they are kept in the CPU memory of other nodes
   (Gemini, SOSP 2023, checkpoints to CPU memory as often as every training step;
   https://www.amazon.science/blog/more-efficient-recovery-from-failures-during-large-ml-model-training).
   Off by default: the job's own interval is what it checkpoints unless a scenario says more.
   Jobs that keep their progress (interactive sessions, inference services) lose none.
2. Stall, for both: the whole job waits `swap_stall_minutes` while the replacement node joins
   and every rank restarts from the checkpoint, or `degrade_stall_minutes` while it restarts
   on the remaining nodes at the lower TP degree. Default: the cluster's `restart_overhead`
   (10 minutes unless configured), the time a preempted or migrated job needs to restart,
   because a swap or a degrade restarts the job the same way. Ten minutes is the low end of
   what loading a checkpoint from remote storage alone takes (10 to 20 minutes, the same
   Amazon Science source): set it from your own restart times.
3. Pace, for a degrade: while a slice runs on k of its n nodes the job steps at the pace of its
   slowest replica. Without a power boost that replica does its share of the work on k/n of
   the GPUs: pace k/n. With the cluster's `ntp_power_boost` on, the remaining GPUs run at
   boosted clocks, `power_boost_speedup` times as fast: pace min(1, k/n x speedup). The
   default 8/7 is DESIGN.md's NTP fact: a replica that drops from TP 8 to TP 7 keeps pace with
   the healthy ones under a power boost, so its GPUs must run at least 8/7 as fast (the NTP
   paper, arXiv 2504.06095, reaches this with a rack designed for the extra power and heat; a
   stock rack may boost less: 1.0 is no boost at all). Resharding overlapped with the backward
   pass costs the healthy replicas under 1% (DESIGN.md); `reshard_overhead` charges that bound,
   0.01, for as long as any slice of the job is degraded.

The GPU-hours charged are reported per cause (`gpu_hours_lost_swaps`, `..._degrades`) and are
part of the gap between GPU-hours allocated and useful, so goodput and the cost of a useful
GPU-hour account for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_POWER_BOOST_SPEEDUP = 8 / 7
"""TP 8 -> 7 keeps pace under a power boost (DESIGN.md): 8/7 as fast per GPU."""
DEFAULT_RESHARD_OVERHEAD = 0.01
"""Nonuniform TP's reshard overhead on healthy replicas: "<1%" (DESIGN.md), charged at 1%."""


class RecoveryModel(BaseModel):
    """What swaps and degrades cost a running job (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    swap_stall_minutes: float | None = Field(default=None, ge=0)
    """The whole job waits this long while the replacement joins; None: `restart_overhead`."""
    degrade_stall_minutes: float | None = Field(default=None, ge=0)
    """The whole job waits this long while it restarts on fewer nodes; None: `restart_overhead`."""
    memory_checkpoint_minutes: float | None = Field(default=None, gt=0)
    """In-memory checkpoints every this many minutes of progress (a node failure loses the work
    since the later of this and the job's disk checkpoint); None: disk checkpoints only."""
    power_boost_speedup: float = Field(default=DEFAULT_POWER_BOOST_SPEEDUP, ge=1, le=4)
    """How many times as fast a boosted GPU of a degraded slice runs (with `ntp_power_boost`)."""
    reshard_overhead: float = Field(default=DEFAULT_RESHARD_OVERHEAD, ge=0, lt=1)
    """Share of step time the job loses to resharding while a slice is degraded."""

    def swap_stall(self, restart_overhead: timedelta) -> timedelta:
        """The stall of a swap, given the cluster's restart overhead."""
        return _minutes(self.swap_stall_minutes, restart_overhead)

    def degrade_stall(self, restart_overhead: timedelta) -> timedelta:
        """The stall of a degrade, given the cluster's restart overhead."""
        return _minutes(self.degrade_stall_minutes, restart_overhead)

    @property
    def memory_checkpoint_seconds(self) -> float | None:
        """The in-memory checkpoint interval in seconds of progress (None: none)."""
        m = self.memory_checkpoint_minutes
        return None if m is None else m * 60.0

    def slice_pace(self, nodes: int, of: int, *, boosted: bool) -> float:
        """Pace of a replica on `nodes` of its `of` nodes, before the reshard overhead."""
        if nodes >= of:
            return 1.0
        share = nodes / of
        return min(1.0, share * self.power_boost_speedup) if boosted else share

    def job_pace(self, slices: Iterable[tuple[int, int]], *, boosted: bool) -> float:
        """Pace of a job whose slices run on (nodes, of nodes): its slowest replica's, less
        the reshard overhead while any slice is degraded; 1 when none is."""
        pace = 1.0
        degraded = False
        for nodes, of in slices:
            if nodes < of:
                degraded = True
                pace = min(pace, self.slice_pace(nodes, of, boosted=boosted))
        return pace * (1.0 - self.reshard_overhead) if degraded else pace


def _minutes(value: float | None, default: timedelta) -> timedelta:
    return default if value is None else timedelta(minutes=value)
