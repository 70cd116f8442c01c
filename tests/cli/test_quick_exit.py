"""How a client command's process ends (`rackplane.cli.leave`): its output and status whole,
without the interpreter's finalization.

A command's standard output is block-buffered when it is a file or a pipe, so a process that
ended without flushing would lose what the command printed: these run `rackplane` as a
process of its own, its output a file, and read what arrived. The same commands against a
live worker: tests/streams/test_cli.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rackplane.cli import _ONE_MODULE, _QUICK_EXIT

BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
"""The environment, with Python's standard output buffered as it is for an operator (a
`PYTHONUNBUFFERED` set around the tests would hide a missing flush)."""


def _run(tmp: Path, argv: list[str]) -> tuple[int, str, str]:
    """`argv` as a process, its standard output and error files: (status, out, err)."""
    out, err = tmp / "out", tmp / "err"
    with out.open("w") as o, err.open("w") as e:
        done = subprocess.run(argv, stdout=o, stderr=e, env=BUFFERED, timeout=60)
    return done.returncode, out.read_text(), err.read_text()


def _rackplane(tmp: Path, *argv: str) -> tuple[int, str, str]:
    return _run(tmp, [sys.executable, "-m", "rackplane", *argv])


@pytest.mark.parametrize("command", ["submit", "jobs", "rack-health"])
def test_a_quick_command_s_help_reaches_a_file_whole(tmp_path: Path, command: str) -> None:
    assert _ONE_MODULE[command] in _QUICK_EXIT
    code, out, err = _rackplane(tmp_path, command, "--help")
    assert (code, err) == (0, "")
    assert f"rackplane {command} [OPTIONS]" in out.splitlines()[1], out[:200]
    assert "--broker" in out and out.rstrip().endswith("╯"), out[-200:]  # the last box closed


def test_a_quick_command_s_usage_error_keeps_its_status_and_its_line(tmp_path: Path) -> None:
    code, out, err = _rackplane(tmp_path, "submit", "--nodes", "2")
    assert code == 2 and out == ""
    assert "Missing option '--cluster'" in err


@pytest.mark.parametrize(
    ("code", "want_status", "want_err"),
    [
        pytest.param("None", 0, "", id="None is 0"),
        pytest.param("3", 3, "", id="a number is the status"),
        pytest.param("'no such rack'", 1, "no such rack\n", id="a text is said and is 1"),
    ],
)
def test_leave_flushes_what_was_printed_and_ends_with_the_status(
    tmp_path: Path, code: str, want_status: int, want_err: str
) -> None:
    script = (
        "import logging, sys\n"
        "from rackplane.cli import leave\n"
        "logging.basicConfig(stream=sys.stderr, format='%(message)s')\n"
        "print('printed before leaving')\n"
        "logging.getLogger('t').warning('logged before leaving')\n"
        f"leave({code})\n"
        "print('never')\n"
    )
    status, out, err = _run(tmp_path, [sys.executable, "-c", script])
    assert status == want_status
    assert out == "printed before leaving\n"
    assert err == "logged before leaving\n" + want_err


def test_leave_with_its_reader_gone_is_status_120(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.close(read)  # nobody will read: the flush meets a broken pipe
    script = "from rackplane.cli import leave\nprint('lost')\nleave(0)\n"
    err = tmp_path / "err"
    with err.open("w") as e:
        done = subprocess.run(
            [sys.executable, "-c", script], stdout=write, stderr=e, env=BUFFERED, timeout=60
        )
    os.close(write)
    assert done.returncode == 120
    assert err.read_text() == ""
