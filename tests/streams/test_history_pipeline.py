"""The streaming worker records into DuckDB (`rackplane worker --db`), also across a crash.

Runs against the suite's broker (Tansu in `make test`, Apache Kafka in `make test-kafka`).
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from typer.testing import CliRunner

from rackplane.cli import app as cli
from rackplane.history import open_history, state_at
from rackplane.history.continuity import check_seqs
from rackplane.history.verify import verify
from rackplane.models import CancelJob, Command, Event, JobCancelled, JobPlaced, SubmitJob
from rackplane.projections import fold, initial_state, state_digest
from rackplane.streams.audit_agent import audit_group
from rackplane.streams.client import Client
from rackplane.streams.codec import decode_command, decode_event, encode_event
from rackplane.streams.log_scan import scan_to_end
from tests.streams.conftest import Pipeline, new_cluster, quiet_log, start_pipeline
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


# -- a full disk under a running worker (issue 15) ---------------------------------------------
#
# The worker's RLIMIT_FSIZE is lowered with prlimit: from then on the kernel refuses every write
# of the worker past that many bytes of any file (EFBIG; Python ignores SIGXFSZ), as a full disk
# refuses them (ENOSPC). The limit is above the worker's small log file and at the DuckDB WAL's
# size, so the next commit of the history fails. Raising it frees the disk. Unprivileged: it
# runs wherever the tests run.

FAILED = '"event": "audit.write_failed"'
STOPPED = '"event": "audit.stopped_unstored"'


def fill_disk(p: Pipeline, db: Path) -> None:
    wal = Path(f"{db}.wal")
    limit = max(
        wal.stat().st_size if wal.exists() else 0, p.worker.log_path.stat().st_size + 16_384
    )
    _, hard = resource.prlimit(p.worker.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(p.worker.pid, resource.RLIMIT_FSIZE, (limit, hard))


def free_disk(p: Pipeline) -> None:
    _, hard = resource.prlimit(p.worker.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(p.worker.pid, resource.RLIMIT_FSIZE, (hard, hard))


def wait_for(p: Pipeline, line: str, count: int = 1, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while p.worker.log_text().count(line) < count:
        assert time.monotonic() < deadline, f"no {line!r} x{count}:\n{p.worker.log_tail(30)}"
        time.sleep(0.1)


class Jobs:
    """One-node jobs submitted and cancelled in turn: events without filling the cluster."""

    def __init__(self, p: Pipeline, cluster: str) -> None:
        self.p, self.cluster, self.n = p, cluster, 0

    def run(self, count: int) -> None:
        commands: list[Command] = []
        for _ in range(count):
            self.n += 1
            job = f"j{self.n}"
            commands.append(submit(self.p, self.cluster, job, 1, slice_size=1))
            commands.append(CancelJob(id=self.p.command_id("cancel"), cluster=self.cluster,
                                      actor="user:test", job=job))  # fmt: skip
        asyncio.run(self.p.send(*commands))

    def until_logged(self, line: str, count: int = 1, timeout: float = 60.0) -> None:
        """Keep the cluster busy until the worker logs `line` `count` times."""
        deadline = time.monotonic() + timeout
        while self.p.worker.log_text().count(line) < count:
            assert time.monotonic() < deadline, f"no {line!r}:\n{self.p.worker.log_tail(30)}"
            self.run(1)
            time.sleep(0.3)


async def committed(p: Pipeline, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The audit's consumer group's committed offset of these partitions (-1: none)."""
    group = audit_group(p.config.app_id, str(p.config.db))
    consumer = AIOKafkaConsumer(**p.config.kafka_options(), group_id=group,
                                enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    try:
        return {n: (await consumer.committed(TopicPartition(topic, n))) or -1 for n in partitions}
    finally:
        await consumer.stop()


def log_events(p: Pipeline) -> list[tuple[int, int, Event]]:
    """(partition, offset, event) of every event on the log."""
    return [(part, off, decode_event(v)) for part, off, v in read_topic(p, "events") if v]


def partition_of(p: Pipeline, cluster: str) -> int:
    (partition,) = {part for part, _, e in log_events(p) if e.cluster == cluster}
    return partition


def end_of(p: Pipeline, cluster: str) -> int:
    """The offset after the cluster's last event on the log."""
    return max(off for _, off, e in log_events(p) if e.cluster == cluster) + 1


def read_topic(p: Pipeline, name: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record of a topic, to its end (markers left out)."""
    out: list[tuple[int, int, bytes]] = []
    asyncio.run(scan_to_end(p.config.kafka_options(), p.config.topic(name),
                            lambda part, off, v: out.append((part, off, v or b""))))  # fmt: skip
    return out


def test_a_full_disk_delays_the_history_and_loses_nothing(broker: object, tmp_path: Path) -> None:
    db = tmp_path / "history.duckdb"
    p = start_pipeline(broker, tmp_path, db=str(db))  # type: ignore[arg-type]
    c = new_cluster()
    jobs = Jobs(p, c)
    try:
        asyncio.run(p.register(c))
        jobs.run(3)
        asyncio.run(p.events(c, lambda es: sum(isinstance(e, JobCancelled) for e in es) == 3))
        time.sleep(1.0)  # the audit batches for 50 ms

        # 1. The disk fills: the audit agent retries, says so once, and the group's committed
        #    offset stops where the history stops, while the log goes on.
        fill_disk(p, db)
        jobs.until_logged(FAILED)
        partition = partition_of(p, c)
        time.sleep(1.0)  # the audit commits after each stored batch
        held = asyncio.run(committed(p, p.config.topic("events"), [partition]))[partition]
        # The control plane does not wait for the history: 2,000 jobs (6,000 events, more
        # than Faust's buffers between agents hold) are decided while the disk is full.
        before = end_of(p, c)
        jobs.run(2_000)
        asyncio.run(p.events(c, lambda es: sum(isinstance(e, JobCancelled) for e in es) >= jobs.n))
        time.sleep(1.0)
        assert asyncio.run(committed(p, p.config.topic("events"), [partition]))[partition] == held
        assert held < before < end_of(p, c)
        assert p.worker.log_text().count(FAILED) == 1  # said once, whatever the retries

        # 2. It frees up: the agent stores the batch and goes on, with no restart; the
        #    committed offset catches up with the log.
        free_disk(p)
        jobs.run(3)
        end = end_of(p, c)
        deadline = time.monotonic() + 30
        while asyncio.run(committed(p, p.config.topic("events"), [partition]))[partition] < end:
            assert time.monotonic() < deadline, p.worker.log_tail(30)
            time.sleep(0.5)

        # 3. It fills again and the worker is stopped during the retries: a clean stop that
        #    commits what is acknowledged, and nothing of what is not stored.
        fill_disk(p, db)
        jobs.until_logged(FAILED, count=p.worker.log_text().count(FAILED) + 1)
        jobs.run(4)
        time.sleep(1.0)
        began = time.monotonic()
        p.worker.stop()
        assert time.monotonic() - began < 15, "the worker waited to be killed"
        with open_history(db) as reader:
            stored = {e.seq for e in reader.events(c)}
            stored_ids = {x.id for x in reader.commands(c)}
        mine = [(off, e) for _, off, e in log_events(p) if e.cluster == c]
        assert len(stored) < len(mine), "the disk never held anything back"
        commit = asyncio.run(committed(p, p.config.topic("events"), [partition]))[partition]
        assert commit > held
        assert all(e.seq in stored for off, e in mine if off < commit), (
            f"committed offset {commit} passes events not stored"
        )
        commands_log = [(part, off, decode_command(v)) for part, off, v in read_topic(p, "commands")
                        if v.startswith(b"{")]  # fmt: skip
        commands_commit = asyncio.run(
            committed(p, p.config.topic("commands"), {part for part, _, _ in commands_log})
        )
        assert all(cmd.id in stored_ids for part, off, cmd in commands_log
                   if off < commands_commit[part])  # fmt: skip
        assert STOPPED in p.worker.log_text()

        # 4. A new worker, on a free disk, reads again what was not acknowledged.
        p.worker.start()
        jobs.run(2)
        final = asyncio.run(quiet_log(p, c))
        time.sleep(1.0)
    finally:
        p.worker.stop()
    with open_history(db) as reader:
        assert reader.events(c) == final  # every event, once, in order
        ids = [x.id for x in reader.commands(c)]
        want = [cmd.id for _, _, cmd in commands_log]
        assert len(ids) == len(set(ids)) and set(want) <= set(ids)
        assert all(r.ok for r in verify(reader))
        assert all(r.ok for r in check_seqs(reader))
    code, out = verify_against_log(p, db)
    assert code == 0, out
    (cluster_diff,) = [d for d in json.loads(out)["log"]["clusters"] if d["cluster"] == c]
    assert cluster_diff["verdict"] == "in step" and cluster_diff["in_log"] == len(final)


def verify_against_log(p: Pipeline, db: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli,
        ["history", "verify", "--db", str(db), "--against-log", p.config.broker,
         "--prefix", p.config.prefix, "--json", *extra],
    )  # fmt: skip
    return result.exit_code, result.stdout


def test_verify_against_the_log_tells_behind_from_lost_and_finds_forks(
    broker: object, tmp_path: Path
) -> None:
    db = tmp_path / "history.duckdb"
    p = start_pipeline(broker, tmp_path, db=str(db))  # type: ignore[arg-type]
    c = new_cluster()
    try:
        asyncio.run(p.register(c))
        Jobs(p, c).run(3)
        log = asyncio.run(quiet_log(p, c))
        assert len(log) >= 7
        time.sleep(1.0)
    finally:
        p.worker.stop()
    code, out = verify_against_log(p, db)
    assert code == 0, out

    def diff(out: str) -> dict[str, Any]:
        (d,) = [d for d in json.loads(out)["log"]["clusters"] if d["cluster"] == c]
        return d  # type: ignore[no-any-return]

    async def append(*events: Event, raw: bytes | None = None) -> None:
        async with Client(p.config) as client:
            for e in events:
                await client.send_raw("events", encode_event(e), c.encode())
            if raw is not None:
                await client.send_raw("events", raw, c.encode())
            await client.producer.flush()

    # the log's newest events, not stored yet: behind, a pass unless --strict
    last = log[-1]
    newer = [
        last.model_copy(update={"seq": last.seq + i, "id": f"{last.id}+{i}"}) for i in (1, 2, 3)
    ]
    asyncio.run(append(*newer, raw=encode_event(log[5])))  # and a repeat of seq 6
    code, out = verify_against_log(p, db)
    assert code == 0, out
    assert diff(out)["behind"] == 3 and diff(out)["duplicates"] == 1
    code, out = verify_against_log(p, db, "--strict")
    assert code == 1 and diff(out)["verdict"] == "behind by 3"

    # events lost from the store: missing, a failure
    lossy = tmp_path / "lossy.duckdb"
    shutil.copy(db, lossy)
    con = duckdb.connect(str(lossy))
    con.execute("DELETE FROM events WHERE cluster = ? AND seq BETWEEN 4 AND 6", [c])
    con.close()
    code, out = verify_against_log(p, lossy)
    assert code == 1 and diff(out)["missing"] == 3
    assert diff(out)["examples"]["missing"][0].startswith("seq 4: in the log")

    # two different events with one seq in the log: a fork
    asyncio.run(append(log[2].model_copy(update={"actor": "operator:another-writer"})))
    code, out = verify_against_log(p, db)
    assert code == 1 and diff(out)["forks"] == 1
    result = CliRunner().invoke(
        cli, ["history", "verify", "--db", str(db), "--against-log", p.config.broker,
              "--prefix", p.config.prefix], env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 1
    assert "Store against the log" in result.stdout
    assert f"cluster {c}: seq 3: two different events in the log" in result.stdout
