"""The worker's web views: a bearer token for everything but the probes and /metrics, Faust's
own pages off, the jobs view in pages, and no open views beyond loopback."""

from __future__ import annotations

import asyncio
import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.models import JobPlaced
from rackplane.streams.app import Page
from rackplane.streams.config import StreamConfig, is_loopback
from tests.conftest import BrokerUnderTest
from tests.streams.conftest import Pipeline, new_cluster, start_pipeline
from tests.streams.test_pipeline import submit

TOKEN = secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def guarded(
    broker: BrokerUnderTest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    p = start_pipeline(broker, tmp_path_factory.mktemp("worker"), web_token=TOKEN)
    try:
        yield p
    finally:
        p.worker.stop()


def get(p: Pipeline, path: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{p.worker.web_port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), bytes(r.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), bytes(err.read())


@pytest.mark.broker
async def test_views_need_the_token_and_probes_and_metrics_do_not(guarded: Pipeline) -> None:
    c = new_cluster()
    await guarded.register(c)
    for i in range(3):
        await guarded.send(submit(guarded, c, f"j{i}", 4))
    await guarded.events(c, lambda es: sum(isinstance(e, JobPlaced) for e in es) == 3)
    for path in ("/clusters/", f"/clusters/{c}/racks/", f"/clusters/{c}/jobs/",
                 f"/clusters/{c}/controller/"):  # fmt: skip
        status, headers, body = await asyncio.to_thread(get, guarded, path)
        assert status == 401, path
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert TOKEN not in body.decode()
        assert (await asyncio.to_thread(get, guarded, path, "wrong-" + TOKEN))[0] == 401
    for path in ("/health", "/ready", "/metrics"):
        assert (await asyncio.to_thread(get, guarded, path))[0] == 200, path
    for path in ("/router/", f"/table/jobs/{c}/", "/graph/", "/stats/"):  # Faust's own: off
        assert (await asyncio.to_thread(get, guarded, path, TOKEN))[0] == 404, path

    async def jobs(query: str) -> tuple[int, dict[str, str], list[dict[str, object]]]:
        for _ in range(100):
            status, headers, body = await asyncio.to_thread(
                get, guarded, f"/clusters/{c}/jobs/{query}", TOKEN
            )
            if status != 404:  # the projection has the cluster
                return status, headers, json.loads(body)
            await asyncio.sleep(0.1)
        raise AssertionError("the projection never showed the cluster")

    status, headers, first = await jobs("?limit=2")
    assert status == 200 and [j["job"] for j in first] == ["j0", "j1"]
    assert headers["X-Next-After"] == "j1"
    status, headers, rest = await jobs("?limit=2&after=j1")
    assert [j["job"] for j in rest] == ["j2"] and "X-Next-After" not in headers
    status, _, every = await jobs("")
    assert [j["job"] for j in every] == ["j0", "j1", "j2"]
    assert (await jobs("?limit=0"))[0] == 400


def test_a_page_of_rows_and_the_cursor_of_the_next() -> None:
    rows: list[dict[str, object]] = [{"job": f"j{i}"} for i in range(5)]
    page = Page.of({"limit": "2", "after": "j0"})
    assert page.cut(rows) == ([{"job": "j1"}, {"job": "j2"}], "j2")
    assert Page.of({"after": "j2", "limit": "5"}).cut(rows) == (
        [{"job": "j3"}, {"job": "j4"}],
        None,
    )
    assert Page.of({"after": "gone"}).cut(rows) == ([], None)  # a job that finished meanwhile
    assert Page.of({}).cut(rows) == (rows, None)
    for bad in ("0", "-1", "x", str(Page.MAX + 1)):
        with pytest.raises(ValueError, match="limit must be"):
            Page.of({"limit": bad})


def test_views_beyond_loopback_need_a_token_of_some_length() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")
    assert not is_loopback("worker.example")
    assert StreamConfig().web_problem() is None
    assert "RACKPLANE_WEB_TOKEN" in str(StreamConfig(web_bind="0.0.0.0").web_problem())
    assert StreamConfig(web_bind="0.0.0.0", web_token=TOKEN).web_problem() is None
    assert "at least 16" in str(StreamConfig(web_token="short").web_problem())
    assert TOKEN not in repr(StreamConfig(web_token=TOKEN))


def test_the_worker_refuses_open_views_beyond_loopback_in_one_line() -> None:
    result = CliRunner().invoke(
        app, ["worker", "--broker", "kafka://127.0.0.1:1", "--web-bind", "0.0.0.0"]
    )
    assert result.exit_code == 2
    assert "RACKPLANE_WEB_TOKEN" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
