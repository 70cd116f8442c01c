"""What a refused command must print: one line on stderr, exit 2, no traceback."""

from __future__ import annotations


def one_error_line(result: object) -> str:
    """The one non-blank line of a `CliRunner` result's stderr, checking the exit code 2."""
    stderr: str = result.stderr  # type: ignore[attr-defined]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert "Traceback" not in stderr
    return lines[0]
