"""Builders for GPU Manager tests: node samples one second apart from a fixed start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from rackplane.models import GpuSample, NodeTelemetry

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

# Field strategies for generated samples: None is "unsupported"; any number may come.
maybe_int = st.none() | st.integers(min_value=0, max_value=2**40)
maybe_bool = st.none() | st.booleans()
maybe_float = st.none() | st.floats(allow_nan=True, allow_infinity=True)


def gpu(index: int = 0, **readings: Any) -> GpuSample:
    """A healthy GPU at work unless `readings` say otherwise."""
    base: dict[str, Any] = {"temperature_c": 60.0, "power_w": 650.0, "ecc_uncorrected": 0}
    return GpuSample(index=index, **(base | readings))


def node(seconds: float, *gpus: GpuSample, name: str = "r01-n01") -> NodeTelemetry:
    """A sample of node `name` at T0 + `seconds` (four healthy GPUs when none are given)."""
    return NodeTelemetry(
        cluster="c1",
        node=name,
        at=T0 + timedelta(seconds=seconds),
        gpus=gpus or tuple(gpu(i) for i in range(4)),
    )


def sick(seconds: float, **readings: Any) -> NodeTelemetry:
    """Four GPUs, GPU 2 with `readings`."""
    return node(seconds, *(gpu(i, **(readings if i == 2 else {})) for i in range(4)))
