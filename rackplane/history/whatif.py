"""What-if replay: the recorded external inputs under another policy or configuration.

Theory of operation:
1. Read the inputs back from the record (`recorded_inputs`): the topology and settings of
   the `TopologyRegistered`; every submitted job as a simulator `Arrival` (its work is its
   `expected_duration`, else the time it ran from its first start to its completion, else
   until the record ends); every node and rack failure with its repair time as a `Failure`;
   operator actions (cordon, uncordon, cancel, operator preemptions, job failures) and a
   rack's degraded spells (`RackDegraded` to its `RackRecovered`) as commands at their
   recorded times (a failed rack brought back degraded ends its failure there; the degraded
   spell that follows is not replayed). Degradations and policy decisions are not inputs: the
   policies under test make their own.
2. Run the simulator (`rackplane.sim.Simulation`, the in-process engine with the preset's
   policies and a simulated job runtime) on those inputs, once with the recorded policy and
   settings and once with the what-if's, from the first recorded event to just after the
   last.
3. Count the record itself with the simulator's metrics where the events say it (jobs,
   swaps, migrations, preemptions, GPU-hours lost...), and set the three side by side.
A record written by the simulator is reproduced exactly by step 2 with the same policy.
Pure: no duckdb, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from rackplane.models import (
    CancelJob,
    Command,
    CordonNode,
    Event,
    FailJob,
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobPlaced,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeCordoned,
    NodeFailed,
    NodeRepaired,
    NodeUncordoned,
    PolicySettings,
    PreemptJobs,
    RackDegraded,
    RackFailed,
    RackHealth,
    RackRecovered,
    ReportRackHealth,
    Topology,
    TopologyRegistered,
    UncordonNode,
)
from rackplane.policies import PRESETS
from rackplane.projections import evolve, initial_state
from rackplane.sim import (
    Arrival,
    CommModel,
    CostModel,
    FailureModel,
    PolicyMetrics,
    RuntimeSettings,
    Scenario,
    Workload,
)
from rackplane.sim._metrics import Collector
from rackplane.sim.failures import Failure
from rackplane.sim.simulator import Simulation
from rackplane.sim.workload import HERO_NODES

_ALIASES = {"spares": "spares_per_rack", "defrag": "defrag_enabled", "ntp": "ntp_allowed"}
_TAIL = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class WhatIf:
    """A what-if: a preset (None: the recorded one) and settings to change."""

    policy: str | None
    settings: dict[str, Any]

    def label(self) -> str:
        parts = [f"policy={self.policy}"] if self.policy else []
        return ",".join(parts + [f"{k}={v}" for k, v in self.settings.items()]) or "as recorded"


def parse_what_if(text: str) -> WhatIf:
    """Parse `policy=naive,slice_size=18,spares=0` (any `PolicySettings` field, or the
    aliases spares, defrag, ntp).

    Raises:
        ValueError: an unknown key or preset, or a value the settings refuse.
    """
    policy: str | None = None
    settings: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not value.strip():
            raise ValueError(f"what-if {part!r}: expected key=value")
        if key == "policy":
            if value not in PRESETS:
                raise ValueError(f"unknown policy {value!r}; choose one of {', '.join(PRESETS)}")
            policy = value
            continue
        field = _ALIASES.get(key, key)
        if field not in PolicySettings.model_fields:
            known = ", ".join(["policy", *_ALIASES, *PolicySettings.model_fields])
            raise ValueError(f"what-if key {key!r} is not a setting; known: {known}")
        settings[field] = value.strip()
    try:
        PolicySettings.model_validate(settings)
    except ValidationError as err:
        first = err.errors()[0]
        raise ValueError(f"what-if {first['loc'][0]}: {first['msg']}") from err
    return WhatIf(policy, settings)


def recorded_preset(settings: PolicySettings) -> str:
    """The preset whose settings the record ran with."""
    if not settings.rack_local_slices:
        return "naive"
    name = "tas"
    if settings.spares_per_rack:
        name += "+spares"
        if settings.defrag_enabled:
            name += "+defrag"
            if settings.ntp_allowed:
                name += "+ntp"
    return name


@dataclass(frozen=True, slots=True)
class RecordedInputs:
    """What the world did to the cluster, read back from its events."""

    topology: Topology
    settings: PolicySettings
    start: datetime
    end: datetime
    arrivals: tuple[Arrival, ...]
    failures: tuple[Failure, ...]
    actions: tuple[tuple[datetime, Command], ...]


def _down_key(e: NodeFailed | NodeRepaired | RackFailed | RackRecovered | RackDegraded) -> str:
    """What a failure is kept under while it lasts: its node, or `rack:<rack>`."""
    return e.node if isinstance(e, NodeFailed | NodeRepaired) else f"rack:{e.rack}"


def recorded_inputs(events: Sequence[Event]) -> RecordedInputs:
    """Read the external inputs back from one cluster's events (see the module docstring).

    Raises:
        ValueError: the record has no `TopologyRegistered`.
    """
    reg = next((e for e in events if isinstance(e, TopologyRegistered)), None)
    if reg is None:
        raise ValueError("the record has no TopologyRegistered: nothing to replay")
    start, end = events[0].at, events[-1].at + _TAIL
    submitted: dict[str, JobSubmitted] = {}
    started: dict[str, datetime] = {}
    finished: dict[str, datetime] = {}
    down: dict[str, tuple[datetime, Any, str]] = {}
    degraded: set[str] = set()
    failures: list[Failure] = []
    actions: list[tuple[datetime, Command]] = []

    def act(e: Event, make: type[Command], **fields: Any) -> None:
        actions.append(
            (e.at, make(id=f"whatif-{e.seq}", cluster=e.cluster, actor=e.actor, **fields))
        )

    for e in events:
        match e:
            case JobSubmitted():
                submitted[e.job.id] = e
            case JobStarted():
                started.setdefault(e.job, e.at)
            case JobCompleted():
                finished[e.job] = e.at
            case NodeFailed() | RackFailed():
                down.setdefault(_down_key(e), (e.at, e.rack, e.cause))
            case NodeRepaired() | RackRecovered() | RackDegraded() if _down_key(e) in down:
                # a repair ends a failure; so does a failed rack brought back degraded
                at, rack, cause = down.pop(_down_key(e))
                failures.append(_failure(_down_key(e), at, e.at, rack, cause))
                degraded.discard(e.rack)
            case RackDegraded():
                degraded.add(e.rack)
                act(e, ReportRackHealth, rack=e.rack, health=RackHealth.DEGRADED, cause=e.cause)
            case RackRecovered() if e.rack in degraded:
                degraded.discard(e.rack)
                act(e, ReportRackHealth, rack=e.rack, health=RackHealth.HEALTHY, cause=e.cause)
            case NodeCordoned() if e.actor.startswith("operator"):
                act(e, CordonNode, node=e.node, reason=e.reason)
            case NodeUncordoned() if e.actor.startswith("operator"):
                act(e, UncordonNode, node=e.node)
            case JobCancelled():
                act(e, CancelJob, job=e.job, reason=e.reason)
            case JobFailed():
                act(e, FailJob, job=e.job, reason=e.reason)
            case JobPreempted() if e.cause == "operator":
                act(e, PreemptJobs, jobs=(e.job,), reason=e.reason,
                    allow_interactive=e.interactive_allowed_by is not None)  # fmt: skip
            case _:
                pass
    for key, (at, rack, cause) in down.items():
        failures.append(_failure(key, at, end + timedelta(days=1), rack, cause))
    failures.sort(key=lambda f: f.at)
    arrivals = []
    for job, sub in submitted.items():
        spec = sub.job
        work = spec.expected_duration
        if work is None:
            begin = started.get(job, sub.at)
            work = max(finished.get(job, end) - begin, _TAIL)
        name = spec.name or ("hero" if spec.nodes >= HERO_NODES else "other")
        arrivals.append(Arrival(sub.at, spec, work, name, name == "hero"))
    return RecordedInputs(
        reg.topology, reg.settings, start, end, tuple(arrivals), tuple(failures), tuple(actions)
    )


def _failure(key: str, at: datetime, repaired: datetime, rack: Any, cause: str) -> Failure:
    node = None if key.startswith("rack:") else key
    return Failure(at=at, repaired_at=repaired, node=node, rack=rack, cause=cause, category="")


def _scenario(inputs: RecordedInputs, settings: PolicySettings) -> Scenario:
    return Scenario(
        name="recorded",
        topology=inputs.topology,
        settings=settings,
        policies=(),
        days=(inputs.end - inputs.start).total_seconds() / 86_400.0,
        seed=0,
        start=inputs.start,
        failures=FailureModel(enabled=False),
        workload=Workload(classes=()),
        runtime=RuntimeSettings(),
        comm=CommModel(),
        cost=CostModel(),
    )


def _arrivals_for(inputs: RecordedInputs, settings: PolicySettings) -> list[Arrival]:
    """The recorded jobs; those that took the recorded default slice size take the new one."""
    if settings.slice_size == inputs.settings.slice_size:
        return list(inputs.arrivals)
    out = []
    for a in inputs.arrivals:
        spec = a.spec
        if spec.slice_size == inputs.settings.slice_size:
            floor = spec.min_nodes_per_slice
            if floor is not None and floor > min(settings.slice_size, spec.nodes):
                floor = None
            spec = spec.model_copy(update={"slice_size": None, "min_nodes_per_slice": floor})
        out.append(Arrival(a.at, spec, a.work, a.job_class, a.hero))
    return out


def run_inputs(
    inputs: RecordedInputs,
    policy: str,
    settings: PolicySettings,
    *,
    progress: Callable[[float], None] | None = None,
    observer: Any = None,
) -> PolicyMetrics:
    """Simulate the recorded inputs under `policy` with `settings`."""
    sim = Simulation(
        _scenario(inputs, settings),
        policy,
        arrivals=_arrivals_for(inputs, settings),
        failures=inputs.failures,
        inputs=inputs.actions,
        progress=progress,
        observer=observer,
    )
    return sim.run()


def record_metrics(events: Sequence[Event]) -> dict[str, Any]:
    """The simulator's metrics that the events alone determine, counted from the record."""
    reg = next(e for e in events if isinstance(e, TopologyRegistered))
    collector = Collector("recorded", evolve(initial_state(reg.cluster), reg))
    collector.active = True
    collector.observe(events, runtime_actors=frozenset())
    c = collector.counts
    placed = {e.job for e in events if isinstance(e, JobPlaced)}
    submitted = [e for e in events if isinstance(e, JobSubmitted)]
    return {
        "jobs_submitted": len(submitted),
        "jobs_placed": sum(1 for e in submitted if e.job.id in placed),
        "jobs_completed": sum(1 for e in events if isinstance(e, JobCompleted)),
        "jobs_waiting_at_end": sum(1 for e in submitted if e.job.id not in placed),
        "slices_rack_local_fraction": (
            collector.slices_local / collector.slices if collector.slices else None
        ),
        "gpu_hours_lost_failures": collector.lost["failures"],
        "gpu_hours_lost_migrations": collector.lost["migrations"],
        "gpu_hours_lost_preemptions": collector.lost["preemptions"],
        "node_failures": c["node_failures"],
        "rack_failures": c["rack_failures"],
        "swaps": c["swaps"],
        "migrations": c["migrations"],
        "degrades": c["degrades"],
        "preemptions": dict(sorted(collector.preemptions.items())),
        "defrag_plans": c["defrag_plans"],
        "blocked_topology": c["blocked_topology"],
        "blocked_capacity": c["blocked_capacity"],
    }


@dataclass(frozen=True, slots=True)
class WhatIfReport:
    """The record, the recorded policy re-run on its inputs, and the what-if."""

    recorded_policy: str
    what_if: str
    recorded: dict[str, Any]
    rerun: PolicyMetrics
    alternative: PolicyMetrics

    def rows(self) -> list[tuple[str, Any, Any, Any]]:
        """(metric, recorded, re-run, what-if) for every figure of the simulator's report
        that is one number or count: per-queue figures (`rerun.queues`) come as tables."""
        a, b = self.rerun.model_dump(), self.alternative.model_dump()
        skip = {"policy", "queue_wait_hours", "queues"}
        return [(k, self.recorded.get(k), a[k], b[k]) for k in a if k not in skip]

    def as_json(self) -> dict[str, Any]:
        return {
            "recorded_policy": self.recorded_policy,
            "what_if": self.what_if,
            "recorded": self.recorded,
            "rerun": self.rerun.model_dump(mode="json"),
            "what_if_metrics": self.alternative.model_dump(mode="json"),
        }


def what_if(
    events: Sequence[Event],
    change: WhatIf,
    *,
    progress: Callable[[str, float], None] | None = None,
) -> WhatIfReport:
    """Replay one cluster's recorded inputs as recorded and under `change`."""
    inputs = recorded_inputs(events)
    base = inputs.settings
    policy = recorded_preset(base)
    alt_policy = change.policy or policy
    merged = PolicySettings.model_validate({**base.model_dump(), **change.settings})
    alt_settings = base.model_copy(update=merged.model_dump(include=set(change.settings)))

    def tick(name: str) -> Callable[[float], None]:
        return lambda done: progress(name, done) if progress else None

    rerun = run_inputs(inputs, policy, base, progress=tick("as recorded"))
    alt = run_inputs(inputs, alt_policy, alt_settings, progress=tick(change.label()))
    return WhatIfReport(policy, change.label(), record_metrics(events), rerun, alt)
