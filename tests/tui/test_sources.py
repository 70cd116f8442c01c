"""The history source against the `rackplane.history` contract (a stand-in module here), and
the CLI's errors for bad input."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
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


async def test_a_broker_out_of_reach_is_said_plainly() -> None:
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
        for _ in range(100):
            await pilot.pause(0.1)
            if app._notifications:
                break
        assert any("cannot reach" in n.message for n in app._notifications)
        await pilot.press("c")
        await pilot.pause()
        assert any("no cluster registered yet" in n.message for n in app._notifications)


def test_the_console_takes_its_broker_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same layers as every client command: RACKPLANE_BROKER here, checked before connecting.
    monkeypatch.setenv("RACKPLANE_BROKER", "http://not-kafka")
    bad = CliRunner().invoke(cli, ["tui"])
    assert bad.exit_code != 0
    assert "http://not-kafka" in " ".join(bad.output.split())
