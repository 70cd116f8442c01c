"""A fake `pynvml` that replays a real NVML capture (tests/fixtures/h200/nvml_series.json).

The capture was taken with nvidia-ml-py on an H200 (see tests/fixtures/h200/SOURCES.md). Each
`step()` moves to the next reading of the series; a value captured as "ERR:NVMLError_X:..."
raises that NVML error, as the real binding did. `inject_xid` queues an XID event, and
`lose_gpu` makes every call on the device fail with GPU_IS_LOST.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

FIXTURE = Path(__file__).parent.parent / "fixtures" / "h200" / "nvml_series.json"
_ERRORS = {
    "NVMLError_NotSupported": pynvml.NVML_ERROR_NOT_SUPPORTED,
    "NVMLError_Timeout": pynvml.NVML_ERROR_TIMEOUT,
    "NVMLError_NoPermission": pynvml.NVML_ERROR_NO_PERMISSION,
    "NVMLError_GpuIsLost": pynvml.NVML_ERROR_GPU_IS_LOST,
}


class FakeNvml:
    """Replays one GPU's NVML series; constants and NVMLError come from the real binding."""

    NVMLError = pynvml.NVMLError

    def __init__(self, path: Path = FIXTURE) -> None:
        doc = json.loads(path.read_text())
        self.static: dict[str, Any] = doc["static"]
        self.series: list[dict[str, Any]] = doc["series"]
        self.i = 0
        self.events: list[tuple[int, int]] = []
        self.lost = False
        self.initialised = False

    def __getattr__(self, name: str) -> Any:  # constants: NVML_*, nvmlEventType*
        if name.startswith(("NVML_", "nvmlEventType")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    @property
    def row(self) -> dict[str, Any]:
        return self.series[self.i]

    def step(self) -> bool:
        """Move to the next reading; False at the end of the series."""
        if self.i + 1 >= len(self.series):
            return False
        self.i += 1
        return True

    def inject_xid(self, gpu: int, code: int) -> None:
        self.events.append((gpu, code))

    def lose_gpu(self) -> None:
        self.lost = True

    # -- the binding's functions ------------------------------------------------------------

    def _value(self, value: Any) -> Any:
        if self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if isinstance(value, str) and value.startswith("ERR:"):
            raise pynvml.NVMLError(_ERRORS[value.split(":")[1]])
        return value

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return int(self.static["count"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._value(self.row["uuid"])

    def nvmlDeviceGetName(self, h: int) -> str:
        return self._value(self.row["name"])

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._value(self.row["pci_bus_id"]).encode())

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._value(self.row["temp_gpu_c"])

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._value(self.row["power_mw"])

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._value(self.row["power_limit_mw"])

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        key = "sm_clock_mhz" if kind == pynvml.NVML_CLOCK_SM else "mem_clock_mhz"
        return self._value(self.row[key])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._value(self.row["clock_event_reasons"])

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        util = self._value(self.row["util"])
        return SimpleNamespace(gpu=util["gpu"], memory=util["mem"])

    def nvmlDeviceGetTotalEccErrors(self, h: int, error: int, counter: int) -> int:
        kind = "uncorrected" if error == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
        scope = "volatile" if counter == pynvml.NVML_VOLATILE_ECC else "aggregate"
        return self._value(self.row[f"ecc_{kind}_{scope}"])

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return tuple(self._value(self.row["remapped_rows"]))  # type: ignore[return-value]

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        # Captured: only the pending status (NotSupported on this H200, which remaps rows).
        return self._value(self.row["retired_pages_pending"])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return self._value(self.row["retired_pages_pending"])

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        links = self.row["nvlink"]
        if str(link) not in links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._value(links[str(link)]["state"])

    def nvmlDeviceGetNvLinkErrorCounter(self, h: int, link: int, counter: int) -> int:
        return self._value(
            self.row["nvlink"][str(link)].get("errors", "ERR:NVMLError_NotSupported:")
        )

    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int:
        return self._value(self.row.get("pcie_replay", "ERR:NVMLError_NotSupported:"))

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, types: int, event_set: str) -> None:
        if not types & self.static["supported_event_types"]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:
        if not self.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        gpu, code = self.events.pop(0)
        return SimpleNamespace(
            device=gpu, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=code
        )

    def nvmlEventSetFree(self, event_set: str) -> None:
        pass
