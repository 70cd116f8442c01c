"""Histories for the history tests: a simulated run recorded into DuckDB, once per module."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from rackplane.history import DuckDBAuditSink
from rackplane.models import Event
from rackplane.sim import FailureModel, GeneratedCluster, Scenario, ScenarioDoc, build_scenario
from rackplane.sim.simulator import Simulation

POLICY = "tas+spares+defrag"


def small_scenario(days: float = 4.0, seed: int = 5) -> Scenario:
    """6 racks of 18 nodes, the default job mix, node failures about every 10 hours."""
    return build_scenario(
        ScenarioDoc(
            cluster=GeneratedCluster(racks=6, nodes_per_rack=18),
            days=days,
            seed=seed,
            failures=FailureModel(node_mtbi_days=45, rack_mtbi_days=0),
        )
    )


@dataclass(frozen=True)
class Recorded:
    """A simulated run and the DuckDB file it was recorded into."""

    path: Path
    events: list[Event]
    scenario: Scenario


def record(path: Path, policy: str = POLICY, **kw: float) -> Recorded:
    """Simulate `small_scenario` under `policy`, recording every event into `path`."""
    scenario = small_scenario(**kw)  # type: ignore[arg-type]
    sim = Simulation(scenario, policy)
    seen: list[Event] = []
    with DuckDBAuditSink(path, buffer=64) as sink:
        sim.engine.sinks += [sink.add_event, seen.append]
        sim.run()
    return Recorded(path, seen, scenario)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return record(tmp_path_factory.mktemp("history") / "sim.duckdb")


@pytest.fixture(scope="module")
def long_recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """60 days of the same cluster: over a thousand events."""
    return record(tmp_path_factory.mktemp("history") / "long.duckdb", days=60)
