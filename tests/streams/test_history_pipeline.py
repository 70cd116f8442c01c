"""The streaming worker records into DuckDB (`rackplane worker --db`), also across a crash.

Runs against the suite's broker (Tansu in `make test`, Apache Kafka in `make test-kafka`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rackplane.history import open_history, state_at
from rackplane.history.verify import verify
from rackplane.models import JobPlaced, SubmitJob
from rackplane.projections import fold, initial_state, state_digest
from rackplane.streams.client import Client
from tests.streams.conftest import new_cluster, quiet_log, start_pipeline
from tests.streams.test_pipeline import submit

pytestmark = pytest.mark.broker


def test_the_worker_records_events_commands_and_rejections_into_duckdb(
    broker: object, tmp_path: Path
) -> None:
    db = tmp_path / "history.duckdb"
    p = start_pipeline(broker, tmp_path, db=str(db))  # type: ignore[arg-type]
    c = new_cluster()
    first, second = submit(p, c, "j1", 4), submit(p, c, "j2", 8)

    async def drive(*commands: SubmitJob) -> None:
        async with Client(p.config) as client:
            for command in commands:
                await client.send(command)
            await client.send_raw("commands", b"not json", c.encode())

    try:
        asyncio.run(p.register(c))
        asyncio.run(drive(first))
        asyncio.run(p.events(c, lambda es: any(isinstance(e, JobPlaced) for e in es)))
        p.worker.kill()  # a crash: the audit batch in flight is delivered again after restart
        p.worker.start()
        asyncio.run(drive(second, first))  # `first` once more: a redelivered command id
        asyncio.run(p.events(c, lambda es: sum(isinstance(e, JobPlaced) for e in es) == 2))
        log = asyncio.run(quiet_log(p, c))
        assert sum(isinstance(e, JobPlaced) for e in log) == 2
        asyncio.run(asyncio.sleep(1.0))  # the audit agents batch for 50 ms
    finally:
        p.worker.stop()
    with open_history(db) as reader:
        assert reader.clusters() == [c]
        recorded = reader.events(c)
        assert recorded == log
        ids = [x.id for x in reader.commands(c)]
        assert ids.count(first.id) == 1 and second.id in ids
        assert len([r for r in reader.rejections(c) if r.agent == "controller"]) >= 2
        assert all(r.ok for r in verify(reader))
    assert state_digest(state_at(recorded)) == state_digest(fold(initial_state(c), log))
