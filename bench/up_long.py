"""A long-running `rackplane up`: what the broker, the worker and an operator's commands cost as
the demo's log grows (issues 20 and 21).

    python -m bench.up_long [--broker tansu|kafka] [--minutes 12] [--every 48]

Starts `rackplane up --headless --tansu` on the 128-rack example (`--kafka` for `--broker
kafka`: a local Apache Kafka, Java 17+), waits until its cluster runs jobs, then every
`--every` seconds for `--minutes`: the share of a core the broker process and the worker used
since the last sample (from /proc), the broker's resident memory, the 1-minute load, and one
`rackplane status` and one `submit --no-wait` timed as fresh processes. Prints one markdown row
a sample. Figures: docs/BENCHMARKS.md, "A long-running up".
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.cli import _RACKPLANE, CLUSTER, _live_up, _Runs
from bench.streams import cpu_seconds_of


def _descendants(root: int) -> dict[int, str]:
    """PID -> command line of every process under `root` (what `up` started: the brokers lead
    their own process groups, so the tree, not the group, finds them)."""
    parent: dict[int, int] = {}
    cmdline: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parent[int(entry.name)] = int(stat[1])  # field 4 of stat: the parent's PID
            cmdline[int(entry.name)] = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            )
        except (OSError, IndexError, ValueError):
            continue
    out: dict[int, str] = {}
    for pid in parent:
        up = parent[pid]
        while up > 1 and up != root:
            up = parent.get(up, 0)
        if up == root:
            out[pid] = cmdline[pid]
    return out


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.up_long", description=__doc__)
    parser.add_argument("--broker", choices=("tansu", "kafka"), default="tansu")
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--every", type=float, default=48.0)
    args = parser.parse_args(argv)
    extra = (f"--{args.broker}",)
    started: list[int] = []
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    with _live_up(say, extra, started) as broker:
        procs = _descendants(started[0])
        pattern = "kafka.Kafka" if args.broker == "kafka" else "tansu"
        (broker_pid,) = [p for p, cmd in procs.items() if pattern in cmd]
        (worker_pid,) = [p for p, cmd in procs.items() if " worker " in cmd]
        print(f"| minute | {args.broker} CPU, share of a core | worker CPU | {args.broker} RSS MB "
              "| load 1m | status s | submit --no-wait s |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        t0 = time.monotonic()
        last = (t0, cpu_seconds_of(broker_pid), cpu_seconds_of(worker_pid))
        n = 0
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(max(0.0, t0 + (n + 1) * args.every - time.monotonic()))
            n += 1
            now, b, w = time.monotonic(), cpu_seconds_of(broker_pid), cpu_seconds_of(worker_pid)
            span = now - last[0]
            share_b, share_w = (b - last[1]) / span, (w - last[2]) / span
            last = (now, b, w)
            status, submit = _Runs(), _Runs()
            status.time([*_RACKPLANE, "status", "--broker", broker])
            job = f"up-long-{os.getpid()}-{n}"
            submit.time([*_RACKPLANE, "submit", "--cluster", CLUSTER, "--nodes", "2",
                         "--job", job, "--no-wait", "--broker", broker])  # fmt: skip
            print(f"| {(now - t0) / 60:.1f} | {share_b:.2f} | {share_w:.2f} | "
                  f"{_rss_mb(broker_pid):.0f} | {os.getloadavg()[0]:.2f} | "
                  f"{status.wall[0]:.2f} | {submit.wall[0]:.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
