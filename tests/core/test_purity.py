"""The pure core never imports adapters (faust, textual, aiokafka, duckdb) nor reads the clock.

Two checks: a static one over the source (imports and calls), and a dynamic one that imports the
core in a fresh interpreter and looks at what got loaded.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rackplane

ROOT = Path(rackplane.__file__).parent
CORE = [
    "models",
    "projections",
    "policies",
    "sim",
    "engine.py",
    "timeline.py",
    "kube/__init__.py",
    "kube/objects.py",
    "kube/gangs.py",
    "kube/plan.py",
    "slurm/__init__.py",
    "slurm/objects.py",
    "slurm/plan.py",
]
"""The pure parts: the Kubernetes and Slurm adapters' rules too (their shells are
`kube/adapter.py`, `slurm/adapter.py` and `slurm/_commands.py`)."""
ADAPTERS = {
    "faust",
    "textual",
    "aiokafka",
    "duckdb",
    "mode",
    "kafka",
    "kubernetes_asyncio",
    "kubernetes",
    "aiohttp",
}
IMPURE_MODULES = {"time", "uuid", "secrets", "socket", "asyncio", "subprocess", "os"}
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "uuid1", "uuid4"}
RANDOM_ALLOWED = {"Random"}  # random.Random(seed) is fine: the seed is passed in


def impurities(source: str, filename: str = "<src>") -> list[str]:
    """What in `source` breaks the core's rules, one line each."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            for name in names:
                top = name.split(".")[0]
                if top in ADAPTERS or top in IMPURE_MODULES:
                    found.append(f"{filename}:{node.lineno}: imports {name}")
            if isinstance(node, ast.ImportFrom) and node.module == "random":
                for a in node.names:
                    if a.name not in RANDOM_ALLOWED:
                        found.append(f"{filename}:{node.lineno}: imports random.{a.name}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if node.func.attr in CLOCK_CALLS and isinstance(owner, ast.Name | ast.Attribute):
                found.append(f"{filename}:{node.lineno}: calls .{node.func.attr}()")
            if (
                isinstance(owner, ast.Name)
                and owner.id == "random"
                and node.func.attr not in RANDOM_ALLOWED
            ):
                found.append(f"{filename}:{node.lineno}: calls random.{node.func.attr}() unseeded")
    return found


def core_files() -> list[Path]:
    files: list[Path] = []
    for part in CORE:
        path = ROOT / part
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def test_the_core_has_files_to_check() -> None:
    assert len(core_files()) >= 10


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_core_module_imports_no_adapter_and_reads_no_clock(path: Path) -> None:
    assert impurities(path.read_text(), str(path.relative_to(ROOT))) == []


@pytest.mark.parametrize(
    "source",
    [
        "import faust",
        "from duckdb import connect",
        "import textual.app",
        "from aiokafka import AIOKafkaProducer",
        "from datetime import datetime\nx = datetime.now()",
        "import datetime\nx = datetime.datetime.utcnow()",
        "import uuid",
        "import random\nx = random.random()",
        "from random import choice",
        "import time",
    ],
    ids=lambda s: s.splitlines()[-1],
)
def test_the_checker_catches_what_it_forbids(source: str) -> None:
    assert impurities(source) != []


def test_a_seeded_random_generator_is_allowed() -> None:
    assert impurities("import random\nrng = random.Random(42)\nx = rng.random()") == []


def test_importing_the_core_loads_no_adapter() -> None:
    code = (
        "import sys, rackplane.models, rackplane.projections, rackplane.policies, "
        "rackplane.sim, rackplane.engine, rackplane.kube, rackplane.slurm.plan\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(ADAPTERS)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
