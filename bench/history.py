"""History: ingest into DuckDB and replay, for a synthetic history of N events (default 1M).

The history is a valid event log of a generated 128-rack cluster (18 nodes x 4 GPUs per
rack): rounds in which every rack gets a 16-node job (submitted, placed, started), then every
job completes; a node fails and is repaired every few rounds. Four events per job, so 1M
events are ~250k jobs. The events are built once, before anything is timed.

Measured in one process (the ingest overlaps its inserts in a second thread):
- `ingest`: `DuckDBAuditSink.record_events` in batches (the JSON payload, the hash chain, an
  insert per row group deriving the typed columns, overlapped with the next row group's
  serialization; one transaction per batch), into a new file, closed (checkpointed) at the
  end: the first 100k events in batches of 500 (what a streaming worker hands over), then all
  of them in batches of 245,760 (two DuckDB row groups of 122,880 rows: written straight to
  the file, not through the WAL; only the last, shorter batch goes through the WAL);
- `read`: `HistoryReader.events` (the payloads fetched and decoded into typed events);
- `fold`: `state_at` over the decoded events (the core's `evolve`);
- `replay`: read + fold, what `rackplane replay` does;
- `verify`: the hash chains walked by `rackplane history verify`.

Each stage reports wall time and CPU time (the machine may be shared).
Run on its own: `python -m bench.history` (`--events N`, `--batch N`, `--json FILE`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.__main__ import _markdown, machine
from rackplane.history import DuckDBAuditSink, open_history, state_at
from rackplane.history.verify import verify
from rackplane.models import (
    Event,
    JobCompleted,
    JobPlaced,
    JobSpec,
    JobStarted,
    JobSubmitted,
    NodeFailed,
    NodeRepaired,
    PlacedSlice,
    PolicySettings,
    Rack,
    Topology,
    TopologyRegistered,
)

Progress = Callable[[str], None]
BATCH = 2 * 122_880
"""Events per `record_events` call of the bulk ingest: two DuckDB row groups."""
CLUSTER = "bench"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def synthetic_history(n: int, racks: int = 128) -> list[Event]:
    """A valid log of about `n` events (see the module docstring)."""
    return list(itertools.islice(synthetic_log(racks), n))


def synthetic_log(racks: int = 128) -> Iterator[Event]:
    """The log of `synthetic_history`, one event at a time, for ever (bench.rebuild streams
    10M events onto a broker: they do not fit in memory as objects)."""
    rack_list = [
        Rack(
            id=f"r{r:04d}",
            pod=f"p{r // 8:03d}",
            nodes=tuple(f"r{r:04d}n{i:02d}" for i in range(18)),
        )
        for r in range(racks)
    ]
    topology = Topology(cluster=CLUSTER, racks=tuple(rack_list))
    at = T0
    seq = 0

    def env() -> dict[str, Any]:
        nonlocal seq, at
        seq += 1
        at += timedelta(seconds=1)
        return {"id": f"{CLUSTER}/{seq}", "cluster": CLUSTER, "seq": seq, "at": at}

    yield TopologyRegistered(**env(), actor="operator", topology=topology,
                             settings=PolicySettings())  # fmt: skip
    job = 0
    rnd = 0
    while True:
        rnd += 1
        placed = []
        for r in rack_list:
            job += 1
            jid = f"j{job}"
            nodes = r.nodes[:16]
            spec = JobSpec(id=jid, nodes=16, slice_size=16, expected_duration=timedelta(hours=2))
            yield JobSubmitted(**env(), actor="user", causation_id=f"s{job}", job=spec)
            yield JobPlaced(**env(), actor="policy:tas", causation_id=f"tas:{job}",
                            job=jid, slices=(PlacedSlice(index=0, nodes=nodes,
                            racks=(r.id,)),), explanation="best fit by rack")  # fmt: skip
            yield JobStarted(**env(), actor="runtime", job=jid)
            placed.append((jid, nodes))
        if rnd % 4 == 0:
            r = rack_list[rnd % racks]
            yield NodeFailed(**env(), actor="gpu_manager", node=r.nodes[17], rack=r.id,
                             cause="XID 79")  # fmt: skip
            yield NodeRepaired(**env(), actor="operator", node=r.nodes[17], rack=r.id)
        for jid, nodes in placed:
            yield JobCompleted(**env(), actor="runtime", job=jid, released=nodes)


class _Clock:
    """Wall and CPU time of one stage: CPU time shows what the stage costs when the machine
    is shared (wall time includes waiting for the CPU)."""

    def __enter__(self) -> _Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu

    def row(self, stage: str, n: int) -> dict[str, Any]:
        return {
            "stage": stage,
            "events": n,
            "wall_s": round(self.wall, 2),
            "events_per_s": round(n / self.wall),
            "cpu_s": round(self.cpu, 2),
            "events_per_cpu_s": round(n / self.cpu),
        }


def _ingest(path: Path, events: list[Event], batch: int) -> _Clock:
    with _Clock() as clock:
        sink = DuckDBAuditSink(path)
        for i in range(0, len(events), batch):
            sink.record_events(events[i : i + batch])
        sink.close()
    return clock


def run(n: int, batch: int, say: Progress, *, small_batch: int = 500) -> list[dict[str, Any]]:
    """Build the history, then time each stage; one row per stage."""
    say(f"building {n:,} events")
    events = synthetic_history(n)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sample = min(n, 100_000)
        say(f"ingest of {sample:,} events in batches of {small_batch} (a worker's batches)")
        clock = _ingest(Path(tmp) / "small.duckdb", events[:sample], small_batch)
        rows.append(clock.row(f"ingest, batches of {small_batch:,}", sample))
        path = Path(tmp) / "bench.duckdb"
        say(f"ingest of {n:,} events in batches of {batch:,}")
        rows.append(_ingest(path, events, batch).row(f"ingest, batches of {batch:,}", n))
        del events
        with open_history(path) as reader:
            say("read")
            with _Clock() as read:
                back = reader.events(CLUSTER)
            rows.append(read.row("read (fetch + decode)", n))
            say("fold")
            with _Clock() as fold:
                state = state_at(back)
            assert state.seq == n
            rows.append(fold.row("fold (state_at, evolve)", n))
            both = _Clock()
            both.wall, both.cpu = read.wall + fold.wall, read.cpu + fold.cpu
            rows.append(both.row("replay (read + fold)", n))
            say("verify")
            with _Clock() as check:
                assert all(r.ok for r in verify(reader))
            rows.append(check.row("verify (hash chains, typed columns)", n))
        size = path.stat().st_size / 2**20
        rows.append({"stage": f"file size: {size:,.0f} MiB ({size * 2**20 / n:,.0f} B/event)"})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from rich.console import Console

    err = Console(stderr=True)
    rows = run(args.events, args.batch, lambda s: err.print(s))
    print(f"{machine()} — {datetime.now(UTC).isoformat()}")
    print(_markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
