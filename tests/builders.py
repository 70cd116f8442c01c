"""Small builders for tests: racks, topologies, commands and a given/when harness."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from rackplane.models import (
    Command,
    CommandPosition,
    CommandRejected,
    Event,
    JobSpec,
    PolicySettings,
    Rack,
    RackHealth,
    RegisterTopology,
    ReportRackHealth,
    Topology,
)
from rackplane.policies import decide
from rackplane.projections import ClusterState, evolve, initial_state

CLUSTER = "c1"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
_ids = itertools.count(1)


def rack(rack_id: str, nodes: int = 18, pod: str = "p1", gpus: int = 4) -> Rack:
    """A rack `r01` with nodes `r01-n01` .. `r01-nNN`."""
    names = tuple(f"{rack_id}-n{i:02d}" for i in range(1, nodes + 1))
    return Rack(id=rack_id, pod=pod, nodes=names, gpus_per_node=gpus)


def topology(*racks: Rack, cluster: str = CLUSTER) -> Topology:
    return Topology(cluster=cluster, racks=racks)


def node(rack_id: str, i: int) -> str:
    return f"{rack_id}-n{i:02d}"


def nodes(rack_id: str, first: int, last: int) -> tuple[str, ...]:
    """Nodes `first`..`last` (inclusive) of a rack."""
    return tuple(node(rack_id, i) for i in range(first, last + 1))


def cmd(cls: type[Any], **fields: Any) -> Command:
    """A command with a fresh id, the test cluster and an operator actor."""
    fields.setdefault("id", f"cmd-{next(_ids)}")
    fields.setdefault("cluster", CLUSTER)
    fields.setdefault("actor", "operator:test")
    return cls(**fields)  # type: ignore[no-any-return]


def register(*racks: Rack, **settings: Any) -> Command:
    return cmd(RegisterTopology, topology=topology(*racks), settings=PolicySettings(**settings))


def job(job_id: str, nodes: int, **fields: Any) -> JobSpec:
    return JobSpec(id=job_id, nodes=nodes, **fields)


class Harness:
    """Runs commands through decide + evolve, keeping the log; time advances a minute a step."""

    def __init__(self, state: ClusterState | None = None) -> None:
        self.state = state or initial_state(CLUSTER)
        self.log: list[Event] = []
        self.now = T0

    def tick(self, by: timedelta = timedelta(minutes=1)) -> None:
        self.now += by

    def when(self, command: Command, position: CommandPosition | None = None) -> list[Event]:
        events = decide(self.state, command, now=self.now, position=position)
        for e in events:
            self.state = evolve(self.state, e)
        self.log.extend(events)
        self.tick()
        return events

    def given(self, *commands: Command) -> Harness:
        """Apply commands that must all succeed."""
        for c in commands:
            events = self.when(c)
            rejected = [e for e in events if isinstance(e, CommandRejected)]
            assert not rejected, f"setup command {c.type} rejected: {rejected[0].reason}"
        return self


def racks_healthy_degraded_failed(cause: str = "") -> Harness:
    """Three racks of 4 nodes: r01 healthy, r02 degraded (one NVSwitch tray lost, `cause`),
    r03 failed."""
    h = Harness().given(register(rack("r01", 4), rack("r02", 4), rack("r03", 4)))
    return h.given(
        cmd(ReportRackHealth, rack="r02", health=RackHealth.DEGRADED, cause=cause),
        cmd(ReportRackHealth, rack="r03", health=RackHealth.FAILED),
    )


class Clock:
    """A clock the test moves: `now` is what the engine reads."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def finish_command(engine: Any, k: int, how: str) -> Command | None:
    """A property test's "finish" step: complete (starting it first if only placed) or
    cancel the k-th job holding nodes (modulo their number); None when none holds any."""
    from rackplane.models import CancelJob, CompleteJob, StartJob

    state = engine.state
    live = sorted(j for j in state.jobs if state.jobs[j].status.holds_nodes)
    if not live:
        return None
    target = live[k % len(live)]
    if how != "complete":
        return cmd(CancelJob, job=target)
    if state.jobs[target].status.value == "placed":
        engine.handle(cmd(StartJob, job=target))
    return cmd(CompleteJob, job=target)
