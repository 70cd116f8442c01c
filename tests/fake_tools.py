"""Fake command-line tools (`java`, `mvn`) for the tests of what `rackplane up` and
`kafka_fetch` do without the real ones: a shell script in a directory a test puts first, or
alone, on PATH."""

from __future__ import annotations

from pathlib import Path


def fake_tool(bin_dir: Path, name: str, script: str) -> None:
    """Write `bin_dir/name`, an executable shell script running `script` (which sees only the
    test's PATH: name other programs by their full path)."""
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)
