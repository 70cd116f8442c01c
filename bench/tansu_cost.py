"""What each request costs the embedded broker (Tansu 0.6.0) as a partition's batches grow.

    python -m bench.tansu_cost [--batches 1000,10000,20000,40000]

One fresh embedded broker; one partition filled with one-record batches (as commands and
events arrive: one a batch), and at each size the broker's CPU (from /proc) for: a produce;
a ListOffsets (latest); a fetch that waits 20 ms at the end and gets nothing; and a consumer
tailing the partition (aiokafka, 20 ms fetch wait) while 200 records arrive 20 ms apart, per
record read, with the records' latency. Prints a markdown table. Figures: docs/BENCHMARKS.md,
"A long-running up".
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest

from bench.streams import cpu_seconds_of
from rackplane.streams import EmbeddedBroker

TOPIC = "bench-tansu-cost"


async def _tail(consumer: AIOKafkaConsumer, stop: asyncio.Event, sent: dict[int, float],
                latency: list[float]) -> int:  # fmt: skip
    read = 0
    while not stop.is_set():
        got = await consumer.getmany(timeout_ms=100)
        now = time.perf_counter()
        for records in got.values():
            for r in records:
                read += 1
                t = sent.pop(r.offset, None)
                if t is not None:
                    latency.append(1000 * (now - t))
    return read


async def run(url: str, pid: int, sizes: list[int]) -> list[dict[str, float]]:
    boot = url.removeprefix("kafka://")
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=0)
    await producer.start()
    client = AIOKafkaClient(bootstrap_servers=boot)
    await client.bootstrap()
    probe = AIOKafkaConsumer(bootstrap_servers=boot)
    await probe.start()
    tp = TopicPartition(TOPIC, 0)
    rows: list[dict[str, float]] = []
    try:
        await producer.send_and_wait(TOPIC, b"x", partition=0)
        node = client.cluster.brokers().pop().nodeId
        total = 1
        for size in sizes:
            n, c0 = size - total, cpu_seconds_of(pid)
            while total < size:
                await producer.send_and_wait(TOPIC, b"y" * 100, partition=0)
                total += 1
            produce = 1000 * (cpu_seconds_of(pid) - c0) / max(n, 1)
            row = {"batches": float(total), "produce ms": produce}
            c0 = cpu_seconds_of(pid)
            for _ in range(50):
                await probe.end_offsets([tp])
            row["ListOffsets ms"] = 1000 * (cpu_seconds_of(pid) - c0) / 50
            idle = FetchRequest(20, 1, 1 << 20, 0, [(TOPIC, [(0, total, 1 << 20)])])
            c0 = cpu_seconds_of(pid)
            for _ in range(50):
                await client.send(node, idle)
            row["idle 20 ms fetch ms"] = 1000 * (cpu_seconds_of(pid) - c0) / 50
            consumer = AIOKafkaConsumer(bootstrap_servers=boot, fetch_max_wait_ms=20)
            await consumer.start()
            consumer.assign([tp])
            consumer.seek(tp, total)
            stop = asyncio.Event()
            sent: dict[int, float] = {}
            latency: list[float] = []
            task = asyncio.create_task(_tail(consumer, stop, sent, latency))
            await asyncio.sleep(1.0)
            c0 = cpu_seconds_of(pid)
            for _ in range(200):
                t = time.perf_counter()
                meta = await producer.send_and_wait(TOPIC, b"z" * 100, partition=0)
                sent[meta.offset] = t
                total += 1
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)
            row["tailing, per record ms"] = 1000 * (cpu_seconds_of(pid) - c0) / 200
            stop.set()
            read = await task
            await consumer.stop()
            row["read"] = float(read)
            row["latency p50 ms"] = statistics.median(latency) if latency else float("nan")
            rows.append(row)
            print(row, flush=True)
    finally:
        await probe.stop()
        await client.close()
        await producer.stop()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tansu_cost", description=__doc__)
    parser.add_argument("--batches", default="1000,10000,20000,40000")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.batches.split(",")]
    with EmbeddedBroker() as broker:
        port = broker.url.rsplit(":", 1)[1]  # its listener is on its command line
        out = subprocess.check_output(["pgrep", "-f", f"tansu.*127.0.0.1:{port}"], text=True)
        rows = asyncio.run(run(broker.url, int(out.split()[0]), sizes))
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(f"{r[k]:,.0f}" if k in ("batches", "read") else f"{r[k]:.2f}"
                                for k in keys) + " |")  # fmt: skip


if __name__ == "__main__":
    main()
