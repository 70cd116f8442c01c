"""Capacity model, failure model, workloads, and the discrete-event simulator. Virtual time only.

- `capacity`: expected usable nodes when every slice must fit inside one rack.
- `reliability`: rack and cluster interruption rates from the node MTBI.
- `failures`: node and rack failures (Llama 3 root causes), repairs.
- `workload`: synthetic job classes and traces.
- `comm`: the step-time penalty of slices that span racks.
- `recovery`: what a swap and a degrade cost the job (rollback, stall, degraded pace).
- `scenario`: a cluster, settings, failures, workload and duration, from a YAML file.
- `simulator`: the real controller and policies driven in virtual time; `report`: metrics.
"""

from rackplane.sim.capacity import (
    DEFAULT_SLICE_SIZES,
    Advantage,
    CapacityError,
    CapacityReport,
    SliceCapacity,
    capacity_report,
    monte_carlo_usable,
    parse_sweep,
    rack_usable,
    unavailability_from,
    usable_nodes,
)
from rackplane.sim.comm import CommModel
from rackplane.sim.failures import (
    Failure,
    FailureModel,
    Lognormal,
    RootCause,
    ScriptedFailure,
    expected_unavailability,
    failure_schedule,
    mean_repair_hours,
    root_causes,
)
from rackplane.sim.recovery import RecoveryModel
from rackplane.sim.reliability import ReliabilityReport, reliability
from rackplane.sim.report import (
    COLUMNS,
    PolicyMetrics,
    QueueMetrics,
    SimReport,
    WaitStats,
    format_value,
    jain_index,
)
from rackplane.sim.scenario import (
    MAX_DAYS,
    CostModel,
    GeneratedCluster,
    RuntimeSettings,
    Scenario,
    ScenarioDoc,
    ScenarioError,
    build_scenario,
    check_days,
    check_queues,
    load_scenario,
)
from rackplane.sim.simulator import Simulation, VirtualClock, compare, simulate
from rackplane.sim.workload import (
    DEFAULT_CLASSES,
    Arrival,
    Duration,
    JobClass,
    NodeRange,
    TraceError,
    TraceJob,
    Workload,
    generate_arrivals,
    parse_trace_csv,
)

__all__ = [
    "COLUMNS",
    "DEFAULT_CLASSES",
    "DEFAULT_SLICE_SIZES",
    "MAX_DAYS",
    "Advantage",
    "Arrival",
    "CapacityError",
    "CapacityReport",
    "CommModel",
    "CostModel",
    "Duration",
    "Failure",
    "FailureModel",
    "GeneratedCluster",
    "JobClass",
    "Lognormal",
    "NodeRange",
    "PolicyMetrics",
    "QueueMetrics",
    "RecoveryModel",
    "ReliabilityReport",
    "RootCause",
    "RuntimeSettings",
    "Scenario",
    "ScenarioDoc",
    "ScenarioError",
    "ScriptedFailure",
    "SimReport",
    "Simulation",
    "SliceCapacity",
    "TraceError",
    "TraceJob",
    "VirtualClock",
    "WaitStats",
    "Workload",
    "build_scenario",
    "capacity_report",
    "check_days",
    "check_queues",
    "compare",
    "expected_unavailability",
    "failure_schedule",
    "format_value",
    "generate_arrivals",
    "jain_index",
    "load_scenario",
    "mean_repair_hours",
    "monte_carlo_usable",
    "parse_sweep",
    "parse_trace_csv",
    "rack_usable",
    "reliability",
    "root_causes",
    "simulate",
    "unavailability_from",
    "usable_nodes",
]
