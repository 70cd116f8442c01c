"""The truth is kept: the events topic holds everything, and the worker makes its topics.

Issue 15: the events topic as created had `retention.ms=604800000`, `cleanup.policy=delete`
(after a week a restart rebuilt an empty state), and on a fresh Apache Kafka `rackplane
worker` never created its topics (`--partitions` reached only Faust's changelogs): they got
the broker's default of 1 partition, and the first `register` was decided only after a
worker restart. Asserted: a worker started on topics nobody made creates all four with the
configured partitions, the events topic with unlimited retention (`retention.ms=-1`,
`retention.bytes=-1`), and decides the first registration without a restart; and a worker
refuses to start (one line, non-zero) against an events topic with a finite retention.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from rackplane.streams.config import StreamConfig
from rackplane.streams.process import READY, WorkerProcess
from rackplane.streams.topics import TOPICS
from tests.faults._case import FaultCase
from tests.faults._check import Verdict
from tests.faults._topics import A_WEEK, create_topics, partition_counts, topic_settings
from tests.faults.conftest import FaultBroker

pytestmark = pytest.mark.faults

PARTITIONS = 3
REFUSE_WITHIN_S = 45.0


async def test_a_worker_creates_its_topics_and_the_events_topic_keeps_everything(
    any_broker: FaultBroker, tmp_path: Path, report_dir: Path
) -> None:
    async with FaultCase(
        "own-topics", any_broker, tmp_path, report_dir, create=False, partitions=PARTITIONS
    ) as case:
        counts = await partition_counts(case.config)
        events = await topic_settings(case.config, "events")
        kept = {k: events.get(k) for k in ("retention.ms", "retention.bytes", "cleanup.policy")}
        case.verdict.facts["topics"] = {"partitions": counts, "events": kept}
        if counts != dict.fromkeys(TOPICS, PARTITIONS):
            case.verdict.problem(f"topics made with partitions {counts}, not {PARTITIONS} each")
        if kept["retention.ms"] != "-1" or kept["retention.bytes"] != "-1":
            case.verdict.problem(f"the events topic keeps {kept}, not everything")
        try:
            await case.start_load()  # registers first, and waits for the decisions
        except AssertionError as err:
            case.verdict.problem(f"the first registrations were not decided: {err}"[:300])
        else:
            await asyncio.sleep(5)
        verdict = await case.finish()
    assert not verdict.problems, verdict.describe()


async def test_a_worker_refuses_an_events_topic_with_a_finite_retention(
    any_broker: FaultBroker, tmp_path: Path, report_dir: Path
) -> None:
    name = f"finite-retention-{any_broker.kind}"
    prefix = f"f{uuid.uuid4().hex[:6]}"
    config = StreamConfig(broker=any_broker.url, prefix=prefix, app_id=prefix, partitions=2)
    await create_topics(config, events=A_WEEK)
    worker = WorkerProcess(config, data_dir=tmp_path)
    started = time.monotonic()
    out = tmp_path / "worker.out"
    with out.open("wb") as sink:
        process = subprocess.Popen(
            worker.argv(), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    # until it exits, or says it is ready (it is running against a finite retention)
    while process.poll() is None and time.monotonic() - started < REFUSE_WITHIN_S:
        if READY in out.read_text(errors="replace"):
            break
        await asyncio.sleep(0.2)
    if process.poll() is None:
        process.kill()
    await asyncio.to_thread(process.wait)
    text = out.read_text(errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    v = Verdict(name)
    v.counts["faults_injected"] = 1
    v.facts["refusal"] = {
        "status": process.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "last_lines": lines[-5:],
        "became_ready": READY in text,
    }
    if READY in text or process.returncode in (0, -signal.SIGKILL):
        v.problem(f"the worker ran against an events topic with {A_WEEK}")
    elif len(lines) != 1 or "Traceback" in text or "retention" not in text:
        v.problem(f"the refusal is not one line naming the retention: {lines[-5:]}")
    v.write(report_dir)
    assert not v.problems, v.describe()
