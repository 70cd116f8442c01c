"""The control case: no fault. The checker must find nothing here, or it finds what is not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.faults._case import FaultCase
from tests.faults.conftest import FaultBroker

pytestmark = pytest.mark.faults


async def test_without_a_fault_the_log_and_every_view_agree(
    any_broker: FaultBroker, tmp_path: Path, report_dir: Path
) -> None:
    async with FaultCase("control", any_broker, tmp_path, report_dir, db=True) as case:
        await case.start_load()
        await asyncio.sleep(15)
        verdict = await case.finish()
    assert not verdict.problems, verdict.describe()
