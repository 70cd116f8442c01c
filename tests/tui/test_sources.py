"""The history source against the `rackplane.history` contract (a stand-in module here), and
the CLI's errors for bad input."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from textual.widgets import Static
from typer.testing import CliRunner

from rackplane.cli import app as cli
from rackplane.models import CordonNode
from rackplane.tui import ReadOnlySource, SourceError, history_source
from rackplane.tui._timeline import NOTABLE_TYPES
from tests.tui.conftest import ACTOR, SIZE, console, story


class _Reader:
    """What `open_history(path)` returns, per the contract: a context manager with
    clusters(), events(cluster), rejections(cluster)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def clusters(self) -> list[str]:
        return ["demo-16", "other"] if "two" in self.path.name else ["demo-16"]

    def events(self, cluster: str, *, upto_seq=None, upto_at=None):  # type: ignore[no-untyped-def]
        return list(story()) if cluster == "demo-16" else []

    def rejections(self, cluster=None):  # type: ignore[no-untyped-def]
        return []


@pytest.fixture
def fake_history(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("rackplane.history")
    module.open_history = _Reader  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rackplane.history", module)


async def test_a_history_loads_every_event_and_travels_but_takes_no_command(
    fake_history: None, tmp_path: Path
) -> None:
    db = tmp_path / "audit.duckdb"
    db.write_bytes(b"")
    source = history_source(db)
    assert source.cluster == "demo-16" and not source.live
    with pytest.raises(ReadOnlySource):
        await source.send(CordonNode(id="x", cluster="demo-16", actor=ACTOR, node="r000n00"))
    app = console(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.timeline is not None and len(app.timeline) == len(story())
        await pilot.press("p")
        await pilot.pause()
        assert app.position < len(app.timeline)
        assert app.timeline.events[app.position - 1].type in NOTABLE_TYPES


def test_a_history_with_several_clusters_needs_one_named(
    fake_history: None, tmp_path: Path
) -> None:
    db = tmp_path / "two.duckdb"
    db.write_bytes(b"")
    with pytest.raises(SourceError, match="pick one with --cluster"):
        history_source(db)
    with pytest.raises(SourceError, match="has no cluster 'nope'"):
        history_source(db, cluster="nope")
    assert history_source(db, cluster="demo-16").cluster == "demo-16"


def test_the_cli_says_clearly_what_is_wrong(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(cli, ["tui", "--db", str(tmp_path / "missing.duckdb")])
    assert missing.exit_code == 2
    assert "no such file or folder" in missing.output
    small = runner.invoke(cli, ["tui", "--demo", "4"])
    assert small.exit_code == 2 and "at least 8 racks" in small.output
    bad = runner.invoke(cli, ["tui", "--broker", "http://x"])
    assert bad.exit_code == 2 and "expected kafka://" in bad.output


def _banner(app) -> str:  # type: ignore[no-untyped-def]
    """The banner's text, "" while it is hidden."""
    widget = app.main.query_one("#banner", Static)
    return str(widget.render()) if widget.display else ""


async def _banner_saying(app, pilot, words: str) -> str:  # type: ignore[no-untyped-def]
    """Wait until the banner says `words` (up to 20 s: the CI machine may be loaded)."""
    for _ in range(200):
        if words in _banner(app):
            break
        await pilot.pause(0.1)
    return _banner(app)


async def test_a_broker_out_of_reach_is_said_plainly_in_a_banner() -> None:
    import socket

    from rackplane.tui import LiveSource

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = LiveSource(f"kafka://127.0.0.1:{port}", cluster="c1")
    with pytest.raises(SourceError, match="cannot reach"):
        await source.run(lambda _: None, lambda _: None)
    app = console(source)  # type: ignore[arg-type]
    async with app.run_test(size=SIZE) as pilot:
        said = await _banner_saying(app, pilot, "cannot reach")
        assert f"cannot reach kafka://127.0.0.1:{port}" in said
        assert "trying again every 5 s" in said
        await pilot.press("c")
        await pilot.pause()
        assert any("no cluster registered yet" in n.message for n in app._notifications)


async def test_a_listener_that_never_answers_is_given_up_on_and_named() -> None:
    import asyncio

    from rackplane.tui import LiveSource
    from rackplane.tui.sources import CONNECT_TIMEOUT_S

    held: list[asyncio.StreamWriter] = []

    async def accept_and_say_nothing(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        held.append(w)

    server = await asyncio.start_server(accept_and_say_nothing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    assert LiveSource("kafka://127.0.0.1:1", cluster="c1").connect_timeout == CONNECT_TIMEOUT_S
    assert CONNECT_TIMEOUT_S <= 10  # the console says so within ~10 s
    # 3 s: the console's start on a loaded machine (tests in parallel) must not outlast it
    source = LiveSource(f"kafka://127.0.0.1:{port}", cluster="c1", connect_timeout=3.0)
    app = console(source)  # type: ignore[arg-type]
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert f"connecting to kafka://127.0.0.1:{port}" in _banner(app)
            said = await _banner_saying(app, pilot, "cannot reach")
            assert f"127.0.0.1:{port}" in said and "no Kafka answer within 3 s" in said
    finally:
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()


class _Quiet:
    """A live source connected to a broker that has no event of its cluster."""

    cluster = "c9"
    description = "kafka://b:9092 (rackplane.*)"
    live = True
    mode = "LIVE"
    connected = True


def test_a_broker_without_events_of_the_cluster_is_said_after_a_while() -> None:
    from rackplane.tui._lines import QUIET_S, banner

    assert banner(_Quiet(), None, None, QUIET_S / 2) == ("", "")  # type: ignore[arg-type]
    text, _ = banner(_Quiet(), None, None, QUIET_S)  # type: ignore[arg-type]
    assert "kafka://b:9092 (rackplane.*) answers, but no event of cluster c9 yet" in text
    assert banner(_Quiet(), "cannot reach it", None, 0)[0].startswith(" cannot reach it")  # type: ignore[arg-type]


def test_the_console_takes_its_broker_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same layers as every client command: RACKPLANE_BROKER here, checked before connecting.
    monkeypatch.setenv("RACKPLANE_BROKER", "http://not-kafka")
    bad = CliRunner().invoke(cli, ["tui"])
    assert bad.exit_code != 0
    assert "http://not-kafka" in " ".join(bad.output.split())
