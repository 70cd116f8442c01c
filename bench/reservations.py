"""A scheduling cycle with a hero run's reservation standing (issue 19, dedicated reservations).

The shared cluster of `bench/queues.py` (`racks` racks at 97% fill, 50 leaf queues, 1,000
waiting jobs, every one already blocked: the `steady` cycle), and the same cluster with a
maintenance reservation of 16 racks starting in 5 hours (every waiting job, none with a time
limit, is kept from them), and with a started dedicated reservation of those racks for
queue `o0-t0`, 20 of whose waiting jobs name it (they wait inside it). Timed:
`schedule(state)`, in CPU time (`time.process_time`, so the load of a shared machine counts
less), 30 runs after one warm-up.

Run: `python -m bench.reservations` (prints a markdown table).
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import timedelta
from typing import Any

from bench._clusters import Folder
from bench.placement import pct
from bench.queues import shared_cluster
from rackplane.models import JobSpec, Reserve, StartReservation, SubmitJob
from rackplane.policies import schedule
from rackplane.projections import ClusterState

ROOM_RACKS, MEMBERS = 16, 20


def with_room(state: ClusterState) -> ClusterState:
    """`state` with a started reservation for queue o0-t0 and `MEMBERS` jobs naming it, after
    cycles until nothing more is placed."""
    f = Folder(state)
    assert state.at is not None and state.index is not None
    f.now = state.at + timedelta(seconds=1)
    racks = tuple(r.id for r in state.index.racks[:ROOM_RACKS])
    f.send(Reserve, reservation="hero", racks=racks, start=f.now, end=f.now + timedelta(days=2),
           queues=("o0-t0",))  # fmt: skip
    f.send(StartReservation, reservation="hero")
    for j in range(MEMBERS):
        spec = JobSpec(id=f"hero{j}", nodes=16 * (1 + j % 4), queue="o0-t0", reservation="hero")
        f.send(SubmitJob, job=spec)
    return f.settle()


def pending(state: ClusterState) -> ClusterState:
    """`state` with a maintenance reservation of the same racks starting in 5 hours: every
    waiting job (none has a time limit) is kept from its racks."""
    f = Folder(state)
    assert state.at is not None and state.index is not None
    f.now = state.at + timedelta(seconds=1)
    racks = tuple(r.id for r in state.index.racks[:ROOM_RACKS])
    begins = f.now + timedelta(hours=5)
    f.send(Reserve, reservation="maint", racks=racks, start=begins, end=begins + timedelta(hours=4))
    return f.state


def cpu_ms(state: ClusterState, repeat: int) -> tuple[list[float], int]:
    """CPU milliseconds per `schedule(state)` call (after one warm-up), and its proposals."""
    n = len(schedule(state))
    out = []
    for _ in range(repeat):
        t = time.process_time()
        schedule(state)
        out.append((time.process_time() - t) * 1e3)
    return out, n


def reservation_cycle(racks: tuple[int, ...], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for r in racks:
        _, steady = shared_cluster(r, fill=0.97)
        states = (("no reservation", steady), ("maintenance pending", pending(steady)),
                  ("hero room", with_room(steady)))  # fmt: skip
        for name, state in states:
            ms, n = cpu_ms(state, repeat)
            rows.append({"racks": r, "state": name, "proposals": n,
                         "p50_ms": statistics.median(ms), "p99_ms": pct(ms, 0.99)})  # fmt: skip
    return rows


if __name__ == "__main__":
    sizes = tuple(int(a) for a in sys.argv[1:]) or (128, 1024)
    print("| racks | state | proposals | p50 CPU ms | p99 CPU ms |")
    print("|---|---|---|---|---|")
    for row in reservation_cycle(sizes, 30):
        print(f"| {row['racks']} | {row['state']} | {row['proposals']} | {row['p50_ms']:.2f} | "
              f"{row['p99_ms']:.2f} |")  # fmt: skip
