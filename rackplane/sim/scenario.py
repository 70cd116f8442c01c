"""Scenarios: a cluster, policy settings, a failure model, a workload and a duration.

A scenario file (YAML)::

    name: failures-128
    cluster: gb200-128.yaml        # a cluster file, relative to this file, or a generated one:
    # cluster: {racks: 16, nodes_per_rack: 18, racks_per_pod: 8, gpus_per_node: 4}
    policy: {slice_size: 16, spares_per_rack: 2}   # base settings; presets override
                                   # rack_local_slices, spares_per_rack (0 without "spares"),
                                   # defrag_enabled and ntp_allowed
    # policy: {queues: [{name: research}, {name: rl, parent: research, nominal_nodes: 320,
    #          borrowing_limit: 160}], default_queue: rl, fair_share_half_life: P7D}
    #                              # a shared cluster: the queue tree (`models/queues.py`);
    #                              # a workload class or job names its leaf queue (`queue`)
    policies: [tas+spares+defrag+ntp]   # what `simulate` runs without --policy/--compare
    days: 30
    seed: 1
    failures: {node_mtbi_days: 490, rack_mtbi_days: 730, repair: {GPU: {median_hours: 48}}}
    workload: {classes: [...], jobs: [...], trace: jobs.csv, rate_basis: per_1000_nodes}
    runtime: {warmup_days: 0, startup_minutes: 0, sample_minutes: 60,
              slow_cross_rack_jobs: true}
    comm: {nvlink_tb_s: 1.8, ib_gbit_s: 400, collective_share: 0.1}
    recovery: {swap_stall_minutes: 10, degrade_stall_minutes: 10,   # default: restart_overhead
               memory_checkpoint_minutes: null, power_boost_speedup: 1.143,
               reshard_overhead: 0.01}   # what swaps and degrades cost (`recovery`)
    cost: {gpu_hour_usd: 3.0}

Everything but `cluster` has a default. `load_scenario` is the only place in the simulator that
reads files (the scenario, its cluster file, its trace); `build_scenario` is pure.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from rackplane.importers import TopologyFileError, load_cluster_file
from rackplane.models import PolicySettings, Rack, Topology
from rackplane.policies import PRESETS
from rackplane.sim.comm import CommModel
from rackplane.sim.failures import FailureModel
from rackplane.sim.recovery import RecoveryModel
from rackplane.sim.workload import TraceError, Workload, parse_trace_csv

DEFAULT_START = datetime(2026, 12, 1, tzinfo=UTC)
DEFAULT_POLICY = "tas+spares+defrag+ntp"
MAX_DAYS = 36_525
"""The longest run or warm-up (a century): a longer one would not finish in a lifetime."""


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; the message names the file and what is wrong."""


class GeneratedCluster(BaseModel):
    """A regular cluster: `racks` racks of `nodes_per_rack` nodes, `racks_per_pod` per pod."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "sim"
    racks: int = Field(ge=1, le=100_000)
    nodes_per_rack: int = Field(default=18, ge=1, le=1_024)
    racks_per_pod: int = Field(default=8, ge=1)
    gpus_per_node: int = Field(default=4, ge=1, le=64)

    def topology(self) -> Topology:
        """Racks `r0001`.. with nodes `r0001n01`.., pods `p001`.."""
        return Topology(
            cluster=self.name,
            racks=tuple(
                Rack(
                    id=f"r{r + 1:04d}",
                    pod=f"p{r // self.racks_per_pod + 1:03d}",
                    nodes=tuple(f"r{r + 1:04d}n{i:02d}" for i in range(1, self.nodes_per_rack + 1)),
                    gpus_per_node=self.gpus_per_node,
                )
                for r in range(self.racks)
            ),
        )


class RuntimeSettings(BaseModel):
    """How the simulated job runtime behaves and how often capacity is sampled."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    warmup_days: float = Field(default=0.0, ge=0, le=MAX_DAYS, allow_inf_nan=False)
    """Simulated before measuring starts (the cluster starts empty); `days` come after it."""
    startup_minutes: float = Field(default=0.0, ge=0)
    """From placement to running (StartJob)."""
    sample_minutes: float = Field(default=60.0, ge=1, le=MAX_DAYS * 1_440, allow_inf_nan=False)
    """Interval of the capacity samples (usable nodes, fragmentation)."""
    slow_cross_rack_jobs: bool = True
    """A job with a slice across racks progresses 1 / (1 + penalty) as fast (`comm`)."""


class CostModel(BaseModel):
    """What a GPU-hour costs (an assumption: set your own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_hour_usd: float = Field(default=3.0, ge=0)


class ScenarioDoc(BaseModel):
    """A scenario as written in its file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = None
    description: str = ""
    cluster: str | GeneratedCluster
    policy: dict[str, Any] = Field(default_factory=dict)
    policies: tuple[str, ...] = (DEFAULT_POLICY,)
    days: float = Field(default=7.0, gt=0, le=MAX_DAYS, allow_inf_nan=False)
    seed: int = 0
    start: AwareDatetime = DEFAULT_START
    failures: FailureModel = FailureModel()
    workload: Workload = Workload()
    runtime: RuntimeSettings = RuntimeSettings()
    comm: CommModel = CommModel()
    recovery: RecoveryModel = RecoveryModel()
    cost: CostModel = CostModel()


class Scenario(BaseModel):
    """A scenario ready to run: the topology resolved, the settings merged."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    topology: Topology
    settings: PolicySettings
    policies: tuple[str, ...]
    days: float
    seed: int
    start: datetime
    failures: FailureModel
    workload: Workload
    runtime: RuntimeSettings
    comm: CommModel
    cost: CostModel
    recovery: RecoveryModel = RecoveryModel()


def build_scenario(
    doc: ScenarioDoc,
    *,
    topology: Topology | None = None,
    cluster_policy: PolicySettings | None = None,
    name: str = "scenario",
) -> Scenario:
    """A runnable scenario from its document (pure).

    Args:
        doc: the document.
        topology: the cluster, when `doc.cluster` names a file (read by the caller).
        cluster_policy: the cluster file's policy, which `doc.policy` overrides field by field.
        name: the name when the document gives none.

    Raises:
        ScenarioError: unknown policies, bad settings, or a cluster file name and no topology.
    """
    if isinstance(doc.cluster, GeneratedCluster):
        topology = doc.cluster.topology()
    elif topology is None:
        raise ScenarioError(f"the cluster file {doc.cluster!r} must be loaded first")
    unknown = [p for p in doc.policies if p not in PRESETS]
    if unknown:
        raise ScenarioError(f"unknown policy {unknown[0]!r}; choose from {', '.join(PRESETS)}")
    check_days(doc.days, start=doc.start, warmup_days=doc.runtime.warmup_days)
    base = (cluster_policy or PolicySettings()).model_dump()
    try:
        settings = PolicySettings.model_validate({**base, **doc.policy})
    except ValidationError as err:
        raise ScenarioError(f"policy: {_first(err)}") from None
    why = check_queues(settings, doc.workload)
    if why is not None:
        raise ScenarioError(why)
    return Scenario(
        name=doc.name or name,
        description=doc.description,
        topology=topology,
        settings=settings,
        policies=doc.policies,
        days=doc.days,
        seed=doc.seed,
        start=doc.start,
        failures=doc.failures,
        workload=doc.workload,
        runtime=doc.runtime,
        comm=doc.comm,
        cost=doc.cost,
        recovery=doc.recovery,
    )


def check_days(days: float, *, start: datetime, warmup_days: float) -> None:
    """Refuse a run of `days` (after `warmup_days` from `start`) that could not be simulated.

    Raises:
        ScenarioError: `days` is not a number in (0, MAX_DAYS], or the run would end past the
            last date there is (9999-12-31).
    """
    if not 0 < days <= MAX_DAYS:  # also NaN
        raise ScenarioError(f"days must be more than 0 and at most {MAX_DAYS:,}, got {days}")
    try:
        start + timedelta(days=warmup_days + days + 1)  # a day for what is drawn past the end
    except OverflowError:
        raise ScenarioError(
            f"a {days:g}-day run from {start:%Y-%m-%d} would end after the year 9999"
        ) from None


def check_queues(settings: PolicySettings, workload: Workload) -> str | None:
    """Why a workload's jobs would be refused at submission for their queue, or None: a class
    or a job names a queue that is not a leaf of `settings.queues` (or any queue where none
    are set), names none where queues are set without a default queue, or has a kind its
    queue does not run."""
    specs = {q.name: q for q in settings.queues}
    parents = {q.parent for q in settings.queues}
    leaves = [name for name in specs if name not in parents]
    named = [
        (f"workload.classes[{i}] ({c.name})", c.queue, c.kind)
        for i, c in enumerate(workload.classes)
    ]
    named += [(f"workload.jobs[{i}]", j.queue, j.kind) for i, j in enumerate(workload.jobs)]
    for where, named_queue, kind in named:
        queue = named_queue or settings.default_queue
        if queue is None:
            if specs:
                return (
                    f"{where}: names no queue and policy.default_queue is not set; "
                    f"name one of {', '.join(leaves)}"
                )
            continue
        if not specs:
            return f"{where}: queue {queue!r}: policy.queues is empty (set the queue tree)"
        if queue not in specs:
            return f"{where}: queue {queue!r} is not in policy.queues (leaves: {', '.join(leaves)})"
        if queue in parents:
            return (
                f"{where}: queue {queue!r} has child queues: jobs go to a leaf "
                f"({', '.join(leaves)})"
            )
        if kind not in specs[queue].kinds:
            return f"{where}: queue {queue!r} does not run {kind.value} jobs"
    return None


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario file, its cluster file and its trace (both relative to the scenario).

    Raises:
        ScenarioError: a file that cannot be read or a value that is not valid, named.
    """
    path = Path(path)
    text = _read(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ScenarioError(f"{path}: expected valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping with at least 'cluster'")
    try:
        doc = ScenarioDoc.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(f"{path}: {_first(err)}") from None
    topology, cluster_policy = None, None
    if isinstance(doc.cluster, str):
        try:
            loaded = load_cluster_file(path.parent / doc.cluster)
        except (OSError, TopologyFileError) as err:
            raise ScenarioError(f"{path}: cluster {doc.cluster!r}: {err}") from None
        topology, cluster_policy = loaded.topology, loaded.policy
    if doc.workload.trace is not None:
        trace = path.parent / doc.workload.trace
        try:
            rows = parse_trace_csv(_read(trace), str(trace))
        except (TraceError, ScenarioError) as err:
            raise ScenarioError(f"{path}: workload.trace: {err}") from None
        workload = doc.workload.model_copy(update={"jobs": (*doc.workload.jobs, *rows)})
        doc = doc.model_copy(update={"workload": workload})
    try:
        return build_scenario(doc, topology=topology, cluster_policy=cluster_policy, name=path.stem)
    except ScenarioError as err:
        raise ScenarioError(f"{path}: {err}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ScenarioError(
            f"{path}: expected UTF-8 text (byte {err.start} cannot be decoded)"
        ) from None


def _first(err: ValidationError) -> str:
    first = err.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])
