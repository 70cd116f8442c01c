"""A full disk under the history (`--db`) for 30 s, under load.

The fault: the worker's RLIMIT_FSIZE soft limit (set on the running worker with
`resource.prlimit`, and on any worker the supervisor starts meanwhile, as soon as its pid
exists, long before it opens a file) falls to the size its log file has plus 256 KiB: every
write that would take the DuckDB file or its WAL past that fails with EFBIG (CPython ignores
SIGXFSZ), as on a full disk, while the worker's own log still takes a few lines. After 30 s
the limit is lifted. Chosen over a small filesystem because mounting one needs privileges
that CI need not have; and unlike a full disk it leaves every other process alone.

Issue 15 saw the audit agent crash 14 times and acknowledge each failed batch: 7,210 events
and commands permanently missing from the history. The history must equal the log.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.faults._case import FaultCase
from tests.faults.conftest import FaultBroker

pytestmark = pytest.mark.faults

FULL_S = 30.0
LOG_ROOM = 256 * 1024


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


async def test_a_full_disk_under_the_history_for_30_s_loses_nothing_from_it(
    any_broker: FaultBroker, tmp_path: Path, report_dir: Path
) -> None:
    async with FaultCase("full-disk", any_broker, tmp_path, report_dir) as case:
        assert case.db is not None
        wal = case.db.with_name(case.db.name + ".wal")
        await case.start_load()
        await asyncio.sleep(8)
        limit = size(case.worker.worker.log_path) + LOG_ROOM
        before = {
            "db": size(case.db),
            "wal": size(wal),
            "events_read": len(case.follower.decided_at),
        }
        case.worker.fsize_limit = limit
        case.worker.apply_fsize_limit()
        case.fault("RLIMIT_FSIZE under the history", limit_bytes=limit, full_s=FULL_S)
        await asyncio.sleep(FULL_S)
        during = {
            "db": size(case.db),
            "wal": size(wal),
            "events_read": len(case.follower.decided_at),
        }
        case.worker.fsize_limit = None
        case.worker.apply_fsize_limit()
        await asyncio.sleep(6)
        log = case.worker.worker.log_text()
        case.verdict.facts["disk"] = {
            "limit_bytes": limit,
            "before": before,
            "end_of_window": during,
            "efbig_in_worker_log": log.count("File too large"),
        }
        verdict = await case.finish()
    # the fault was real: the history could not grow past the limit while the log did
    assert during["db"] <= limit or during["db"] == before["db"]
    assert during["wal"] <= max(limit, before["wal"])  # no write past the limit landed
    assert case.verdict.facts["disk"]["efbig_in_worker_log"] >= 1
    assert during["events_read"] > before["events_read"]
    assert not verdict.problems, verdict.describe()
