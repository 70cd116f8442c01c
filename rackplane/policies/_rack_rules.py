"""The GPU Manager's rack rule: NVLink-fabric XIDs on several nodes of one rack. Pure.

Theory of operation. In an NVL72 rack the compute trays reach each other over NVLink only
through the rack's 9 NVSwitch trays: every GPU has 18 NVLink5 links, one to each of the 18
switch chips, so 2 into each tray. An NVLink error on one node may be that node's GPU, cable
cartridge or connector; the same kind of error on two nodes of one rack within one incident
points at what they share, the switch trays (or the rack's NVLink spine), and so at the rack.
How much of the rack it takes is read from NVIDIA's decode sheet of the NVLink5 XIDs
(`policies/data/xid_144_150_nvlink5_decode.csv`; `xid.fabric_xids`, `xid.link_xids`):

- 149 (NETIR) is a *link* XID: its reset sub-codes are "Link Fatal" link-down events
  (NETIR_LINK_DOWN, "investigate the peer device": the switch port at the other end). Links
  lost towards the switches on two nodes is what losing one NVSwitch tray looks like: each
  GPU keeps 16 of its 18 links, the rack runs at about 8/9 of its NVLink bandwidth, and
  the other 8 trays carry the traffic. Verdict: the rack is **degraded**.
- 144 (SAW), 145 (RLW), 146 (TLW) are *domain* XIDs: fatal errors of the GPUs' NVLink units
  ("Local: Xid 48, AppCrash; Remote: PacketLoss"): traffic across the fabric is lost, not
  routed around, and every GPU of the incident needs a reset. The same on two nodes, or links
  down beyond one tray's share on a GPU of two nodes (more than 2 of 18: more than one tray
  lost), is the whole domain. Verdict: the rack is **failed**.

The telemetry carries no sub-code (NVML and DCGM give the XID alone), so the rule works per
XID: 149's few non-link sub-codes (NETIR_MFDE_EVENT) read as a link too. Rules of this file:

- evidence: a new fabric XID (144, 145, 146, 149) whose action, after the operator's
  overrides, takes a GPU out of service; with it, whether a GPU of the sample reports more
  NVLink links down than one tray serves (`nvlink_down` > links / 9; 18 links when the
  exporter does not say `nvlink_up`).
- nodes: 2 distinct nodes of the rack. Two independent node faults in one 18-node rack within
  3 minutes of each other are about 1 in 7,000 (17 other nodes x 6 minutes / 490 days between
  interruptions per node: DESIGN.md), about 1 in 80,000 for network faults alone (8.4% of Llama
  3's interruptions); a rack-level fault reaches every node at once.
- window: 3 minutes between sightings counted: NVIDIA's XID incident grouping (3 minutes of
  silence), the node fold's `incident_gap`.

1. The controller's view first: a rack it holds degraded or failed is at that fault here too;
   a view that got better (`ReportRackHealth healthy`, or degraded after failed: a repair)
   starts over. A verdict the controller never took (rejected, or the rack recovered before
   this manager saw it) is forgotten after `window`, so that new evidence can raise it again.
2. Each node's latest sighting within `window` of the sample is kept, one per node.
3. At `nodes` distinct nodes the rack is degraded; at `nodes` distinct nodes with domain
   evidence it is failed. A verdict is raised only when it is worse than the fault already
   held: degraded, then failed when the domain goes too, each once.
4. While the rack is at fault, its nodes are not judged one by one for the rack's fault (the
   caller runs the node fold with `fabric_off`): failed, every fabric XID weighs `none` on
   them (the rack fault evacuates the rack); degraded, the link XID weighs `none` and the links
   of one tray are not counted down (`tray_links_off`), so the nodes keep their work and stay
   usable, while a domain XID still fails a node, and on two nodes fails the rack.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from rackplane.models import GpuSample, Health, RackHealth, XidAction
from rackplane.policies._gpu_rules import new_xids
from rackplane.policies.health import RackVerdict
from rackplane.policies.xid import HEALTH_OF, XidTable, fabric_xids, link_xids

MAX_CAUSE = 1_000
"""Characters of evidence in a rack verdict's cause (commands cap it at 2,000)."""


RANK = {RackHealth.HEALTHY: 0, RackHealth.DEGRADED: 1, RackHealth.FAILED: 2}
"""Severity order of rack verdicts."""


@dataclass(frozen=True, slots=True)
class RackRules:
    """Thresholds of the rack rule (defaults and sources in the module docstring)."""

    nodes: int = 2
    window: timedelta = timedelta(minutes=3)
    xids: frozenset[int] = field(default_factory=fabric_xids)
    link: frozenset[int] = field(default_factory=link_xids)
    """Fabric XIDs of a link going down: a tray's links lost, the rest of the fabric carries on."""
    trays: int = 9
    """NVSwitch trays of the rack (NVL72: 9); each GPU has links / trays links into each."""
    links: int = 18
    """NVLink links per GPU when the exporter does not say (NVLink5 on Blackwell: 18)."""


@dataclass(frozen=True, slots=True)
class Sighting:
    """New fabric XIDs of one node sample."""

    node: str
    at: datetime
    xids: tuple[tuple[int, int], ...]
    """(gpu index, XID)."""
    beyond_a_tray: bool = False
    """A GPU of the sample has more NVLink links down than one NVSwitch tray serves."""

    def domain(self, rules: RackRules) -> bool:
        """The sighting speaks of the whole domain: a domain XID, or more than a tray's links."""
        return self.beyond_a_tray or any(x not in rules.link for _, x in self.xids)


@dataclass(frozen=True, slots=True)
class RackEvidence:
    """What the rack rule remembers about one rack."""

    sightings: tuple[Sighting, ...] = ()
    fault: RackHealth = RackHealth.HEALTHY
    """The fault this manager holds the rack at: its verdict, or the controller's view."""
    at_fault_since: datetime | None = None
    """When this manager judged the rack at `fault`, or first saw the controller hold it so."""
    known: RackHealth = RackHealth.HEALTHY
    """The controller's view of the rack at the last sample of one of its nodes."""

    @property
    def at_fault(self) -> bool:
        """The rack is degraded or failed for this manager (step 4 of the module docstring)."""
        return self.fault is not RackHealth.HEALTHY


def _tray_share(g: GpuSample, rules: RackRules) -> int:
    """How many of the GPU's links go into one NVSwitch tray."""
    links = (g.nvlink_down or 0) + g.nvlink_up if g.nvlink_up is not None else rules.links
    return max(1, links // rules.trays)


def beyond_a_tray(gpus: tuple[GpuSample, ...], rules: RackRules) -> bool:
    """A GPU reports more NVLink links down than one NVSwitch tray serves."""
    return any(g.nvlink_down and g.nvlink_down > _tray_share(g, rules) for g in gpus)


def tray_links_off(gpus: tuple[GpuSample, ...], rules: RackRules) -> tuple[GpuSample, ...]:
    """The GPUs with one tray's links no longer counted down: a degraded rack's lost tray is
    the rack's fault, not each node's."""
    out = []
    for g in gpus:
        if g.nvlink_down:
            share = _tray_share(g, rules)
            g = g.model_copy(update={"nvlink_down": max(0, g.nvlink_down - share)})
        out.append(g)
    return tuple(out)


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
        The new evidence, and a verdict when this sample makes the rack degraded or failed
        (worse than the fault already held).
    """
    at = sighting.at
    # 1. The controller's view.
    if known is not evidence.known:
        if RANK[known] < RANK[evidence.known]:  # repaired, in whole or in part: start over
            evidence = _holding(known, at)
        else:  # this manager's verdict taken, or an operator's report
            fault = known if RANK[known] > RANK[evidence.fault] else evidence.fault
            since = evidence.at_fault_since if fault is evidence.fault else at
            evidence = replace(evidence, known=known, fault=fault, at_fault_since=since)
    elif (
        evidence.fault is not known
        and evidence.at_fault_since is not None
        and at - evidence.at_fault_since > rules.window
    ):
        evidence = _holding(known, at)  # the controller never took the verdict
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
    if not sighting.xids:
        return evidence, None
    level = _level(kept, rules)
    if RANK[level] <= RANK[evidence.fault]:
        return evidence, None
    evidence = replace(evidence, fault=level, at_fault_since=at)
    return evidence, RackVerdict(rack, level, _cause(rack, kept, table, rules, level))


def _holding(known: RackHealth, at: datetime) -> RackEvidence:
    """Fresh evidence of a rack the controller holds at `known`."""
    since = None if known is RackHealth.HEALTHY else at
    return RackEvidence(fault=known, at_fault_since=since, known=known)


def _level(sightings: tuple[Sighting, ...], rules: RackRules) -> RackHealth:
    """What the sightings within the window say of the rack (step 3)."""
    if len({s.node for s in sightings}) < rules.nodes:
        return RackHealth.HEALTHY
    if len({s.node for s in sightings if s.domain(rules)}) >= rules.nodes:
        return RackHealth.FAILED
    return RackHealth.DEGRADED


def _cause(
    rack: str,
    sightings: tuple[Sighting, ...],
    table: XidTable,
    rules: RackRules,
    level: RackHealth,
) -> str:
    def links(s: Sighting) -> str:
        return " (links down beyond one tray)" if s.beyond_a_tray else ""

    seen = "; ".join(
        f"{s.node} GPU {','.join(str(g) for g in dict.fromkeys(g for g, _ in s.xids))}: XID "
        + ", ".join(f"{x} {table.policy(x).name}" for x in dict.fromkeys(x for _, x in s.xids))
        + links(s)
        for s in sightings
    )
    what = (
        "the whole NVLink domain (domain XIDs or links beyond one tray on "
        f"{rules.nodes}+ nodes): failed"
        if level is RackHealth.FAILED
        else "one NVSwitch tray (link-down XIDs only): degraded, at about 8/9 NVLink bandwidth"
    )
    head = (
        f"NVLink fabric XIDs on {len({s.node for s in sightings})} nodes of rack {rack} within "
        f"{rules.window} (rack rule: {rules.nodes} nodes): the NVSwitch trays they share; {what}"
    )
    cause = f"{head}; {seen}"
    if len(cause) > MAX_CAUSE:
        cause = f"{cause[: MAX_CAUSE - 40]}... ({len(sightings)} nodes in all)"
    return cause


def fabric_off(rules: RackRules, fault: RackHealth) -> dict[int, XidAction]:
    """Overrides that make the fabric XIDs of the rack's fault weigh nothing on its nodes:
    every fabric XID while it is failed, the link XIDs while it is degraded."""
    xids = rules.xids if fault is RackHealth.FAILED else rules.xids & rules.link
    return dict.fromkeys(xids, XidAction.NONE)
