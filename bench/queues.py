"""A scheduling cycle of a shared cluster: many queued jobs in many queues, fair share on.

The cluster: `racks` racks of 18 nodes (16 take work), 50 leaf queues (10 orgs of 5 teams)
sharing the nodes equally as nominal quota. Running jobs of 16 nodes fill it to `fill` of
its nodes, spread over the queues (some borrow); then 1,000 jobs wait, 1-64 nodes each, in
random queues. The cycle timed is `schedule(state)`, the scheduler's whole pass over the
queue (fair-share order, quota admission, placement, block records), on two states:

- `steady`: every waiting job already blocked (what a cycle after a completion meets most
  of the time: nothing changes, nothing is emitted);
- `first`: the same jobs before any was blocked (each gets its `BlockJob`, with standing).
"""

from __future__ import annotations

import random
import statistics
from datetime import timedelta
from typing import Any

from bench._clusters import Folder, topology
from bench.placement import Progress, pct, timings
from rackplane.models import (
    JobSpec,
    PolicySettings,
    QueueSpec,
    RegisterTopology,
    SubmitJob,
)
from rackplane.policies import Capacity, schedule
from rackplane.projections import ClusterState, initial_state

ORGS, TEAMS, WAITING = 10, 5, 1_000


def shared_cluster(racks: int, fill: float, seed: int = 7) -> tuple[ClusterState, ClusterState]:
    """The state before the first cycle, and after it (every waiting job blocked)."""
    rng = random.Random(seed)
    leaves = [f"o{o}-t{t}" for o in range(ORGS) for t in range(TEAMS)]
    nominal = racks * 16 // len(leaves)
    queues = [QueueSpec(name=f"o{o}") for o in range(ORGS)] + [
        QueueSpec(name=q, parent=q.split("-")[0], nominal_nodes=nominal) for q in leaves
    ]
    settings = PolicySettings(queues=tuple(queues))
    f = Folder(initial_state(f"bench-{racks}"))
    f.send(RegisterTopology, topology=topology(racks), settings=settings)
    capacity = Capacity(f.state)
    for j in range(int(racks * fill)):
        spec = JobSpec(id=f"run{j}", nodes=16, queue=rng.choice(leaves),
                       checkpoint_interval=timedelta(minutes=30))  # fmt: skip
        f.place(spec, capacity, start=True)
    for j in range(WAITING):
        spec = JobSpec(id=f"wait{j}", nodes=rng.randint(1, 64), queue=rng.choice(leaves),
                       priority=rng.randint(0, 3))  # fmt: skip
        f.send(SubmitJob, job=spec)
    first = f.state
    return first, f.settle()


def queue_cycle(racks: tuple[int, ...], repeat: int, progress: Progress) -> list[dict[str, Any]]:
    """p50/p99 of one scheduling cycle with 1,000 waiting jobs in 50 queues, per size."""
    rows = []
    for r in racks:
        progress(f"queues: shared cluster of {r} racks")
        first, steady = shared_cluster(r, fill=0.97)
        for name, state in (("steady", steady), ("first", first)):
            out: list[int] = []

            def once(s: ClusterState = state, o: list[int] = out) -> None:
                o.append(len(schedule(s)))

            ms = timings(once, repeat)
            rows.append(
                {
                    "racks": r,
                    "queues": ORGS * TEAMS,
                    "waiting": sum(1 for j in state.jobs.values() if j.status.value == "queued"),
                    "cycle": name,
                    "proposals": out[-1],
                    "p50_ms": statistics.median(ms),
                    "p99_ms": pct(ms, 0.99),
                }
            )
    return rows
