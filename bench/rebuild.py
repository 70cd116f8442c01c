"""Rebuild: how long a worker takes to get a partition's states back after a restart, as the
log grows (1M and 10M events), with a checkpoint and without.

The log is `bench.history`'s synthetic one (`synthetic_log`: a 128-rack cluster; rounds in
which every rack gets a 16-node job, submitted, placed, started, then completed; a node failed
and repaired every few rounds; four events per job), streamed onto a 1-partition events topic
in record batches as it is generated (10M events do not fit in memory as objects). The state
is folded along the way; at `n - tail` events a checkpoint of the partition is saved through
`SnapshotStore`, as the controller does (it checkpoints every 10,000 events, so `tail` is what
a restart at the worst moment reads). Note what the state holds at 10M events: ~2.5M
finished jobs (`ClusterState.finished` keeps every job id ever finished) and a full id window.

Measured, each by a fresh `Replicas` (what a restarted worker's agents build):
- `checkpoint_s`: `Replicas.load` with the snapshots store: newest checkpoint (marker, chunks,
  digest, decode) plus the tail's events (marker, fetch, seq checks, fold);
- `from_zero_s`: `Replicas.load` with no checkpoint: every event from offset 0 (only when
  `--from-zero` is given at 10M: minutes);
- `snapshot_mb`: the checkpoint's snapshot.

Run on its own: `python -m bench.rebuild` (`--events 1000000,10000000`, `--tail N`,
`--broker URL`, `--from-zero`, `--json FILE`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.history import CLUSTER, synthetic_log
from rackplane.models import (
    EVENTS,
)
from rackplane.projections import ClusterState, fold, initial_state
from rackplane.projections.snapshot import encode_state
from rackplane.streams.eventlog import EventLog
from rackplane.streams.replicas import Replicas, StoreCheckpoints
from rackplane.streams.snapshots import (
    Checkpoint,
    Snapshot,
    SnapshotStore,
    ensure_snapshots_topic,
)

Progress = Callable[[str], None]
CHUNK = 20_000
"""Events generated, encoded, sent and folded at a time."""
MAX_BYTES = 4 * 1_048_576


async def write_log(
    bootstrap: str, topic: str, n: int, checkpoint_at: int, say: Progress
) -> tuple[ClusterState, int, float]:
    """Send `n` events to partition 0 of `topic`; return the state after `checkpoint_at`
    events, the offset of that event, and the seconds it took."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_batch_size=MAX_BYTES,
        max_request_size=MAX_BYTES, linger_ms=5,
    )  # fmt: skip
    await producer.start()
    state, sent = initial_state(CLUSTER), 0
    offset = checkpoint_at - 1  # a fresh topic: event i at offset i
    started = time.monotonic()
    events = synthetic_log()
    try:
        while sent < n:
            chunk = [next(events) for _ in range(min(CHUNK, n - sent))]
            if sent < checkpoint_at:
                state = fold(state, chunk[: checkpoint_at - sent])
            pending = []
            batch = producer.create_batch()
            for e in chunk:
                value = EVENTS.dump_json(e)
                if batch.append(key=CLUSTER.encode(), value=value, timestamp=None) is None:
                    pending.append(await producer.send_batch(batch, topic, partition=0))
                    batch = producer.create_batch()
                    batch.append(key=CLUSTER.encode(), value=value, timestamp=None)
            pending.append(await producer.send_batch(batch, topic, partition=0))
            await asyncio.gather(*pending)
            sent += len(chunk)
            if sent % 500_000 < CHUNK:
                say(f"rebuild: {sent:,} of {n:,} events written")
    finally:
        await producer.stop()
    return state, offset, time.monotonic() - started


async def rebuild_s(bootstrap: str, prefix: str, store: SnapshotStore | None) -> float:
    """Seconds a fresh `Replicas` takes to load partition 0."""
    kafka = {"bootstrap_servers": bootstrap}
    log = EventLog(kafka, f"{prefix}.events", fetch_wait_ms=20)
    replicas = Replicas(
        log, partitions=1, checkpoints=StoreCheckpoints(store) if store is not None else None
    )
    started = time.monotonic()
    try:
        await replicas.load(0)
    finally:
        await log.stop()
    took = time.monotonic() - started
    assert replicas.states[CLUSTER].seq > 0 and not replicas.broken
    return took


async def row(url: str, n: int, tail: int, from_zero: bool, say: Progress) -> dict[str, Any]:
    bootstrap = url.removeprefix("kafka://")
    prefix = f"bench-rebuild-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        forever = {"retention.ms": "-1", "retention.bytes": "-1"}
        configs = {**forever, "max.message.bytes": str(MAX_BYTES)}
        await admin.create_topics([NewTopic(f"{prefix}.events", 1, 1, topic_configs=configs)])
    finally:
        await admin.close()
    kafka = {"bootstrap_servers": bootstrap}
    await ensure_snapshots_topic(
        kafka, f"{prefix}.snapshots", partitions=1, replication=1, max_message_bytes=MAX_BYTES
    )
    say(f"rebuild: writing {n:,} events")
    state, offset, write_s = await write_log(bootstrap, f"{prefix}.events", n, n - tail, say)
    store = SnapshotStore(kafka, f"{prefix}.snapshots", max_message_bytes=MAX_BYTES)
    try:
        say(f"rebuild: checkpoint at {n - tail:,} events")
        await store.save(
            Checkpoint(0, offset, {CLUSTER: Snapshot(CLUSTER, state, events_offset=offset)})
        )
        say(f"rebuild: {n:,} events from the checkpoint")
        with_checkpoint = await rebuild_s(bootstrap, prefix, store)
    finally:
        await store.stop()
    out: dict[str, Any] = {
        "events": n,
        "tail": tail,
        "finished_jobs": len(state.finished),
        "snapshot_mb": round(len(encode_state(state)) / 1e6, 2),
        "checkpoint_s": round(with_checkpoint, 2),
        "write_s": round(write_s, 1),
    }
    if from_zero or n <= 1_000_000:
        say(f"rebuild: {n:,} events from offset 0")
        out["from_zero_s"] = round(await rebuild_s(bootstrap, prefix, None), 2)
    return out


async def run_all(
    url: str,
    say: Progress,
    *,
    sizes: tuple[int, ...] = (1_000_000, 10_000_000),
    tail: int = 10_000,
    from_zero: bool = False,
) -> list[dict[str, Any]]:
    return [await row(url, n, tail, from_zero, say) for n in sizes]


def main(argv: list[str] | None = None) -> int:
    from bench.__main__ import _broker, report

    parser = argparse.ArgumentParser(prog="python -m bench.rebuild", description=__doc__)
    parser.add_argument("--events", default="1000000,10000000", help="log sizes, comma-separated")
    parser.add_argument("--tail", type=int, default=10_000, help="events after the checkpoint")
    parser.add_argument("--from-zero", action="store_true", help="also from offset 0 past 1M")
    parser.add_argument("--broker", metavar="URL", help="kafka://HOST:PORT (default: Tansu)")
    parser.add_argument("--json", type=Path, help="write the raw rows here")
    args = parser.parse_args(argv)
    sizes = tuple(int(x) for x in args.events.split(","))
    with _broker(args.broker) as url:
        rows = asyncio.run(
            run_all(url, lambda s: print(s, file=sys.stderr), sizes=sizes, tail=args.tail,
                    from_zero=args.from_zero)
        )  # fmt: skip
    report("Rebuild after a restart", rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
