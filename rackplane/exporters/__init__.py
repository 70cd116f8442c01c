"""Node exporters: NVML (on the node), DCGM scrape, nvidia-smi captures -> `NodeTelemetry`.

Adapters: they read, convert units and publish; the GPU Manager (`policies.gpu_health`) judges.
"""

from rackplane.exporters._units import UNITS, describe
from rackplane.exporters.dcgm import Conversion, convert
from rackplane.exporters.nvml import NvmlSampler
from rackplane.exporters.nvsmi import from_csv, from_xml
from rackplane.exporters.publish import parse_interval, publish

__all__ = [
    "UNITS",
    "Conversion",
    "NvmlSampler",
    "convert",
    "describe",
    "from_csv",
    "from_xml",
    "parse_interval",
    "publish",
]
