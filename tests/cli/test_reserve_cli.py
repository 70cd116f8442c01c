"""`reserve --user/--queue`, `submit --reservation` and `reservations`, without a broker: the
commands they would send are caught where they are sent, the state they read is given."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.models import JobSpec, PolicySettings, RegisterTopology, Reserve
from rackplane.policies import preset
from tests.builders import CLUSTER, T0, Clock, cmd, rack, topology

runner = CliRunner()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What the commands send, instead of sending it."""
    caught: list[Any] = []

    def issue(cls: type, cluster: str, **fields: Any) -> None:
        caught.append((cls, cluster, fields))

    def send(s: object, command: object, *args: object, **kw: object) -> None:
        caught.append(command)

    monkeypatch.setattr("rackplane.cli._reserve._issue", issue)
    monkeypatch.setattr("rackplane.cli._client._send", send)
    return caught


def test_reserve_sends_the_users_and_queues_it_is_for(sent: list[Any]) -> None:
    result = runner.invoke(app, ["reserve", "--cluster", "c1", "--name", "hero", "--racks",
                                 "r01", "--start", "+1h", "--end", "+3h", "--user", "alice",
                                 "--user", "bob", "--queue", "pretrain"])  # fmt: skip
    assert result.exit_code == 0, result.output
    ((cls, cluster, fields),) = sent
    assert cls is Reserve and cluster == "c1"
    assert (fields["users"], fields["queues"]) == (("alice", "bob"), ("pretrain",))


def test_reserve_without_users_or_queues_is_for_maintenance(sent: list[Any]) -> None:
    result = runner.invoke(app, ["reserve", "--cluster", "c1", "--name", "m", "--racks", "r01",
                                 "--start", "+1h", "--end", "+3h"])  # fmt: skip
    assert result.exit_code == 0, result.output
    ((_, _, fields),) = sent
    assert (fields["users"], fields["queues"]) == ((), ())


def test_submit_names_the_reservation_from_the_flag_or_the_file(
    sent: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = runner.invoke(app, ["submit", "--cluster", "c1", "--job", "h", "--nodes", "16",
                                 "--reservation", "hero", "--actor", "alice"])  # fmt: skip
    assert result.exit_code == 0, result.output
    (command,) = sent
    assert isinstance(command.job, JobSpec) and command.job.reservation == "hero"
    f = tmp_path / "jobs.yaml"
    f.write_text("- {id: a, nodes: 8, reservation: hero}\n- {id: b, nodes: 8}\n")
    many: list[Any] = []
    monkeypatch.setattr(
        "rackplane.cli._client._send_all",
        lambda s, commands, *a, **k: many.extend(commands) or [[] for _ in commands],
    )
    monkeypatch.setattr("rackplane.cli._client._show_many", lambda *a, **k: None)
    result = runner.invoke(app, ["submit", "--cluster", "c1", "--file", str(f), "--actor", "alice"])
    assert result.exit_code == 0, result.output
    assert [c.job.reservation for c in many] == ["hero", None]


def test_reservations_shows_who_may_use_each(monkeypatch: pytest.MonkeyPatch) -> None:
    from rackplane.engine import Engine

    clock = Clock()
    policies, chosen = preset("tas", PolicySettings(slice_size=8))
    engine = Engine(CLUSTER, clock=clock, policies=policies)
    engine.handle(cmd(RegisterTopology, topology=topology(rack("r01"), rack("r02")),
                      settings=chosen))  # fmt: skip
    start, end = T0 + timedelta(hours=1), T0 + timedelta(hours=3)
    engine.handle(cmd(Reserve, reservation="hero", racks=("r02",), start=start, end=end,
                      users=("alice",), queues=()))  # fmt: skip
    engine.handle(cmd(Reserve, reservation="maint", racks=("r01",), start=start, end=end))
    monkeypatch.setattr("rackplane.cli._read._view", lambda *a: SimpleNamespace(state=engine.state))
    result = runner.invoke(app, ["reservations", "--cluster", CLUSTER, "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["reservation"]: r for r in json.loads(result.stdout)}
    assert (rows["hero"]["users"], rows["hero"]["queues"]) == (["alice"], [])
    assert (rows["maint"]["users"], rows["maint"]["queues"]) == ([], [])
    result = runner.invoke(app, ["reservations", "--cluster", CLUSTER], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "alice" in result.output and "maintenance" in result.output
