"""Snapshots: encode, decode, save and load a cluster's state as clusters grow.

The state at each size (128, 1,024, 4,096 racks of 18 nodes) is built through the controller
(`decide` + `evolve`, the scheduler's own placements, as bench/_clusters.py does): about
2,000 jobs at 4,096 racks (in proportion below), sizes 1-128 nodes, most running, a tenth
left queued, a third of the rest then finished; failed, degraded and cordoned nodes; one
rack failed. The id window is then filled to its maximum, both generations full (2 x 200,000
ids), with ids of the forms the pipeline makes: policy proposals `tas:<seq>:<n>` (45%), the
GPU Manager's `gpu_manager:<node>:<sample time>` (45%), the CLI's `cli-<uuid4 hex>` (10%),
seqs 1-3 apart as if after a 10M-event log. (Filling it through `decide` would take 400,000
commands per size and give the codec the same kind of data.)

Measured:
- `encode_ms`, `decode_ms`: `encode_state` / `decode_state`, best of 3 (the machine is shared);
- `bytes`: the snapshot's size; `chunks`: records it takes at `max_message_bytes`;
- `save_ms`: `SnapshotStore.save` of a checkpoint holding that snapshot, by a fresh store
  (it first finds the partition's newest checkpoint; the encode is included);
- `load_ms`: `SnapshotStore.load` of it by a fresh store (marker, search for the newest
  checkpoint, chunks read by offset, digests checked, decode).

Run on its own: `python -m bench.snapshots` (`--quick`, `--broker URL`, `--json FILE`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from immutables import Map

from bench._clusters import T0, Folder, topology
from rackplane.models import (
    CompleteJob,
    CordonNode,
    Health,
    JobSpec,
    PolicySettings,
    RackHealth,
    RegisterTopology,
    ReportNodeHealth,
    ReportRackHealth,
    SubmitJob,
)
from rackplane.policies import Capacity
from rackplane.projections import ClusterState, SeenCommands, initial_state
from rackplane.projections.snapshot import decode_state, encode_state
from rackplane.projections.state import SEEN_COMMANDS_WINDOW

Progress = Callable[[str], None]
JOBS_AT_4096 = 3_000
LOG_EVENTS = 10_000_000
"""The seq the state is said to be at: a 10M-event log."""
SIZES = (1, 1, 2, 4, 8, 8, 16, 16, 16, 32, 64, 128)


def state_for(racks: int, seed: int = 7) -> ClusterState:
    """The benchmark's state at `racks` racks (see the module docstring)."""
    rng = random.Random(seed)
    f = Folder(initial_state(f"bench-{racks}"))
    f.send(RegisterTopology, topology=topology(racks), settings=PolicySettings())
    nodes = [n for r in f.state.index.racks for n in r.nodes] if f.state.index else []
    for n in rng.sample(nodes, k=racks // 8):  # health before placement: placed around
        health = rng.choice([Health.FAILED, Health.DEGRADED])
        f.send(ReportNodeHealth, node=n, health=health, cause="xid 79: fell off the bus")
    for n in rng.sample(nodes, k=racks // 16):
        f.send(CordonNode, node=n, reason="maintenance window")
    f.send(ReportRackHealth, rack="r0000", health=RackHealth.FAILED, cause="power shelf")
    capacity = Capacity(f.state)
    jobs = max(16, JOBS_AT_4096 * racks // 4096)
    placed: list[str] = []
    for j in range(jobs):
        spec = JobSpec(
            id=f"train-{j:05d}",
            name=f"pretrain shard {j}",
            owner=f"team-{j % 17}",
            nodes=rng.choice(SIZES),
            slice_size=16,
            priority=rng.randint(-2, 2),
            checkpoint_interval=timedelta(minutes=30),
        )
        if j % 10 == 9:
            f.send(SubmitJob, job=spec)  # left queued
        elif f.place(spec, capacity, start=True):
            placed.append(spec.id)
    f.now += timedelta(hours=1)
    for job in rng.sample(placed, k=len(placed) // 3):
        f.send(CompleteJob, job=job)
    return _with_full_window(f.state, rng)


def _with_full_window(state: ClusterState, rng: random.Random) -> ClusterState:
    seq = LOG_EVENTS - 3 * 2 * SEEN_COMMANDS_WINDOW
    nodes = list(state.nodes)
    generations: list[dict[str, int]] = [{}, {}]
    for g in generations:
        while len(g) < SEEN_COMMANDS_WINDOW:
            seq += rng.randint(1, 3)
            pick = rng.random()
            if pick < 0.45:
                name = rng.choice(("tas", "spare_swap", "defrag"))
                g[f"{name}:{seq - 1}:{rng.randint(0, 2)}"] = seq
            elif pick < 0.9:
                at = T0 + timedelta(seconds=seq * 0.37, microseconds=rng.randrange(10**6))
                g[f"gpu_manager:{rng.choice(nodes)}:{at.isoformat()}"] = seq
            else:
                g[f"cli-{uuid.UUID(int=rng.getrandbits(128), version=4).hex}"] = seq
    older, recent = generations
    return replace(
        state,
        seq=seq,
        seen=SeenCommands(Map(recent), Map(older)),
        applied=Map({p: rng.randrange(10**6, 10**7) for p in range(4)}),
    )


def best_ms(fn: Callable[[], object], repeat: int = 3) -> float:
    """The fastest of `repeat` calls, in milliseconds."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def codec_row(racks: int, progress: Progress) -> tuple[dict[str, Any], ClusterState]:
    progress(f"snapshots: building the state at {racks} racks")
    state = state_for(racks)
    progress(f"snapshots: encode/decode at {racks} racks")
    data = encode_state(state)
    assert decode_state(data) == state, "the snapshot does not round-trip"
    row = {
        "racks": racks,
        "nodes": len(state.nodes),
        "jobs": len(state.jobs),
        "finished": len(state.finished),
        "ids": len(state.seen),
        "bytes": len(data),
        "encode_ms": best_ms(lambda: encode_state(state)),
        "decode_ms": best_ms(lambda: decode_state(data)),
    }
    return row, state


async def store_row(url: str, state: ClusterState, max_message_bytes: int) -> dict[str, Any]:
    """Save a checkpoint holding `state` on a new snapshots topic, then load it back."""
    from rackplane.streams._snapshot_records import chunk_capacity
    from rackplane.streams.snapshots import (
        Checkpoint,
        Snapshot,
        SnapshotStore,
        ensure_snapshots_topic,
    )

    kafka = {"bootstrap_servers": url.removeprefix("kafka://")}
    topic = f"bench.snapshots.{uuid.uuid4().hex[:8]}"
    await ensure_snapshots_topic(
        kafka, topic, partitions=1, replication=1, max_message_bytes=max_message_bytes
    )
    saves, loads = [], []
    for i in range(3):
        # another events offset each time: the snapshot counts as changed, and is written
        at = 1_000 + i
        checkpoint = Checkpoint(0, at, {state.cluster: Snapshot(state.cluster, state, at)})
        writer = SnapshotStore(kafka, topic, max_message_bytes=max_message_bytes)
        await writer.start()
        try:
            t = time.perf_counter()
            await writer.save(checkpoint)
            saves.append(time.perf_counter() - t)
        finally:
            await writer.stop()
        reader = SnapshotStore(kafka, topic, max_message_bytes=max_message_bytes)
        await reader.start()
        try:
            t = time.perf_counter()
            loaded = await reader.load(0)
            loads.append(time.perf_counter() - t)
        finally:
            await reader.stop()
        assert loaded is not None and loaded.snapshots[state.cluster].state == state
    data = encode_state(state)
    room = chunk_capacity(
        state.cluster, state.seq, hashlib.sha256(data).hexdigest(), max_message_bytes
    )
    return {
        "chunks": -(-len(data) // room),
        "save_ms": min(saves) * 1e3,
        "load_ms": min(loads) * 1e3,
    }


async def run_all(
    url: str, progress: Progress, *, quick: bool = False, max_message_bytes: int = 1_048_576
) -> list[dict[str, Any]]:
    """One row per cluster size: bytes, encode, decode, save and load."""
    rows = []
    for racks in (128, 1024) if quick else (128, 1024, 4096):
        row, state = codec_row(racks, progress)
        progress(f"snapshots: save and load at {racks} racks")
        row |= await store_row(url, state, max_message_bytes)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    from bench.__main__ import _broker, report

    parser = argparse.ArgumentParser(prog="python -m bench.snapshots", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="128 and 1,024 racks only")
    parser.add_argument("--broker", metavar="URL", help="kafka://HOST:PORT (default: Tansu)")
    parser.add_argument("--json", type=Path, help="write the raw rows here")
    args = parser.parse_args(argv)
    with _broker(args.broker) as url:
        rows = asyncio.run(run_all(url, lambda _: None, quick=args.quick))
    report("Snapshots", rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
