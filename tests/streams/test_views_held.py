"""The worker views and `/metrics` show every cluster the worker holds, idle ones too, right
after a restart or a join, and nothing of the clusters it gave away; the views answer for
every other cluster from the log, through a rebalance too (issue 20)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rackplane.models import CordonNode, JobPlaced
from rackplane.streams.eventlog import partition_for
from rackplane.streams.process import WorkerProcess
from tests.conftest import BrokerUnderTest
from tests.streams.conftest import Pipeline, new_cluster, start_pipeline
from tests.streams.test_pipeline import submit

pytestmark = pytest.mark.broker

SHOWN_WITHIN_S = 30.0
"""How long a view may take to show a held cluster after the worker is ready (before issue 20
an idle cluster never appeared: no event came to load it)."""


@pytest.fixture
def own_pipeline(broker: BrokerUnderTest, tmp_path: Path) -> Iterator[Pipeline]:
    p = start_pipeline(broker, tmp_path)
    yield p  # a failed test does not raise here: the worker stops either way
    p.worker.stop()


def _get(worker: WorkerProcess, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.web_port}{path}", timeout=10) as r:
        return bytes(r.read())


def _get_headers(worker: WorkerProcess, path: str) -> tuple[dict[str, str], bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.web_port}{path}", timeout=10) as r:
        return dict(r.headers), bytes(r.read())


def clusters_shown(worker: WorkerProcess) -> set[str]:
    """The clusters the worker serves live (it holds them and loaded them)."""
    rows = json.loads(_get(worker, "/clusters/"))
    return {row["cluster"] for row in rows if row["source"] == "live"}


def listed(worker: WorkerProcess) -> dict[str, tuple[bool, str]]:
    """Every cluster `/clusters/` lists -> (held, source)."""
    return {r["cluster"]: (r["held"], r["source"]) for r in json.loads(_get(worker, "/clusters/"))}


def partitions_shown(worker: WorkerProcess) -> set[int]:
    """The events partitions whose clusters the worker's `/metrics` covers."""
    return {int(p) for p in metric_labels(worker, "rackplane_events_partition_shown", "partition")}


def metric_labels(worker: WorkerProcess, name: str, label: str) -> list[str]:
    text = _get(worker, "/metrics").decode()
    return [
        s.labels[label]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and label in s.labels
    ]


def metric_clusters(worker: WorkerProcess, name: str) -> dict[str, float]:
    """Cluster -> value of `name`'s samples (summed over other labels) in the worker's
    `/metrics`."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(_get(worker, "/metrics").decode()):
        for s in family.samples:
            if s.name == name and "cluster" in s.labels:
                out[s.labels["cluster"]] = out.get(s.labels["cluster"], 0.0) + s.value
    return out


def cordoned(worker: WorkerProcess, cluster: str) -> float | None:
    """The worker's `rackplane_events_total` of the cluster's `NodeCordoned` events."""
    for family in text_string_to_metric_families(_get(worker, "/metrics").decode()):
        for s in family.samples:
            if s.name == "rackplane_events_total" and s.labels == {
                "cluster": cluster,
                "type": "NodeCordoned",
            }:
                return float(s.value)
    return None


async def until(check: Callable[[], bool], what: str, worker: WorkerProcess) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SHOWN_WITHIN_S
    while not await asyncio.to_thread(check):
        if loop.time() > deadline:
            raise AssertionError(f"{what} not within {SHOWN_WITHIN_S:.0f} s\n{worker.log_tail()}")
        await asyncio.sleep(0.2)


async def placed_cluster(p: Pipeline, partition: int | None = None) -> str:
    """A registered cluster (on `partition` of the events topic, if given) with one job of 4
    nodes placed, and nothing more coming."""
    c = new_cluster()
    while partition is not None and partition_for(c, p.config.partitions) != partition:
        c = new_cluster()
    await p.register(c)
    await p.send(submit(p, c, "j1", 4))
    await p.events(c, lambda es: any(isinstance(e, JobPlaced) for e in es))
    return c


async def test_a_restarted_worker_shows_an_idle_cluster_at_once(own_pipeline: Pipeline) -> None:
    p = own_pipeline
    c = await placed_cluster(p)
    allocated = "rackplane_nodes"
    await until(lambda: metric_clusters(p.worker, allocated).get(c, 0) > 0, "metrics", p.worker)
    # a decision made while the worker holds the cluster is counted, and its latency observed
    cordon = CordonNode(id=p.command_id("cordon"), cluster=c, actor="operator:t", node="r3-n5")
    await p.send(cordon)
    await until(lambda: cordoned(p.worker, c) == 1.0, "NodeCordoned counted", p.worker)
    text = (await asyncio.to_thread(_get, p.worker, "/metrics")).decode()
    latency = next(
        line
        for line in text.splitlines()
        if line.startswith("rackplane_command_latency_seconds_count")
    )
    assert float(latency.split()[-1]) >= 3  # the registration, the submission, the cordon
    p.worker.stop()
    await asyncio.to_thread(p.worker.start)
    # Listed at once, read from the log while the worker's own load may still run.
    assert c in await asyncio.to_thread(listed, p.worker)
    # Not one command since: the cluster is idle, no event will come to load it.
    await until(lambda: c in clusters_shown(p.worker), "/clusters/ serving it live", p.worker)
    racks = json.loads(await asyncio.to_thread(_get, p.worker, f"/clusters/{c}/racks/"))
    assert sum(r["allocated"] for r in racks) == 4
    await until(
        lambda: metric_clusters(p.worker, "rackplane_rack_nodes").get(c) == 24.0,
        "its per-rack gauges (4 racks x 6 nodes, every role)",
        p.worker,
    )
    frag = metric_clusters(p.worker, "rackplane_cluster_fragmentation_ratio")
    assert c in frag and 0.0 <= frag[c] <= 1.0


async def test_a_join_moves_a_clusters_figures_to_the_worker_that_took_it(
    own_pipeline: Pipeline, tmp_path: Path
) -> None:
    p = own_pipeline  # 2 partitions: each worker holds one after the join
    ours = {part: await placed_cluster(p, part) for part in range(p.config.partitions)}
    for c in ours.values():
        await until(lambda c=c: c in clusters_shown(p.worker), "the first worker's view", p.worker)
    (tmp_path / "second").mkdir()
    second = WorkerProcess(p.config, data_dir=tmp_path / "second")
    try:
        await asyncio.to_thread(second.start)

        def split() -> bool:
            a = set(metric_clusters(p.worker, "rackplane_nodes")) & set(ours.values())
            b = set(metric_clusters(second, "rackplane_nodes")) & set(ours.values())
            return len(a) == 1 and len(b) == 1 and a | b == set(ours.values())

        await until(split, "each worker showing only the cluster it holds", second)
        for w in (p.worker, second):
            held = set(metric_clusters(w, "rackplane_nodes")) & set(ours.values())
            await until(lambda w=w, held=held: clusters_shown(w) >= held, "the view", w)
            assert set(metric_clusters(w, "rackplane_rack_nodes")) & set(ours.values()) == held
            # every cluster listed on every worker; the one held elsewhere read from the log
            rows = await asyncio.to_thread(listed, w)
            (elsewhere,) = set(ours.values()) - held
            assert rows[elsewhere] == (False, "log") and rows[next(iter(held))] == (True, "live")
            headers, body = await asyncio.to_thread(
                _get_headers, w, f"/clusters/{elsewhere}/racks/"
            )
            assert headers["X-Rackplane-Source"] == "log" and "X-Rackplane-Read-At" in headers
            assert sum(r["allocated"] for r in json.loads(body)) == 4
            one = json.loads(await asyncio.to_thread(_get, w, f"/clusters/{elsewhere}/"))
            assert (one["cluster"], one["held"], one["source"]) == (elsewhere, False, "log")
        # each partition shown by exactly one worker, both held
        a = await asyncio.to_thread(partitions_shown, p.worker)
        b = await asyncio.to_thread(partitions_shown, second)
        assert len(a) == len(b) == 1 and a | b == {0, 1}
        for w in (p.worker, second):
            assert metric_value(w, "rackplane_events_partitions_held") == 1.0
    finally:
        second.stop()


def metric_value(worker: WorkerProcess, name: str) -> float:
    """The value of `name`'s one unlabelled sample."""
    for family in text_string_to_metric_families(_get(worker, "/metrics").decode()):
        for s in family.samples:
            if s.name == name:
                return float(s.value)
    raise AssertionError(f"no {name} in /metrics")


async def test_a_worker_waiting_for_its_partitions_answers_from_the_log(
    own_pipeline: Pipeline, tmp_path: Path
) -> None:
    p = own_pipeline
    ours = {await placed_cluster(p, part) for part in range(p.config.partitions)}
    await until(lambda: clusters_shown(p.worker) >= ours, "the first worker's view", p.worker)
    # The first worker stands still: a second one joins, and the group waits for the first
    # one's session to run out before it assigns anything (a rebalance of several seconds).
    (tmp_path / "second").mkdir()
    second = WorkerProcess(p.config, data_dir=tmp_path / "second")
    second.log_path.touch()
    os.kill(p.worker.pid, signal.SIGSTOP)
    try:
        starting = asyncio.ensure_future(asyncio.to_thread(second.start))
        seen: dict[str, tuple[bool, str]] = {}

        def answered_from_the_log() -> bool:
            nonlocal seen
            if '"event": "worker.ready"' in second.log_text():
                raise AssertionError(f"ready before a view answered; last seen {seen}")
            try:
                seen = listed(second)
            except OSError:
                return False  # its web server is not up yet
            return all(seen.get(c) == (False, "log") for c in ours)

        await until(answered_from_the_log, "views from the log before any assignment", second)
        c = next(iter(ours))
        headers, body = await asyncio.to_thread(_get_headers, second, f"/clusters/{c}/jobs/")
        assert headers["X-Rackplane-Source"] == "log" and headers["X-Rackplane-Held"] == "false"
        assert [j["job"] for j in json.loads(body)] == ["j1"]
        assert metric_value(second, "rackplane_events_partitions_held") == 0.0
        assert not set(metric_clusters(second, "rackplane_nodes")) & ours
        await starting
        await until(lambda: clusters_shown(second) == ours, "both clusters live", second)
    finally:
        p.worker.kill()  # it stood still past its session: a supervisor would replace it
        with contextlib.suppress(Exception):
            await starting
        second.stop()
