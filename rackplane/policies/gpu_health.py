"""The GPU Manager's classification: a node's telemetry folded into a health verdict. Pure.

Theory of operation. `step(state, sample, ...)` folds one node sample into the node's
`NodeHealthState` and returns the new state and a `Verdict`; time is the sample's `at`, nothing
else. The phases of one step:

1. Conditions: each GPU's readings against the rules of `_gpu_rules` (uncorrectable ECC,
   row-remap failure/pending, HW thermal slowdown vs the normal SW power cap, NVLink down,
   fallen off the bus, ...).
2. XIDs: new XIDs join the node's open incident, or open one; an incident closes after
   `incident_gap` (3 minutes, NVIDIA's grouping) without a new XID. While open, it weighs
   with its worst XID's action from the `XidTable` (`reset_gpu` and worse: failed). Incidents
   that keep recurring (`recurring` of them within `recurring_window`) make the node degraded
   even when each asks only to restart the application.
3. The raw verdict is the worst of 1 and 2.
4. Hysteresis, so that a transient reading or a flapping node does not cause swap storms:
   - up: the node becomes degraded (or failed) only after `confirm` raw verdicts at least
     that bad within `confirm_window`; a single transient reading changes nothing;
   - down: degraded -> healthy only after `clear_after` of clean samples in a row;
   - failed is sticky: the node returns only through `RepairNode`, after which the caller
     starts it over with `repaired(state)` (`GpuHealthRules` does when the controller's view
     of the node shows a repair newer than the state's, or, for a caller that does not say
     the repair's seq, goes from failed to healthy).

`GpuHealthRules` keeps one state per node behind the `HealthClassifier` interface, for the
`gpu_manager` agent. Given the node's rack (`classify(..., rack=(rack, view))`), it first runs
the rack rule of `_rack_rules` (NVLink-fabric XIDs on 2 nodes of one rack within 3 minutes:
link-down XIDs degrade the rack, domain XIDs fail it, `Verdict.rack`); while the rack is at
fault, the fabric XIDs of that fault weigh nothing on its nodes (`absolved`), and a degraded
rack's lost tray is not counted as links down on each node, so they are not failed or degraded
one by one for the rack's fault.

The shortcut. Most samples are of a healthy node that stays healthy: its state settled (healthy,
clean since an earlier sample, no suspicion, no incident, no XID remembered), its rack's evidence
empty with nothing held against the rack, and the sample quiet (no rule fires, no XID). For such
a sample the fold above returns the same state, the same rack evidence and the healthy verdict,
so `GpuHealthRules.classify` returns that verdict without running it (`shortcut=False` runs the
full fold every time; the tests compare the two on generated samples).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from rackplane.models import Health, NodeTelemetry, RackHealth, XidAction
from rackplane.policies._gpu_rules import Finding, gpu_findings, new_xids, quiet
from rackplane.policies._rack_rules import (
    RackEvidence,
    RackRules,
    Sighting,
    beyond_a_tray,
    fabric_off,
    fabric_sighting,
    rack_step,
    tray_links_off,
)
from rackplane.policies.health import RANK, RackVerdict, RackView, Verdict
from rackplane.policies.xid import HEALTH_OF, XidTable, default_table, worse


@dataclass(frozen=True, slots=True)
class HealthRules:
    """Thresholds of the GPU Manager (defaults in the module docstring)."""

    hot_c: float = 90.0
    incident_gap: timedelta = timedelta(minutes=3)
    confirm: int = 2
    confirm_window: timedelta = timedelta(minutes=5)
    clear_after: timedelta = timedelta(minutes=10)
    recurring: int = 3
    recurring_window: timedelta = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Incident:
    """XIDs of one incident: each came within `incident_gap` of the previous one."""

    first_at: datetime
    last_at: datetime
    xids: tuple[tuple[int, int], ...]
    """(gpu index, XID) in arrival order."""
    worst: int
    """The XID with the most severe action."""
    action: XidAction


@dataclass(frozen=True, slots=True)
class NodeHealthState:
    """What the fold remembers about one node."""

    health: Health = Health.HEALTHY
    evidence: tuple[str, ...] = ()
    last_xid: tuple[tuple[int, int], ...] = ()
    """(gpu index, last XID seen): DCGM's sticky XID counts once."""
    incident: Incident | None = None
    incident_starts: tuple[datetime, ...] = ()
    """Starts of recent incidents asking for an action (within `recurring_window`)."""
    suspect_degraded: tuple[datetime, int] | None = None
    """(first raw verdict at least degraded, how many since) inside `confirm_window`."""
    suspect_failed: tuple[datetime, int] | None = None
    """The same for raw failed verdicts."""
    clean_since: datetime | None = None
    known_failed: bool = False
    """The controller's view of the node was failed at the last sample (see `GpuHealthRules`)."""
    repair: int = 0
    """The seq of the node's last repair (`NodeRepaired`) this state starts from (0: none)."""


def repaired(state: NodeHealthState, seq: int | None = None) -> NodeHealthState:
    """The node was repaired (at `seq`, when known): start over healthy, remembering which
    sticky XIDs were seen."""
    return NodeHealthState(last_xid=state.last_xid, repair=state.repair if seq is None else seq)


def absolved(state: NodeHealthState, table: XidTable) -> NodeHealthState:
    """The node's open incident weighed again with `table`, its unconfirmed suspicions dropped.

    For the nodes that gave the evidence of a rack fault: `table` sets the fabric XIDs to
    `none`, so the rack's fault neither fails the node nor counts as one of its incidents.
    """
    incident, starts = state.incident, state.incident_starts
    if incident is not None:
        worst, action = incident.xids[0][1], table.policy(incident.xids[0][1]).action
        for _, code in incident.xids[1:]:
            top = worse(action, table.policy(code).action)
            if top is not action:
                worst, action = code, top
        if action is XidAction.NONE:
            starts = tuple(s for s in starts if s != incident.first_at)
        incident = replace(incident, worst=worst, action=action)
    return replace(
        state, incident=incident, incident_starts=starts, suspect_degraded=None, suspect_failed=None
    )


def _xid_phase(
    state: NodeHealthState, sample: NodeTelemetry, table: XidTable, rules: HealthRules
) -> tuple[Incident | None, tuple[datetime, ...], tuple[tuple[int, int], ...]]:
    at = sample.at
    last = dict(state.last_xid)
    incident = state.incident
    if incident is not None and at - incident.last_at > rules.incident_gap:
        incident = None
    starts = state.incident_starts
    for g in sample.gpus:
        fresh = new_xids(g, last.get(g.index))
        if g.xid:
            last[g.index] = g.xid
        elif g.xids is None:
            last.pop(g.index, None)  # the last-XID reading cleared (an exporter restart)
        for code in fresh:
            action = table.policy(code).action
            if incident is None:
                incident = Incident(at, at, ((g.index, code),), code, action)
                if action is not XidAction.NONE:
                    starts = (*starts, at)
            else:
                top = worse(incident.action, action)
                worst = incident.worst if top is incident.action else code
                xids = (*incident.xids, (g.index, code))[-64:]
                incident = Incident(incident.first_at, at, xids, worst, top)
    starts = tuple(s for s in starts if at - s <= rules.recurring_window)
    return incident, starts, tuple(sorted(last.items()))


def _describe(incident: Incident, table: XidTable) -> str:
    worst = table.policy(incident.worst)
    gpus = sorted({g for g, x in incident.xids if x == incident.worst})
    codes = ", ".join(str(x) for x in dict.fromkeys(x for _, x in incident.xids))
    return (
        f"GPU {','.join(map(str, gpus))}: XID {worst.code} {worst.name} -> {incident.action.value}"
        f" ({worst.source}); incident of {len(incident.xids)} XIDs [{codes}]"
        f" since {incident.first_at.isoformat()}"
    )


def _count(
    prev: tuple[datetime, int] | None, at: datetime, window: timedelta
) -> tuple[datetime, int]:
    if prev is None or at - prev[0] > window:
        return (at, 1)
    return (prev[0], prev[1] + 1)


def step(
    state: NodeHealthState,
    sample: NodeTelemetry,
    table: XidTable,
    rules: HealthRules = HealthRules(),
) -> tuple[NodeHealthState, Verdict]:
    """Fold one sample (see the module docstring for the phases)."""
    at = sample.at
    # 1. Conditions.
    findings: list[Finding] = []
    for g in sample.gpus:
        findings.extend(gpu_findings(g, rules.hot_c))
    # 2. XIDs.
    xid_seen = any(g.xid or g.xids for g in sample.gpus)
    if xid_seen or state.incident is not None or state.incident_starts or state.last_xid:
        incident, starts, last = _xid_phase(state, sample, table, rules)
        if incident is not None and HEALTH_OF[incident.action] is not Health.HEALTHY:
            findings.append((HEALTH_OF[incident.action], "xid", _describe(incident, table)))
        if len(starts) >= rules.recurring:
            findings.append(
                (Health.DEGRADED, "recurring_xids", f"{len(starts)} XID incidents within "
                 f"{rules.recurring_window}")
            )  # fmt: skip
        state = replace(state, incident=incident, incident_starts=starts, last_xid=last)
    # 3. The raw verdict.
    raw = Health.HEALTHY
    for h, _, _ in findings:
        if RANK[h] > RANK[raw]:
            raw = h
    # 4. Hysteresis.
    if state.health is Health.FAILED:
        return state, _verdict(state)
    window = rules.confirm_window
    if raw is Health.HEALTHY:
        if state.suspect_degraded is None and state.clean_since is not None:
            if state.health is Health.HEALTHY:
                return state, _HEALTHY
            if at - state.clean_since >= rules.clear_after:
                cause = f"clean since {state.clean_since.isoformat()}"
                state = replace(state, health=Health.HEALTHY, evidence=())
                return state, Verdict(Health.HEALTHY, cause, (cause,))
            return state, _verdict(state)
        state = replace(
            state,
            clean_since=state.clean_since or at,
            suspect_degraded=_alive(state.suspect_degraded, at, window),
            suspect_failed=_alive(state.suspect_failed, at, window),
        )
        return state, _verdict(state)
    degraded = _count(state.suspect_degraded, at, window)
    failed = state.suspect_failed
    if raw is Health.FAILED:
        failed = _count(failed, at, window)
    state = replace(state, suspect_degraded=degraded, suspect_failed=failed, clean_since=None)
    confirmed = state.health
    if failed is not None and failed[1] >= rules.confirm:
        confirmed = Health.FAILED
    elif degraded[1] >= rules.confirm:
        confirmed = Health.DEGRADED
    if confirmed is not Health.HEALTHY:
        evidence = tuple(e for h, _, e in findings if h is not Health.HEALTHY)
        state = replace(state, health=confirmed, evidence=evidence)
    return state, _verdict(state)


def _alive(
    suspect: tuple[datetime, int] | None, at: datetime, window: timedelta
) -> tuple[datetime, int] | None:
    return suspect if suspect is not None and at - suspect[0] <= window else None


_HEALTHY = Verdict(Health.HEALTHY)


def _settled(state: NodeHealthState) -> bool:
    """A quiet sample leaves `state` as it is and the verdict healthy (step 4's first case):
    healthy, clean since an earlier sample, no suspicion, no incident, no XID remembered."""
    return (
        state.health is Health.HEALTHY
        and state.clean_since is not None
        and state.suspect_degraded is None
        and state.incident is None
        and not state.incident_starts
        and not state.last_xid
        and not state.known_failed
    )


def _quiet(sample: NodeTelemetry, hot_c: float) -> bool:
    """No GPU of the sample fires a rule or reports an XID."""
    # A loop, not all() over a generator: this runs for nearly every sample.
    for g in sample.gpus:  # noqa: SIM110
        if not quiet(g, hot_c):
            return False
    return True


MAX_CAUSE = 1_000
"""Characters of evidence in a verdict's cause (commands cap it at 2,000)."""


def _verdict(state: NodeHealthState) -> Verdict:
    cause = "; ".join(state.evidence)
    if len(cause) > MAX_CAUSE:
        cause = f"{cause[: MAX_CAUSE - 40]}... ({len(state.evidence)} findings in all)"
    return Verdict(state.health, cause, state.evidence)


@dataclass
class GpuHealthRules:
    """The fold behind the `HealthClassifier` interface: one `NodeHealthState` per node.

    Deterministic (no clock); the only mutable part is the map of states, which the
    `gpu_manager` agent owns. Operator overrides of the XID table come per call (from the
    cluster's policy settings).
    """

    rules: HealthRules = field(default_factory=HealthRules)
    table: XidTable = field(default_factory=default_table)
    rack_rules: RackRules = field(default_factory=RackRules)
    states: dict[tuple[str, str], NodeHealthState] = field(default_factory=dict)
    racks: dict[tuple[str, str], RackEvidence] = field(default_factory=dict)
    _tables: dict[tuple[tuple[int, XidAction], ...], XidTable] = field(default_factory=dict)
    shortcut: bool = True
    """Skip the fold for a quiet sample of a settled node (see the module docstring)."""

    def classify(
        self,
        sample: NodeTelemetry,
        *,
        known: Health | None = None,
        overrides: Mapping[int, XidAction] | None = None,
        rack: RackView | None = None,
        repaired_at: int = 0,
    ) -> Verdict:
        """Fold `sample` into its node's state (and, given `rack`, into the rack's evidence).

        `known` is the controller's view of the node, `rack` the node's rack and the
        controller's view of it, `repaired_at` the seq of the node's last repair in that view.
        """
        key = (sample.cluster, sample.node)
        state = self.states.get(key)
        if (
            self.shortcut
            and state is not None
            and known is not Health.FAILED
            and repaired_at <= state.repair
            and _settled(state)
            and (rack is None or self._rack_settled(sample.cluster, rack))
            and _quiet(sample, self.rules.hot_c)
        ):
            return _HEALTHY
        if state is None:
            state = NodeHealthState(repair=repaired_at)
        elif repaired_at > state.repair:
            # A repair this state does not start from, read from the view itself: however the
            # view learnt of it (a replica rebuilt from the log folds events no agent was
            # handed), and whatever this manager concluded before it.
            state = repaired(state, repaired_at)
        if known is Health.FAILED:
            if state.health is not Health.FAILED or not state.known_failed:
                evidence = state.evidence or ("failed before this manager started",)
                state = replace(state, health=Health.FAILED, evidence=evidence, known_failed=True)
        elif known is not None and state.known_failed:
            # The controller's view went from failed to healthy: a repair (RepairNode). Read
            # from the view itself, so a repair is seen however the replica learnt of it.
            state = repaired(state)
        self.states[key] = state
        table, rack_verdict = self._table(overrides), None
        if rack is not None:
            table, rack_verdict, fault = self._rack(sample, rack, overrides)
            state = self.states[key]
            if fault is RackHealth.DEGRADED and any(g.nvlink_down for g in sample.gpus):
                sample = sample.model_copy(
                    update={"gpus": tray_links_off(sample.gpus, self.rack_rules)}
                )
        state, verdict = step(state, sample, table, self.rules)
        self.states[key] = state
        return verdict if rack_verdict is None else replace(verdict, rack=rack_verdict)

    def _rack_settled(self, cluster: str, rack: RackView) -> bool:
        """The rack rule leaves the rack's evidence as it is for a sample without XIDs: no
        sighting kept, nothing held against the rack, by this manager or the controller."""
        rack_id, known = rack
        evidence = self.racks.get((cluster, rack_id))
        return (
            evidence is not None
            and known is RackHealth.HEALTHY
            and evidence.known is RackHealth.HEALTHY
            and evidence.fault is RackHealth.HEALTHY
            and not evidence.sightings
        )

    def _rack(
        self, sample: NodeTelemetry, rack: RackView, overrides: Mapping[int, XidAction] | None
    ) -> tuple[XidTable, RackVerdict | None, RackHealth]:
        """The rack rule (`_rack_rules`); the table the node's own fold runs with, and the
        fault the rack is held at."""
        rack_id, known = rack
        key = (sample.cluster, rack_id)
        table = self._table(overrides)
        before = self.racks.get(key) or RackEvidence()
        last = dict(self.states[(sample.cluster, sample.node)].last_xid)
        xids = fabric_sighting(sample.gpus, last, table, self.rack_rules)
        wide = bool(xids) and beyond_a_tray(sample.gpus, self.rack_rules)
        sighting = Sighting(sample.node, sample.at, xids, wide)
        evidence, verdict = rack_step(before, rack_id, known, sighting, table, self.rack_rules)
        self.racks[key] = evidence
        if not evidence.at_fault:
            return table, None, evidence.fault
        quiet = self._table({**(overrides or {}), **fabric_off(self.rack_rules, evidence.fault)})
        if verdict is not None or before.fault is not evidence.fault:
            for s in evidence.sightings:  # the nodes that gave the evidence
                node = (sample.cluster, s.node)
                if node in self.states:
                    self.states[node] = absolved(self.states[node], quiet)
        return quiet, verdict, evidence.fault

    def forget(self, cluster: str, node: str) -> None:
        """The node was repaired: its next samples start from healthy. For callers that fold
        samples without the controller's view; the GPU Manager passes `repaired_at` instead."""
        state = self.states.get((cluster, node))
        if state is not None:
            self.states[(cluster, node)] = repaired(state)

    def _table(self, overrides: Mapping[int, XidAction] | None) -> XidTable:
        if not overrides:
            return self.table
        key = tuple(sorted(overrides.items()))
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = self.table.with_overrides(overrides)
        return table
