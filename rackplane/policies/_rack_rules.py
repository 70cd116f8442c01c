"""The GPU Manager's rack rule: NVLink-fabric XIDs on several nodes of one rack. Pure.

Theory of operation. In an NVL72 rack the compute trays reach each other over NVLink only
through the rack's NVSwitch trays: every GPU has one link to each switch chip. An NVLink error
on one node may be that node's GPU, cable cartridge or connector; the same kind of error on
two nodes of one rack within one incident points at what they share, the switch trays (or the
rack's NVLink spine), and so at the rack. Rules of this file:

- evidence: a new fabric XID (`xid.fabric_xids()`: 144, 145, 146, 149) whose action, after
  the operator's overrides, takes a GPU out of service. Source: NVIDIA's decode sheet of the
  NVLink5 XIDs, where the fatal sub-codes of those XIDs reach the remote end of the link.
- nodes: 2 distinct nodes of the rack. Two independent node faults in one 18-node rack within
  3 minutes of each other are about 1 in 7,000 (17 other nodes x 6 minutes / 490 days between
  interruptions per node: DESIGN.md), about 1 in 80,000 for network faults alone (8.4% of Llama
  3's interruptions); a rack-level fault reaches every node at once.
- window: 3 minutes between sightings counted: NVIDIA's XID incident grouping (3 minutes of
  silence), the node fold's `incident_gap`.

1. The controller's view first: a rack it holds failed is at fault here too; a rack whose
   view went from failed to healthy (`ReportRackHealth healthy`, after the repair) starts over.
   A verdict the controller never took (rejected, or the rack recovered before this manager
   saw it fail) is forgotten after `window`, so that new evidence can raise it again.
2. Each node's latest sighting within `window` of the sample is kept, one per node.
3. At `nodes` distinct nodes the rack is failed: one `RackVerdict` (failed is what the
   evidence says: every fabric XID asks for a reset; `RackHealth` has no degraded level).
   While the rack is at fault, its nodes' fabric XIDs weigh nothing on the nodes (the caller
   runs the node fold with them set to `none`): the rack fault evacuates the rack, and the
   nodes are not failed one by one for the rack's fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from rackplane.models import GpuSample, Health, RackHealth, XidAction
from rackplane.policies._gpu_rules import new_xids
from rackplane.policies.health import RackVerdict
from rackplane.policies.xid import HEALTH_OF, XidTable, fabric_xids

MAX_CAUSE = 1_000
"""Characters of evidence in a rack verdict's cause (commands cap it at 2,000)."""


@dataclass(frozen=True, slots=True)
class RackRules:
    """Thresholds of the rack rule (defaults and sources in the module docstring)."""

    nodes: int = 2
    window: timedelta = timedelta(minutes=3)
    xids: frozenset[int] = field(default_factory=fabric_xids)


@dataclass(frozen=True, slots=True)
class Sighting:
    """New fabric XIDs of one node sample."""

    node: str
    at: datetime
    xids: tuple[tuple[int, int], ...]
    """(gpu index, XID)."""


@dataclass(frozen=True, slots=True)
class RackEvidence:
    """What the rack rule remembers about one rack."""

    sightings: tuple[Sighting, ...] = ()
    at_fault_since: datetime | None = None
    """When this manager judged the rack failed, or first saw the controller hold it failed."""
    known_failed: bool = False
    """The controller's view of the rack was failed at the last sample of one of its nodes."""

    @property
    def at_fault(self) -> bool:
        """The rack is failed for this manager: its nodes' fabric XIDs weigh nothing on them."""
        return self.at_fault_since is not None


def fabric_sighting(
    gpus: tuple[GpuSample, ...],
    last: dict[int, int],
    table: XidTable,
    rules: RackRules,
) -> tuple[tuple[int, int], ...]:
    """The new fabric XIDs of a sample that take a GPU out of service, as (gpu, XID).

    Args:
        gpus: the sample's GPUs.
        last: the last XID seen per GPU before this sample (DCGM's sticky XID counts once).
        table: the cluster's XID table, with the operator's overrides.
        rules: which XIDs are fabric XIDs.
    """
    out = []
    for g in gpus:
        for code in new_xids(g, last.get(g.index)):
            if code in rules.xids and HEALTH_OF[table.policy(code).action] is not Health.HEALTHY:
                out.append((g.index, code))
    return tuple(out)


def rack_step(
    evidence: RackEvidence,
    rack: str,
    known: RackHealth,
    sighting: Sighting,
    table: XidTable,
    rules: RackRules = RackRules(),
) -> tuple[RackEvidence, RackVerdict | None]:
    """Fold one node sample's fabric XIDs (`sighting.xids`, maybe none) into its rack's evidence.

    Args:
        evidence: the rack's evidence so far.
        rack: the rack's id.
        known: the controller's view of the rack.
        sighting: the node, the sample's time, and its new fabric XIDs.
        table: the XID table (for the names in the cause).
        rules: the thresholds.

    Returns:
        The new evidence, and a verdict when this sample makes the rack failed.
    """
    at = sighting.at
    # 1. The controller's view.
    if known is RackHealth.FAILED:
        if not evidence.known_failed:
            evidence = replace(
                evidence, known_failed=True, at_fault_since=evidence.at_fault_since or at
            )
    elif evidence.known_failed:
        evidence = RackEvidence()  # repaired: start over
    elif evidence.at_fault_since is not None and at - evidence.at_fault_since > rules.window:
        evidence = RackEvidence()  # the controller never took the verdict
    # 2. One sighting per node within the window.
    kept = tuple(
        s
        for s in evidence.sightings
        if at - s.at <= rules.window and not (sighting.xids and s.node == sighting.node)
    )
    if sighting.xids:
        kept = (*kept, sighting)
    evidence = replace(evidence, sightings=kept)
    # 3. The rule.
    nodes = dict.fromkeys(s.node for s in kept)
    if evidence.at_fault or not sighting.xids or len(nodes) < rules.nodes:
        return evidence, None
    evidence = replace(evidence, at_fault_since=at)
    return evidence, RackVerdict(rack, RackHealth.FAILED, _cause(rack, kept, table, rules))


def _cause(rack: str, sightings: tuple[Sighting, ...], table: XidTable, rules: RackRules) -> str:
    seen = "; ".join(
        f"{s.node} GPU {','.join(str(g) for g in dict.fromkeys(g for g, _ in s.xids))}: XID "
        + ", ".join(f"{x} {table.policy(x).name}" for x in dict.fromkeys(x for _, x in s.xids))
        for s in sightings
    )
    head = (
        f"NVLink fabric XIDs on {len({s.node for s in sightings})} nodes of rack {rack} within "
        f"{rules.window} (rack rule: {rules.nodes} nodes): the NVSwitch trays they share"
    )
    cause = f"{head}; {seen}"
    if len(cause) > MAX_CAUSE:
        cause = f"{cause[: MAX_CAUSE - 40]}... ({len(sightings)} nodes in all)"
    return cause


def fabric_off(rules: RackRules) -> dict[int, XidAction]:
    """Overrides that make the fabric XIDs weigh nothing on a node of a rack at fault."""
    return dict.fromkeys(rules.xids, XidAction.NONE)
