"""The XID policy table: what each NVIDIA XID error asks for, and how bad it is for the node.

Theory of operation. Two NVIDIA sources ship with the package (`policies/data/`, provenance in
`SOURCES.md` there): the XID catalog (name, cause category, severity, NVIDIA's recommended
immediate action) and NVSentinel's mapping (action, FATAL/NONFATAL). Each source's action
words are mapped onto five `XidAction`s (`_ACTIONS`), then one action is chosen per XID:

1. an XID in `DISPUTED` takes the documented default there (the sources disagree on it);
2. otherwise NVIDIA's catalog action, when it maps to one;
3. otherwise NVSentinel's action, when it maps to one;
4. otherwise by severity: FATAL -> `reset_gpu`, NONFATAL -> `none`.

An XID missing from both sources is unknown: `reset_gpu` (fatal), so that a new error code is
looked at rather than ignored. Operators override any code per cluster with
`policy.xid_actions` in the cluster file (`PolicySettings.xid_actions`).

NVLink-fabric XIDs (`fabric_xids`): NVIDIA's decode sheet of the NVLink5 XIDs 144-150
(`xid_144_150_nvlink5_decode.csv`) lists each XID's sub-codes with their resolution and their
effect on the local and the remote end of the link. An XID is a fabric XID when one of its
sub-codes asks for a GPU reset and reaches the remote end (packet loss across the link): 144
(SAW), 145 (RLW), 146 (TLW) and 149 (NETIR, link down; "investigate the peer device"). 147
and 148 are only ever ignored, and 150 (MSE watchdog) is the GPU's own firmware with no
remote effect. Of those, `link_xids` are the ones whose reset sub-codes are "Link Fatal": a
link down, the peer (the NVSwitch port) to investigate: 149. The others (144-146) are fatal
errors of the GPU's NVLink units with packet loss across the fabric. The telemetry carries no
sub-code (NVML and DCGM give the XID alone), so the GPU Manager's rack rule works at XID level:
link XIDs on two nodes degrade the rack (one NVSwitch tray), the others fail it.

How an action weighs on the node (`HEALTH_OF`): `none` and `restart_app` leave it healthy (the
application faulted, the GPU is fine); `reset_gpu`, `reboot_node` and `drain_and_replace` take
it out of service (failed): its work moves to a spare, and it returns through `RepairNode`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

from rackplane.models import Health, XidAction

# Source action words -> action. Words not listed (WORKFLOW_XID_45, XID_154: "follow the other
# XID of the incident") map to `none`; an empty cell falls through to the next source.
_ACTIONS: Mapping[str, XidAction] = MappingProxyType(
    {
        "IGNORE": XidAction.NONE,
        "WORKFLOW_XID_45": XidAction.NONE,
        "XID_154": XidAction.NONE,
        "Follow guidance as it aapplies to another Xid": XidAction.NONE,
        "RESTART_APP": XidAction.RESTART_APP,
        "CHECK_UVM": XidAction.RESTART_APP,
        "RESET_GPU": XidAction.RESET_GPU,
        "WORKFLOW_XID_48": XidAction.RESET_GPU,
        "WORKFLOW_NVLINK_ERR": XidAction.RESET_GPU,
        # XIDs 144-150: the sub-code decides between ignore and reset; without it, reset.
        "WORKFLOW_NVLINK5_ERR": XidAction.RESET_GPU,
        "RESTART_BM": XidAction.REBOOT_NODE,
        "RESTART_VM": XidAction.REBOOT_NODE,
        "UPDATE_SWFW": XidAction.REBOOT_NODE,
        "CONTACT_SUPPORT": XidAction.DRAIN_AND_REPLACE,
        "UNEXPECTED_ERR_REPORT_ISSUE": XidAction.DRAIN_AND_REPLACE,
        "CHECK_MECHANICALS": XidAction.DRAIN_AND_REPLACE,
    }
)

DISPUTED: Mapping[int, tuple[XidAction, str]] = MappingProxyType(
    {
        94: (
            XidAction.RESTART_APP,
            "contained memory error: NVIDIA and NVSentinel say restart the app, DCGM warns, "
            "Meta treats it as critical; the error was contained to one application",
        ),
        63: (
            XidAction.NONE,
            "row-remap event: NVIDIA and NVSentinel say ignore, gpud says fatal; the remap "
            "itself is the repair, and the remap counters (pending, failure) are judged instead",
        ),
        160: (
            XidAction.REBOOT_NODE,
            "channel retirement: NVIDIA's catalog says ignore, NVSentinel says reboot (FATAL); "
            "NVSentinel's operational mapping is the safer default",
        ),
    }
)

HEALTH_OF: Mapping[XidAction, Health] = MappingProxyType(
    {
        XidAction.NONE: Health.HEALTHY,
        XidAction.RESTART_APP: Health.HEALTHY,
        XidAction.RESET_GPU: Health.FAILED,
        XidAction.REBOOT_NODE: Health.FAILED,
        XidAction.DRAIN_AND_REPLACE: Health.FAILED,
    }
)

_RANK = {a: i for i, a in enumerate(XidAction)}


def worse(a: XidAction, b: XidAction) -> XidAction:
    """The more severe of two actions."""
    return a if _RANK[a] >= _RANK[b] else b


@dataclass(frozen=True, slots=True)
class XidPolicy:
    """One XID's row of the table."""

    code: int
    name: str
    severity: str
    """FATAL or NONFATAL (NVSentinel's), or UNKNOWN."""
    action: XidAction
    source: str
    """Where the action comes from: nvidia, nvsentinel, severity, disputed, operator, unknown."""

    @property
    def health(self) -> Health:
        """What this XID makes of the node."""
        return HEALTH_OF[self.action]


class XidTable:
    """XID code -> policy; built once, read-only; `with_overrides` makes a new table."""

    def __init__(self, rows: Mapping[int, XidPolicy]) -> None:
        self._rows = dict(rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, code: object) -> bool:
        return code in self._rows

    def codes(self) -> list[int]:
        """Every code the table knows, ascending."""
        return sorted(self._rows)

    def policy(self, code: int) -> XidPolicy:
        """The row for `code`; an unknown code is treated as fatal (`reset_gpu`)."""
        row = self._rows.get(code)
        if row is None:
            return XidPolicy(code, "unknown XID", "UNKNOWN", XidAction.RESET_GPU, "unknown")
        return row

    def with_overrides(self, overrides: Mapping[int, XidAction]) -> XidTable:
        """A copy in which the operator's actions replace the defaults."""
        if not overrides:
            return self
        rows = dict(self._rows)
        for code, action in overrides.items():
            base = self.policy(code)
            rows[code] = XidPolicy(code, base.name, base.severity, action, "operator")
        return XidTable(rows)


def _read(name: str) -> list[list[str]]:
    text = resources.files("rackplane.policies").joinpath("data", name).read_text("utf-8")
    return list(csv.reader(io.StringIO(text)))


def build_table(catalog: list[list[str]], nvsentinel: list[list[str]]) -> XidTable:
    """The table from the two sources' rows (see the module docstring for the order).

    Args:
        catalog: rows of `xid_catalog.csv` (header first: xid,name,category,severity,action,...).
        nvsentinel: rows of NVSentinel's `xiderrorsmapping.csv` (no header:
            xid,name,action,severity).
    """
    nvs = {int(r[0]): r for r in nvsentinel if r and r[0].strip().isdigit()}
    rows: dict[int, XidPolicy] = {}
    for r in catalog[1:]:
        code, name, severity, nvidia_word = int(r[0]), r[1], r[3], r[4]
        nvs_row = nvs.get(code)
        nvs_word = nvs_row[2].strip() if nvs_row else ""
        severity = severity or (nvs_row[3].strip() if nvs_row else "") or "UNKNOWN"
        if code in DISPUTED:
            action, source = DISPUTED[code][0], "disputed"
        elif nvidia_word in _ACTIONS:
            action, source = _ACTIONS[nvidia_word], "nvidia"
        elif nvs_word in _ACTIONS:
            action, source = _ACTIONS[nvs_word], "nvsentinel"
        else:
            fatal = severity == "FATAL"
            action = XidAction.RESET_GPU if fatal else XidAction.NONE
            source = "severity"
        rows[code] = XidPolicy(code, name.split(":")[0].strip(), severity, action, source)
    return XidTable(rows)


@cache
def default_table() -> XidTable:
    """The table built from the packaged sources (read once)."""
    return build_table(_read("xid_catalog.csv"), _read("nvsentinel_xiderrorsmapping.csv"))


@cache
def fabric_xids() -> frozenset[int]:
    """XIDs that can be an error of the NVLink path, not of the GPU alone (module docstring)."""
    rows = _read("xid_144_150_nvlink5_decode.csv")
    col = {name: i for i, name in enumerate(rows[0])}
    out = set()
    for r in rows[1:]:
        remote = r[col["localremote"]].partition("Remote:")[2].strip().lower()
        if r[col["resolution"]] == "RESET_GPU" and remote and not remote.startswith("none"):
            out.add(int(r[col["xid"]]))
    return frozenset(out)


@cache
def link_xids() -> frozenset[int]:
    """Fabric XIDs of a link going down (module docstring): those with a reset sub-code of
    severity "Link Fatal" (149 NETIR: NETIR_LINK_DOWN, "investigate the peer device")."""
    rows = _read("xid_144_150_nvlink5_decode.csv")
    col = {name: i for i, name in enumerate(rows[0])}
    out = {
        int(r[col["xid"]])
        for r in rows[1:]
        if r[col["resolution"]] == "RESET_GPU" and r[col["severity"]].startswith("Link Fatal")
    }
    return frozenset(out) & fabric_xids()


def disagreements() -> dict[int, tuple[XidAction, XidAction]]:
    """XIDs whose NVIDIA and NVSentinel actions map to different actions: (nvidia, nvsentinel)."""
    nvs = {int(r[0]): r[2].strip() for r in _read("nvsentinel_xiderrorsmapping.csv") if r}
    out = {}
    for r in _read("xid_catalog.csv")[1:]:
        code = int(r[0])
        a, b = _ACTIONS.get(r[4]), _ACTIONS.get(nvs.get(code, ""))
        if a is not None and b is not None and a is not b:
            out[code] = (a, b)
    return out
