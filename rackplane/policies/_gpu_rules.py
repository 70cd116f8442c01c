"""Per-GPU condition rules of the GPU Manager: one sample's readings -> findings. Pure.

Rules of this file (a reading the GPU does not support is None and never fires a rule):

| rule | reading | health |
|---|---|---|
| fallen_off_bus | `fallen_off_bus` | failed |
| uncorrectable_ecc | volatile `ecc_uncorrected` > 0 (aggregate counts are history) | failed |
| row_remap_failure | `remap_failure` | failed |
| row_remap_pending | `remap_pending` (needs a GPU reset to take effect) | degraded |
| retired_pages_pending | `retired_pages_pending` | degraded |
| hw_thermal_slowdown | clock-event bit 0x40 | degraded |
| hw_power_brake | clock-event bit 0x80 | degraded |
| hw_slowdown | clock-event bit 0x8 | degraded |
| nvlink_down | `nvlink_down` > 0 | degraded |
| hot | `temperature_c` >= `hot_c` | degraded |

The SW power cap (bit 0x4) and SW thermal slowdown (0x20) are not findings: a GPU at full load
sits at its power limit, and the driver lowering clocks to stay under it is normal operation.
"""

from __future__ import annotations

from rackplane.models import GpuSample, Health

SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
_HW_BITS = HW_SLOWDOWN | HW_THERMAL | HW_POWER_BRAKE

Finding = tuple[Health, str, str]
"""(health, rule, evidence)."""


def gpu_findings(g: GpuSample, hot_c: float) -> list[Finding]:
    """Every rule the GPU's readings fire (see the table above); [] when healthy."""
    out: list[Finding] = []
    i = g.index
    if g.fallen_off_bus:
        out.append((Health.FAILED, "fallen_off_bus", f"GPU {i} fell off the bus"))
    if g.ecc_uncorrected:
        out.append(
            (Health.FAILED, "uncorrectable_ecc", f"GPU {i}: {g.ecc_uncorrected} uncorrectable ECC")
        )
    if g.remap_failure:
        out.append((Health.FAILED, "row_remap_failure", f"GPU {i}: row remapping failed"))
    if g.remap_pending:
        out.append((Health.DEGRADED, "row_remap_pending", f"GPU {i}: row remap pending a reset"))
    if g.retired_pages_pending:
        out.append((Health.DEGRADED, "retired_pages_pending", f"GPU {i}: page retirement pending"))
    reasons = g.clock_event_reasons
    if reasons is not None and reasons & _HW_BITS:
        if reasons & HW_THERMAL:
            out.append((Health.DEGRADED, "hw_thermal_slowdown", f"GPU {i}: HW thermal slowdown"))
        if reasons & HW_POWER_BRAKE:
            out.append((Health.DEGRADED, "hw_power_brake", f"GPU {i}: HW power brake slowdown"))
        if reasons & HW_SLOWDOWN:
            out.append((Health.DEGRADED, "hw_slowdown", f"GPU {i}: HW slowdown"))
    if g.nvlink_down:
        out.append((Health.DEGRADED, "nvlink_down", f"GPU {i}: {g.nvlink_down} NVLink links down"))
    if g.temperature_c is not None and g.temperature_c >= hot_c:
        out.append((Health.DEGRADED, "hot", f"GPU {i} at {g.temperature_c:.0f} C"))
    return out


def quiet(g: GpuSample, hot_c: float) -> bool:
    """No rule of the table fires and no XID is reported: `gpu_findings(g, hot_c)` is [] and
    `new_xids(g, last)` is () whatever `last` is. One expression, for the fold's shortcut."""
    reasons = g.clock_event_reasons
    temperature = g.temperature_c
    return not (
        g.fallen_off_bus
        or g.ecc_uncorrected
        or g.remap_failure
        or g.remap_pending
        or g.retired_pages_pending
        or g.nvlink_down
        or g.xid
        or g.xids
        or (reasons is not None and reasons & _HW_BITS)
        or (temperature is not None and temperature >= hot_c)
    )


def new_xids(g: GpuSample, last: int | None) -> tuple[int, ...]:
    """XIDs this sample reports for the first time.

    With event-set XIDs (`xids`, NVML) every listed XID is new. Otherwise `xid` is DCGM's last
    XID, which never clears: it is new when it differs from the last one seen (0 means none).
    """
    if g.xids is not None:
        return g.xids
    if g.xid and g.xid != last:
        return (g.xid,)
    return ()
