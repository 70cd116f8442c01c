"""`scripts/kafka/kafka_server.py` (a stdlib script, not a package) loaded as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kafka" / "kafka_server.py"


def kafka_server() -> ModuleType:
    """The script's module (`KafkaServer`, `fetch_jars`, ...), loaded once."""
    name = "rackplane_kafka_server"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, SCRIPT)
        assert spec is not None and spec.loader is not None, SCRIPT
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module
