"""The live read commands and the client commands' chain of events, against a running worker.

`status`, `jobs`, `job`, `racks` and `rack` read the log (a snapshot plus the tail) and write
nothing; a client command prints the events its command caused and the policies' chain after
them (`--no-wait`: the direct ones); `submit --file` submits many jobs over one connection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.importers import dump_cluster_file
from rackplane.streams.live import LiveLog
from tests.conftest import BrokerUnderTest
from tests.streams.conftest import Pipeline, new_cluster, small_topology, start_pipeline

pytestmark = pytest.mark.broker
runner = CliRunner()


@pytest.fixture(scope="module")
def pipeline(
    broker: BrokerUnderTest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    """A worker that checkpoints every 10 events, so reads start from snapshots."""
    tmp = tmp_path_factory.mktemp("worker")
    p = start_pipeline(broker, tmp, checkpoint_every=10)
    try:
        yield p
    finally:
        p.worker.stop()


def cli(p: Pipeline, *args: str, json_out: bool = True) -> tuple[int, Any]:
    argv = [*args, "--broker", p.config.broker, "--prefix", p.config.prefix]
    result = runner.invoke(app, [*argv, "--json"] if json_out else argv)
    if not json_out:
        return result.exit_code, result.output
    try:
        return result.exit_code, json.loads(result.stdout)
    except json.JSONDecodeError:
        return result.exit_code, result.output


def registered(p: Pipeline, tmp: Path) -> str:
    c = new_cluster()
    f = tmp / f"{c}.yaml"
    f.write_text(dump_cluster_file(small_topology(c)))
    code, out = cli(p, "register", str(f), "--actor", "alice")
    assert code == 0, out
    return c


def test_a_submit_prints_the_placement_that_followed_it_and_no_wait_prints_only_its_own(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    c = registered(pipeline, tmp_path)
    code, out = cli(
        pipeline, "submit", "--cluster", c, "--job", "a", "--nodes", "4", "--actor", "alice"
    )
    assert code == 0, out
    assert [(e["type"], e["actor"]) for e in out["events"]] == [
        ("JobSubmitted", "alice"),
        ("JobPlaced", "policy:tas"),
    ], out
    placed = out["events"][1]
    assert placed["job"] == "a" and placed["causation_id"].startswith("tas:")

    code, out = cli(pipeline, "submit", "--cluster", c, "--job", "b", "--nodes", "4", "--no-wait")
    assert code == 0, out
    assert [e["type"] for e in out["events"]] == ["JobSubmitted"]

    # A failure under a running slice: the swap is the chain, caused by the spare policy.
    node = placed["slices"][0]["nodes"][0]
    code, out = cli(pipeline, "health", "--cluster", c, "--node", node, "--state", "failed")
    assert code == 0, out
    assert [e["type"] for e in out["events"]][:2] == ["NodeFailed", "NodeSwapped"], out


def test_the_read_commands_show_the_cluster_as_the_log_says_and_write_nothing(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    c = registered(pipeline, tmp_path)
    for n in range(6):  # past the worker's checkpoint interval: a snapshot exists
        code, out = cli(pipeline, "submit", "--cluster", c, "--job", f"j{n}", "--nodes", "2")
        assert code == 0, out
    code, out = cli(pipeline, "cordon", "--cluster", c, "--node", "r3-n0", "--reason", "fan")
    assert code == 0, out

    code, summary = cli(pipeline, "status", "--cluster", c)
    assert code == 0, summary
    assert summary["cluster"] == c and summary["racks"] == 4
    assert summary["allocated"] == 12 and summary["jobs_placed"] == 6

    code, everything = cli(pipeline, "status")
    assert code == 0, everything
    assert c in [s["cluster"] for s in everything]

    code, jobs = cli(pipeline, "jobs", "--cluster", c, "--state", "placed")
    assert code == 0, jobs
    assert [j["job"] for j in jobs] == [f"j{n}" for n in range(6)]
    code, none = cli(pipeline, "jobs", "--cluster", c, "--state", "running")
    assert code == 0 and none == []

    code, one = cli(pipeline, "job", "j2", "--cluster", c)
    assert code == 0, one
    assert one["status"] == "placed" and len(one["slices"]) == 1
    assert [e["type"] for e in one["events"]] == ["JobSubmitted", "JobPlaced"]

    code, racks = cli(pipeline, "racks", "--cluster", c)
    assert code == 0, racks
    assert sum(r["allocated"] for r in racks) == 12

    code, rack = cli(pipeline, "rack", "r3", "--cluster", c)
    assert code == 0, rack
    cordoned = [n for n in rack["nodes"] if n["cordoned"]]
    assert [n["node"] for n in cordoned] == ["r3-n0"]

    code, text = cli(pipeline, "jobs", "--cluster", c, json_out=False)
    assert code == 0 and "j5" in text and "placed" in text


def test_a_read_starts_from_the_newest_snapshot_and_folds_only_the_tail(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    c = registered(pipeline, tmp_path)
    for n in range(12):
        code, out = cli(pipeline, "submit", "--cluster", c, "--job", f"k{n}", "--nodes", "1")
        assert code == 0, out

    async def read() -> tuple[int, int, int, bool, bool]:
        async with LiveLog(pipeline.config) as live:
            view = await live.cluster(c)
            assert view is not None
            history = await live.history(c)
            # Read-only: neither the log nor the snapshot store ever opened a producer.
            wrote = live.events._producer is not None or live.store._producer is not None
            return view.state.seq, len(view.tail), len(history), view.from_checkpoint, wrote

    seq, tail, total, from_checkpoint, wrote = asyncio.run(read())
    assert [total, from_checkpoint, wrote] == [seq, True, False]
    assert tail < seq  # the events before the snapshot were not read again


def test_unknown_clusters_jobs_and_racks_are_one_line_errors(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    c = registered(pipeline, tmp_path)
    for args, said in (
        (("status", "--cluster", "nope"), "no cluster 'nope'"),
        (("job", "zz", "--cluster", c), "no job 'zz'"),
        (("rack", "r99", "--cluster", c), "no rack 'r99'"),
    ):
        result = runner.invoke(
            app, [*args, "--broker", pipeline.config.broker, "--prefix", pipeline.config.prefix]
        )
        assert result.exit_code == 2, result.output
        assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = runner.invoke(
        app, ["status", "--broker", pipeline.config.broker, "--prefix", "no-such-prefix"]
    )
    assert result.exit_code == 2 and "no topic no-such-prefix.events" in result.stderr


def test_submit_file_sends_every_job_or_none_of_them(pipeline: Pipeline, tmp_path: Path) -> None:
    c = registered(pipeline, tmp_path)
    good = tmp_path / "jobs.yaml"
    good.write_text(
        yaml.safe_dump(
            {
                "jobs": [
                    {"id": "f1", "nodes": 4},
                    {"id": "f2", "nodes": 2, "priority": 5, "expected_duration": 3600},
                    {"id": "f3", "nodes": 8, "slice_size": 4},
                ]
            }
        )
    )
    code, out = cli(pipeline, "submit", "--cluster", c, "--file", str(good))
    assert code == 0, out
    assert [o["events"][0]["job"]["id"] for o in out] == ["f1", "f2", "f3"]
    assert out[1]["events"][0]["job"]["expected_duration"] == "PT1H"
    assert all(o["events"][-1]["type"] == "JobPlaced" for o in out), out

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump([{"id": "g1", "nodes": 2}, {"id": "g2", "nodes": 0}]))
    result = runner.invoke(
        app,
        ["submit", "--cluster", c, "--file", str(bad), "--broker", pipeline.config.broker,
         "--prefix", pipeline.config.prefix],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "bad.yaml: job 2 (g2): nodes" in result.stderr
    code, jobs = cli(pipeline, "jobs", "--cluster", c)
    assert code == 0 and "g1" not in [j["job"] for j in jobs]  # nothing of it was sent


def test_submit_expected_duration_reaches_the_job(pipeline: Pipeline, tmp_path: Path) -> None:
    c = registered(pipeline, tmp_path)
    code, out = cli(
        pipeline, "submit", "--cluster", c, "--job", "e", "--nodes", "2",
        "--expected-duration", "90", "--no-wait",
    )  # fmt: skip
    assert code == 0, out
    assert out["events"][0]["job"]["expected_duration"] == "PT1H30M"


def test_queues_shows_quota_held_borrowed_and_waiting_and_jobs_filters_by_queue(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    from rackplane.models import PolicySettings, QueueSpec

    c = new_cluster()
    f = tmp_path / f"{c}.yaml"
    queues = (
        QueueSpec(name="research"),
        QueueSpec(name="pretrain", parent="research", nominal_nodes=4, borrowing_limit=4),
        QueueSpec(name="rl", parent="research", nominal_nodes=8),
    )
    policy = PolicySettings(slice_size=4, spares_per_rack=1, queues=queues)
    f.write_text(dump_cluster_file(small_topology(c), policy))
    code, out = cli(pipeline, "register", str(f), "--actor", "alice")
    assert code == 0, out
    for j in ("p1", "p2", "p3"):  # 4 guaranteed, 4 borrowed, then the limit
        code, out = cli(pipeline, "submit", "--cluster", c, "--job", j, "--nodes", "4",
                        "--queue", "pretrain", "--actor", "alice")  # fmt: skip
        assert code == 0, out
    assert out["events"][-1]["type"] == "JobBlocked" and out["events"][-1]["reason"] == "quota"
    code, rows = cli(pipeline, "queues", "--cluster", c)
    assert code == 0, rows
    by_name = {r["queue"]: r for r in rows}
    assert [r["queue"] for r in rows] == ["research", "pretrain", "rl"]
    pretrain = by_name["pretrain"]
    assert (pretrain["held_nodes"], pretrain["borrowed_nodes"], pretrain["waiting_jobs"]) == (
        8,
        4,
        1,
    )
    assert (by_name["research"]["nominal_nodes"], by_name["research"]["held_nodes"]) == (12, 8)
    code, listed = cli(pipeline, "jobs", "--cluster", c, "--queue", "pretrain")
    assert code == 0 and sorted(r["job"] for r in listed) == ["p1", "p2", "p3"]
    code, table = cli(pipeline, "queues", "--cluster", c, json_out=False)
    assert code == 0 and "Queues of" in table and "pretrain" in table


def test_reserve_starts_on_time_lists_and_unreserve_lifts_the_cordons(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    import time

    c = registered(pipeline, tmp_path)
    code, out = cli(pipeline, "reserve", "--cluster", c, "--name", "maint", "--racks", "r1",
                    "--start", "now", "--end", "+2h", "--reason", "firmware")  # fmt: skip
    assert code == 0, out
    assert out["events"][0]["type"] == "ReservationMade", out
    deadline = time.monotonic() + 30
    while True:  # the worker's tick starts it: its start has come
        code, rows = cli(pipeline, "reservations", "--cluster", c)
        assert code == 0, rows
        if rows and rows[0]["started"]:
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.5)
    assert (rows[0]["reservation"], rows[0]["racks"], rows[0]["nodes"]) == ("maint", ["r1"], 6)
    assert rows[0]["cordoned"] == 6
    code, out = cli(pipeline, "unreserve", "--cluster", c, "--name", "maint")
    assert code == 0, out
    assert [e["type"] for e in out["events"]][:2] == ["ReservationEnded", "NodeUncordoned"]
    code, rows = cli(pipeline, "reservations", "--cluster", c)
    assert code == 0 and rows == []
