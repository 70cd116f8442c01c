"""A worker SIGKILLed 20 times under load, at random points (starting, rebuilding, deciding),
restarted each time by the supervisor. What issue 15 found holding (25 kills on Kafka, 22 on
Tansu, nothing lost or doubled) must keep holding, with the log signed (issue 16): the worker
has a key, its rebuilds take only what it signed, and every event of the log carries its
signature.

A restart on Kafka takes ~7 s to be ready (the killed member's 6 s session must expire before
the group rebalances): every fourth kill waits for a ready worker, the others come 0.3-3 s
after the previous one, wherever the restart is (starting, joining, rebuilding its replicas).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from tests.faults._case import FaultCase
from tests.faults.conftest import FaultBroker

pytestmark = pytest.mark.faults

KILLS = 20


async def test_a_worker_killed_20_times_under_load_loses_and_repeats_nothing(
    any_broker: FaultBroker, tmp_path: Path, report_dir: Path
) -> None:
    rng = random.Random(KILLS)
    async with FaultCase("worker-killed", any_broker, tmp_path, report_dir, signed=True) as case:
        await case.start_load()
        await asyncio.sleep(3)
        for kill in range(KILLS):
            if kill % 4 == 3:  # a worker that is deciding, at a random point of its work
                await case.worker.wait_ready()
                await asyncio.sleep(rng.uniform(0.2, 2.0))
            else:  # wherever the restart is: starting, joining its group, rebuilding
                await asyncio.sleep(rng.uniform(0.3, 3.0))
            await case.worker.kill()
            case.fault("worker SIGKILL")
        await case.worker.wait_ready()
        await asyncio.sleep(5)
        verdict = await case.finish()
    assert verdict.counts["worker_kills"] == KILLS
    assert verdict.counts["events_signed"] > 0 and not verdict.counts["events_not_signed"]
    assert not verdict.problems, verdict.describe()
