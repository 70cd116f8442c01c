"""Telemetry: what node exporters publish, one sample per node per interval.

A field a GPU does not support is None (unsupported), never 0. Schemas grow by addition.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter

from rackplane.models._envelope import SCHEMA_VERSION
from rackplane.models._ids import ClusterId, NodeId


class GpuSample(BaseModel):
    """One GPU's readings in a node sample."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, le=63)
    uuid: str | None = None
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


class NodeTelemetry(BaseModel):
    """A node's sample: every GPU, at one instant."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = Field(default=SCHEMA_VERSION, ge=1)
    cluster: ClusterId
    node: NodeId
    at: AwareDatetime
    gpus: Annotated[tuple[GpuSample, ...], Field(max_length=64)]


TELEMETRY: TypeAdapter[NodeTelemetry] = TypeAdapter(NodeTelemetry)
"""Built once: the only way bytes become telemetry."""
