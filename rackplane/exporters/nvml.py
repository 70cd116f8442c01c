"""The NVML exporter: every GPU of this node, read through nvidia-ml-py (`pynvml`).

An adapter: it reads, converts units and reports; it judges nothing. A reading the GPU or
driver does not support (`NVMLError_NotSupported`, a missing function, no permission, ...) is
recorded as None, never as 0. A GPU that answers `NVMLError_GPUIsLost` is `fallen_off_bus`.
XIDs come from an NVML event set (`nvmlEventTypeXidCriticalError`): `wait_events` blocks up to
the sampling interval collecting them, and the next sample carries them in `xids`.

The NVML module is injected (`nvml=`), so tests run the exporter against a fake that replays
real captures (tests/fixtures/h200); by default it is `pynvml`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from rackplane.exporters._clean import device_id, label
from rackplane.models import GpuSample, NodeTelemetry

T = TypeVar("T")

# clock-event reasons: nvmlClocksEventReason* (older drivers: nvmlClocksThrottleReason*)
_MAX_LINKS_FALLBACK = 18
_NVLINK_COUNTERS = (0, 1, 2, 3)  # DL replay, DL recovery, CRC flit, CRC data


class GpuLost(Exception):
    """The GPU stopped answering (NVMLError_GPUIsLost)."""


class NvmlSampler:
    """Reads every GPU of the node; `close()` shuts NVML down."""

    def __init__(self, cluster: str, node: str, *, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self.nvml: Any = nvml
        self.cluster = cluster
        self.node = node
        nvml.nvmlInit()
        self.handles = [
            nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
        ]
        self._uuids = {self._read(nvml.nvmlDeviceGetUUID, h): i for i, h in enumerate(self.handles)}
        self._pending: dict[int, list[int]] = {}
        self._events: Any = None
        try:
            self._events = nvml.nvmlEventSetCreate()
            for h in self.handles:
                nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, self._events)
        except nvml.NVMLError:
            self._events = None  # no event sets here: XIDs unsupported (xids stays None)

    def close(self) -> None:
        """Free the event set and shut NVML down."""
        if self._events is not None:
            self.nvml.nvmlEventSetFree(self._events)
        self.nvml.nvmlShutdown()

    # -- reading ---------------------------------------------------------------------------

    def _read(self, fn: Callable[..., T], *args: Any) -> T | None:
        """`fn(*args)`, None when unsupported; raises GpuLost when the GPU is gone."""
        nvml = self.nvml
        try:
            return fn(*args)
        except nvml.NVMLError as err:
            if getattr(err, "value", None) == nvml.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost(str(err)) from err
            return None

    def wait_events(self, seconds: float) -> None:
        """Block up to `seconds` collecting XID events (returns early after the first batch)."""
        if self._events is None:
            return
        nvml = self.nvml
        timeout = max(0, int(seconds * 1000))
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self._events, timeout)
            except nvml.NVMLError:
                return  # Timeout: nothing (more) happened
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                uuid = self._read(nvml.nvmlDeviceGetUUID, data.device)
                index = self._uuids.get(uuid, -1)
                self._pending.setdefault(index, []).append(int(data.eventData))
            timeout = 0  # drain what is queued, then return

    def sample(self, at: datetime) -> NodeTelemetry:
        """One reading of every GPU; the XIDs collected since the previous sample go with it."""
        pending, self._pending = self._pending, {}
        gpus = tuple(self._gpu(i, h, pending.get(i, [])) for i, h in enumerate(self.handles))
        return NodeTelemetry(cluster=self.cluster, node=self.node, at=at, gpus=gpus)

    def _gpu(self, index: int, h: Any, xids: list[int]) -> GpuSample:
        events = None if self._events is None else tuple(xids)
        try:
            return GpuSample(index=index, xids=events, **self._readings(h))
        except GpuLost:
            return GpuSample(
                index=index, uuid=device_id(self._safe(self.nvml.nvmlDeviceGetUUID, h)),
                fallen_off_bus=True, xids=events,
            )  # fmt: skip

    def _safe(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return self._read(fn, *args)
        except GpuLost:
            return None

    def _readings(self, h: Any) -> dict[str, Any]:
        n, r = self.nvml, self._read
        power = r(n.nvmlDeviceGetPowerUsage, h)
        limit = r(n.nvmlDeviceGetEnforcedPowerLimit, h)
        util = r(n.nvmlDeviceGetUtilizationRates, h)
        pci = r(n.nvmlDeviceGetPciInfo, h)
        reasons_fn = (
            getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or n.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        remap = r(n.nvmlDeviceGetRemappedRows, h)
        ecc = n.nvmlDeviceGetTotalEccErrors
        unc, cor = n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_MEMORY_ERROR_TYPE_CORRECTED
        vol, agg = n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC
        sbe = r(
            n.nvmlDeviceGetRetiredPages,
            h,
            n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        )
        dbe = r(n.nvmlDeviceGetRetiredPages, h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = r(n.nvmlDeviceGetRetiredPagesPendingStatus, h)
        up, down, errors = self._nvlink(h)
        return {
            "uuid": device_id(r(n.nvmlDeviceGetUUID, h)),
            "model": label(r(n.nvmlDeviceGetName, h)),
            "pci_bus_id": device_id(getattr(pci, "busId", None)) if pci is not None else None,
            "temperature_c": _num(r(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)),
            "power_w": None if power is None else power / 1000,
            "power_limit_w": None if limit is None else limit / 1000,
            "sm_clock_mhz": _num(r(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM)),
            "mem_clock_mhz": _num(r(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM)),
            "clock_event_reasons": r(reasons_fn, h),
            "gpu_util_pct": None if util is None else float(util.gpu),
            "mem_util_pct": None if util is None else float(util.memory),
            "ecc_uncorrected": r(ecc, h, unc, vol),
            "ecc_corrected": r(ecc, h, cor, vol),
            "ecc_uncorrected_aggregate": r(ecc, h, unc, agg),
            "ecc_corrected_aggregate": r(ecc, h, cor, agg),
            "remapped_rows_correctable": None if remap is None else int(remap[0]),
            "remapped_rows_uncorrectable": None if remap is None else int(remap[1]),
            "remap_pending": None if remap is None else bool(remap[2]),
            "remap_failure": None if remap is None else bool(remap[3]),
            "retired_pages_sbe": None if sbe is None else len(sbe),
            "retired_pages_dbe": None if dbe is None else len(dbe),
            "retired_pages_pending": None if pending is None else pending == n.NVML_FEATURE_ENABLED,
            "nvlink_up": up,
            "nvlink_down": down,
            "nvlink_errors": errors,
            "pcie_replay": r(n.nvmlDeviceGetPcieReplayCounter, h),
        }

    def _nvlink(self, h: Any) -> tuple[int | None, int | None, int | None]:
        """(links up, links down, error counters summed); None when no link answers."""
        n, r = self.nvml, self._read
        up = down = 0
        errors: int | None = None
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", _MAX_LINKS_FALLBACK)):
            state = r(n.nvmlDeviceGetNvLinkState, h, link)
            if state is None:
                continue
            if state == n.NVML_FEATURE_ENABLED:
                up += 1
            else:
                down += 1
            for counter in _NVLINK_COUNTERS:
                value = r(n.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
                if value is not None:
                    errors = (errors or 0) + int(value)
        if up == down == 0:
            return None, None, None
        return up, down, errors


def _num(value: Any) -> float | None:
    return None if value is None else float(value)
