"""Telemetry: what node exporters publish, one sample per node per interval.

A field a GPU does not support is None (unsupported), never 0. Schemas grow by addition.
"""

from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, NonNegativeInt, TypeAdapter

from rackplane.models._envelope import SCHEMA_VERSION
from rackplane.models._ids import ClusterId, DeviceId, NodeId
from rackplane.models._text import Label


class GpuSample(BaseModel):
    """One GPU's readings in a node sample."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    index: int = Field(ge=0, le=63)
    uuid: DeviceId | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    xid: int | None = Field(default=None, ge=0)
    """The last XID error reported (None: none since the exporter started)."""
    ecc_uncorrected: int | None = Field(default=None, ge=0)
    """Volatile uncorrectable (double-bit) ECC errors."""
    nvlink_down: int | None = Field(default=None, ge=0)
    """NVLink links reported down."""
    fallen_off_bus: bool = False
    """The GPU no longer answers on PCIe (XID 79 or an NVML `GPU_IS_LOST`)."""
    # Added by the exporters (all optional; None = unsupported or not read, never 0).
    model: Label | None = None
    pci_bus_id: DeviceId | None = None
    power_limit_w: float | None = None
    memory_temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    clock_event_reasons: int | None = Field(default=None, ge=0)
    """NVML clock-event (throttle) reason bits: 0x4 SW power cap, 0x8 HW slowdown, 0x20 SW
    thermal, 0x40 HW thermal, 0x80 HW power brake."""
    gpu_util_pct: float | None = Field(default=None, ge=0, le=100)
    mem_util_pct: float | None = Field(default=None, ge=0, le=100)
    ecc_corrected: int | None = Field(default=None, ge=0)
    """Volatile correctable (single-bit) ECC errors."""
    ecc_corrected_aggregate: int | None = Field(default=None, ge=0)
    ecc_uncorrected_aggregate: int | None = Field(default=None, ge=0)
    remapped_rows_correctable: int | None = Field(default=None, ge=0)
    remapped_rows_uncorrectable: int | None = Field(default=None, ge=0)
    remap_pending: bool | None = None
    """A row remap waits for the next GPU reset."""
    remap_failure: bool | None = None
    """A row could not be remapped (no spare rows left)."""
    retired_pages_sbe: int | None = Field(default=None, ge=0)
    retired_pages_dbe: int | None = Field(default=None, ge=0)
    retired_pages_pending: bool | None = None
    nvlink_up: int | None = Field(default=None, ge=0)
    """NVLink links reported up (None: the GPU has no NVLink or does not say)."""
    nvlink_errors: int | None = Field(default=None, ge=0)
    """NVLink CRC, replay and recovery error counters, summed."""
    pcie_replay: int | None = Field(default=None, ge=0)
    xids: tuple[NonNegativeInt, ...] | None = Field(default=None, max_length=256)
    """XID events seen since the previous sample (NVML event sets). None: not collected, in
    which case `xid` (the last XID, sticky, as DCGM reports it) is the only XID signal."""


class NodeTelemetry(BaseModel):
    """A node's sample: every GPU, at one instant."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    schema_version: int = Field(default=SCHEMA_VERSION, ge=1)
    cluster: ClusterId
    node: NodeId
    at: AwareDatetime
    gpus: Annotated[tuple[GpuSample, ...], Field(max_length=64)]


TELEMETRY: TypeAdapter[NodeTelemetry] = TypeAdapter(NodeTelemetry)
"""Built once: the only way bytes become telemetry."""
