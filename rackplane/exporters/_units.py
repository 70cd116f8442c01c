"""Units of the telemetry fields, and a sample described value by value (for `--once --json`)."""

from __future__ import annotations

from typing import Any

from rackplane.models import GpuSample, NodeTelemetry

UNITS: dict[str, str] = {
    "temperature_c": "C",
    "memory_temperature_c": "C",
    "power_w": "W",
    "power_limit_w": "W",
    "sm_clock_mhz": "MHz",
    "mem_clock_mhz": "MHz",
    "clock_event_reasons": "bitmask",
    "gpu_util_pct": "%",
    "mem_util_pct": "%",
    "ecc_corrected": "errors",
    "ecc_uncorrected": "errors",
    "ecc_corrected_aggregate": "errors",
    "ecc_uncorrected_aggregate": "errors",
    "remapped_rows_correctable": "rows",
    "remapped_rows_uncorrectable": "rows",
    "remap_pending": "flag",
    "remap_failure": "flag",
    "retired_pages_sbe": "pages",
    "retired_pages_dbe": "pages",
    "retired_pages_pending": "flag",
    "nvlink_up": "links",
    "nvlink_down": "links",
    "nvlink_errors": "errors",
    "pcie_replay": "replays",
    "xid": "XID (last)",
    "xids": "XIDs (since last sample)",
    "fallen_off_bus": "flag",
}


def describe_gpu(sample: NodeTelemetry, g: GpuSample) -> dict[str, Any]:
    """One GPU: node, index, UUID, model, then every value with its unit (None: unsupported)."""
    values = {name: {"value": getattr(g, name), "unit": unit} for name, unit in UNITS.items()}
    return {
        "cluster": sample.cluster,
        "node": sample.node,
        "at": sample.at.isoformat(),
        "gpu": g.index,
        "uuid": g.uuid,
        "model": g.model,
        "pci_bus_id": g.pci_bus_id,
        "values": values,
    }


def describe(samples: list[NodeTelemetry]) -> list[dict[str, Any]]:
    """Every GPU of every sample, described (see `describe_gpu`)."""
    return [describe_gpu(s, g) for s in samples for g in s.gpus]
