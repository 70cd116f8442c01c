"""How soon a live worker decides a submit (issue 20): the worker's part of a client command.

    python -m bench.answer [--submits 20] [--gap 1.5]

Starts `rackplane up --headless --tansu` on the 128-rack example (the embedded broker, the demo
load on: `bench.cli._live_up`), then sends `--submits` `SubmitJob`s over one client connection,
`--gap` seconds apart, each waiting for its direct events (`submit --no-wait`'s wait). Per
submit: the whole answer (sent -> its event read back), split at the event's `at` (the worker's
clock when it decided; one machine, one clock) into *decided* (the produce, the worker's fetch,
its queue, the decision) and *read back*. No Python start or import is in these figures:
`bench.cli` and `bench.cli_ab` time whole commands. Results: docs/BENCHMARKS.md, "Why every
other command waited half a second".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from bench.cli import CLUSTER, _live_up
from rackplane.config import load_settings
from rackplane.models import JobSpec, SubmitJob
from rackplane.streams.client import Client


async def probe(broker: str, submits: int, gap: float) -> list[dict[str, float]]:
    config = load_settings(flags={"broker": broker}).settings.stream_config()
    rows = []
    async with Client(config) as client:
        for _ in range(submits):
            job = JobSpec(id=f"answer-{uuid.uuid4().hex[:8]}", nodes=16)
            command = SubmitJob(
                id=f"bench-{uuid.uuid4().hex}", cluster=CLUSTER, actor="bench", job=job
            )
            sent, t = datetime.now(UTC), time.monotonic()
            events = await client.outcome(command, timeout=30, follow=False)
            answer = (time.monotonic() - t) * 1e3
            decided = (events[0].at - sent).total_seconds() * 1e3
            rows.append(
                {"answer_ms": answer, "decided_ms": decided, "read_back_ms": answer - decided}
            )
            await asyncio.sleep(gap)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.answer", description=__doc__)
    parser.add_argument("--submits", type=int, default=20)
    parser.add_argument("--gap", type=float, default=1.5, help="seconds between submits")
    args = parser.parse_args(argv)
    with _live_up(lambda m: print(m, file=sys.stderr)) as broker:
        rows = asyncio.run(probe(broker, args.submits, args.gap))
    answers = [r["answer_ms"] for r in rows]
    summary: dict[str, Any] = {
        "submits": len(rows),
        "answer_p50_ms": round(statistics.median(answers), 1),
        "answer_min_ms": round(min(answers), 1),
        "answer_max_ms": round(max(answers), 1),
        "answers_ms": [round(a, 1) for a in answers],
        "decided_ms": [round(r["decided_ms"], 1) for r in rows],
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
