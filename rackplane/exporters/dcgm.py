"""The DCGM adapter: a dcgm-exporter scrape (Prometheus text) -> node telemetry.

An adapter: it parses with prometheus-client's text parser, maps DCGM fields onto the
telemetry fields (`FIELDS`, units converted), and judges nothing. Rules of the mapping:
- a sample is one GPU when it has a `gpu` label; the node is the `Hostname` label (renamed
  `hostname` by dcgm-exporter in 2026: both are read) unless the caller names the node;
- `DCGM_FI_DEV_XID_ERRORS` is the value of the last XID, not a count, and never clears: it
  goes to `xid` (0 means none); `xids` stays None (DCGM reports no events);
- a field the scrape does not carry stays None (unsupported), never 0; families without a
  `gpu` label (placeholders, totals) and families not in `FIELDS` are skipped and counted;
- a value that cannot be a reading (negative, NaN) is reported as a problem and skipped;
- text from labels is made valid (`_clean`): a model name is escaped and cut, a UUID or PCI
  bus id that is not an id is left out; a host that is not a node id is a problem, and its
  GPUs are skipped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from rackplane.exporters._clean import device_id, label
from rackplane.models import ID_RULE, GpuSample, NodeTelemetry, printable

_INT = int
FIELDS: dict[str, tuple[str, Any]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", float),
    "DCGM_FI_DEV_MEMORY_TEMP": ("memory_temperature_c", float),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", float),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", float),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", float),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", float),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_event_reasons", _INT),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", _INT),
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_pct", float),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", float),
    "DCGM_FI_DEV_XID_ERRORS": ("xid", _INT),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_uncorrected", _INT),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_corrected", _INT),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_uncorrected_aggregate", _INT),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_corrected_aggregate", _INT),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows_correctable", _INT),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_rows_uncorrectable", _INT),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("remap_pending", bool),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("remap_failure", bool),
    "DCGM_FI_DEV_RETIRED_SBE": ("retired_pages_sbe", _INT),
    "DCGM_FI_DEV_RETIRED_DBE": ("retired_pages_dbe", _INT),
    "DCGM_FI_DEV_RETIRED_PENDING": ("retired_pages_pending", bool),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay", _INT),
}
NVLINK_ERRORS = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)


@dataclass
class Conversion:
    """What a scrape became: samples by node, and what was left out, said plainly."""

    samples: list[NodeTelemetry] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    """Metric family -> samples skipped (not a GPU reading rackplane uses, or no `gpu` label)."""
    problems: list[str] = field(default_factory=list)


def convert(text: str, *, cluster: str, at: datetime, node: str | None = None) -> Conversion:
    """Parse one scrape and convert it (see the module docstring for the rules).

    Raises:
        ValueError: the text is not Prometheus exposition format.
    """
    out = Conversion()
    gpus: dict[tuple[str, int], dict[str, Any]] = defaultdict(dict)
    skipped: dict[str, int] = defaultdict(int)
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as err:  # the parser raises ValueError/TypeError/IndexError on bad text
        why = str(err) or 'expected lines such as DCGM_FI_DEV_GPU_TEMP{gpu="0"} 45'
        raise ValueError(f"not a Prometheus text exposition: {why}") from err
    for family in families:
        for s in family.samples:
            name = s.name.removesuffix("_total") if s.name not in FIELDS else s.name
            known = name in FIELDS or name in NVLINK_ERRORS
            labels = s.labels
            if not known or "gpu" not in labels:
                skipped[s.name] += 1
                continue
            host = node or labels.get("Hostname") or labels.get("hostname") or "unknown"
            try:
                index = int(labels["gpu"])
            except ValueError:
                out.problems.append(f"{s.name}: gpu label {labels['gpu']!r} is not an index")
                continue
            value = float(s.value)
            if math.isnan(value) or value < 0:
                out.problems.append(f"{s.name} of {host} GPU {index}: {value} is not a reading")
                continue
            g = gpus[(host, index)]
            g.setdefault("uuid", device_id(labels.get("UUID") or labels.get("uuid")))
            g.setdefault("model", label(labels.get("modelName")))
            g.setdefault("pci_bus_id", device_id(labels.get("pci_bus_id")))
            if name in NVLINK_ERRORS:
                g["nvlink_errors"] = g.get("nvlink_errors", 0) + int(value)
            else:
                attr, kind = FIELDS[name]
                g[attr] = kind(value)
    out.skipped = dict(skipped)
    by_node: dict[str, list[GpuSample]] = defaultdict(list)
    for (host, index), readings in sorted(gpus.items()):
        culprit = ID_RULE.culprit(host)
        if culprit is not None:
            out.problems.append(
                f"host {printable(host, 80)!r} of GPU {index} is not a node id ({culprit})"
            )
            continue
        try:
            by_node[host].append(GpuSample(index=index, **readings))
        except ValidationError as err:
            out.problems.append(f"{host} GPU {index}: {err.errors()[0]['msg']}")
    for host, samples in by_node.items():
        out.samples.append(NodeTelemetry(cluster=cluster, node=host, at=at, gpus=tuple(samples)))
    return out
