"""nvidia-smi captures -> telemetry: `nvidia-smi -q -x` (XML) and `--query-gpu ... --format=csv`.

An adapter for captures (and for nodes where only nvidia-smi is at hand): it converts units and
judges nothing. "N/A" and "[N/A]" (unsupported) become None, never 0. XIDs are not in these
outputs (they are in the kernel log), so `xid` and `xids` stay None.
"""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any

from rackplane.exporters._clean import device_id, label
from rackplane.models import GpuSample, NodeTelemetry

# nvidia-smi's clock-event reason names -> NVML bits.
REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}


def _number(text: str | None) -> float | None:
    """'129.66 W' -> 129.66; 'N/A', '[N/A]', '' or None -> None."""
    if text is None:
        return None
    value = text.strip().split(" ")[0]
    if not value or "N/A" in value or value.startswith("["):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    n = _number(text)
    return None if n is None else int(n)


def _flag(text: str | None) -> bool | None:
    t = (text or "").strip().lower()
    return {"yes": True, "no": False, "active": True, "not active": False}.get(t)


def from_xml(text: str, *, cluster: str, node: str, at: datetime) -> NodeTelemetry:
    """One `nvidia-smi -q -x` snapshot.

    Raises:
        ValueError: the text is not nvidia-smi's XML.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ValueError(f"not nvidia-smi XML: {err}") from err
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not nvidia-smi XML: the root is <{root.tag}>")
    gpus = tuple(_xml_gpu(i, g) for i, g in enumerate(root.findall("gpu")))
    return NodeTelemetry(cluster=cluster, node=node, at=at, gpus=gpus)


def _xml_gpu(index: int, g: ET.Element) -> GpuSample:
    def f(path: str) -> str | None:
        return g.findtext(path)

    reasons: int | None = None
    for name, bit in REASON_BITS.items():
        state = _flag(f(f"clocks_event_reasons/clocks_event_reason_{name}"))
        if state is not None:
            reasons = (reasons or 0) | (bit if state else 0)
    vol, agg = "ecc_errors/volatile/", "ecc_errors/aggregate/"
    readings: dict[str, Any] = {
        "uuid": device_id(f("uuid")),
        "model": label(f("product_name")),
        "pci_bus_id": device_id(f("pci/pci_bus_id")),
        "temperature_c": _number(f("temperature/gpu_temp")),
        "memory_temperature_c": _number(f("temperature/memory_temp")),
        "power_w": _number(f("gpu_power_readings/instant_power_draw"))
        or _number(f("gpu_power_readings/power_draw")),
        "power_limit_w": _number(f("gpu_power_readings/current_power_limit")),
        "sm_clock_mhz": _number(f("clocks/sm_clock")),
        "mem_clock_mhz": _number(f("clocks/mem_clock")),
        "clock_event_reasons": reasons,
        "gpu_util_pct": _number(f("utilization/gpu_util")),
        "mem_util_pct": _number(f("utilization/memory_util")),
        "ecc_corrected": _int(f(vol + "dram_correctable")),
        "ecc_uncorrected": _int(f(vol + "dram_uncorrectable")),
        "ecc_corrected_aggregate": _int(f(agg + "dram_correctable")),
        "ecc_uncorrected_aggregate": _int(f(agg + "dram_uncorrectable")),
        "remapped_rows_correctable": _int(f("remapped_rows/remapped_row_corr")),
        "remapped_rows_uncorrectable": _int(f("remapped_rows/remapped_row_unc")),
        "remap_pending": _flag(f("remapped_rows/remapped_row_pending")),
        "remap_failure": _flag(f("remapped_rows/remapped_row_failure")),
        "retired_pages_pending": _flag(f("retired_pages/pending_retirement")),
        "pcie_replay": _int(f("pci/replay_counter")),
    }
    return GpuSample(index=index, **readings)


_CSV = {
    "temperature.gpu": ("temperature_c", _number),
    "temperature.memory": ("memory_temperature_c", _number),
    "power.draw [W]": ("power_w", _number),
    "enforced.power.limit [W]": ("power_limit_w", _number),
    "clocks.current.sm [MHz]": ("sm_clock_mhz", _number),
    "clocks.current.memory [MHz]": ("mem_clock_mhz", _number),
    "utilization.gpu [%]": ("gpu_util_pct", _number),
    "utilization.memory [%]": ("mem_util_pct", _number),
    "ecc.errors.corrected.volatile.total": ("ecc_corrected", _int),
    "ecc.errors.uncorrected.volatile.total": ("ecc_uncorrected", _int),
    "ecc.errors.corrected.aggregate.total": ("ecc_corrected_aggregate", _int),
    "ecc.errors.uncorrected.aggregate.total": ("ecc_uncorrected_aggregate", _int),
    "retired_pages.pending": ("retired_pages_pending", _flag),
    "remapped_rows.correctable": ("remapped_rows_correctable", _int),
    "remapped_rows.uncorrectable": ("remapped_rows_uncorrectable", _int),
    "remapped_rows.pending": ("remap_pending", _flag),
    "remapped_rows.failure": ("remap_failure", _flag),
}


def from_csv(text: str, *, cluster: str, node: str) -> list[NodeTelemetry]:
    """A `--query-gpu=... --format=csv` series: one sample per row (timestamps read as UTC).

    Raises:
        ValueError: a row cannot be read (the message names the line).
    """
    rows = list(csv.DictReader(io.StringIO(text), skipinitialspace=True))
    out = []
    for line, row in enumerate(rows, start=2):
        try:
            at = datetime.strptime(row["timestamp"], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
            readings: dict[str, Any] = {
                attr: parse(row.get(col)) for col, (attr, parse) in _CSV.items() if col in row
            }
            reasons = row.get("clocks_event_reasons.active")
            if reasons and reasons.startswith("0x"):
                readings["clock_event_reasons"] = int(reasons, 16)
            gpu = GpuSample(
                index=0, uuid=device_id(row.get("uuid")), model=label(row.get("name")),
                pci_bus_id=device_id(row.get("pci.bus_id")), **readings,
            )  # fmt: skip
        except (KeyError, ValueError) as err:
            raise ValueError(f"line {line}: {err}") from err
        out.append(NodeTelemetry(cluster=cluster, node=node, at=at, gpus=(gpu,)))
    return out
