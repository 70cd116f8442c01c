"""`print_list`: the read commands' long lists, a Rich table when short, plain when long."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from rackplane.cli import _render
from rackplane.cli._render import LONG_LIST, print_list

COLUMNS = ("job", "nodes", "why")


def _printed(monkeypatch: pytest.MonkeyPatch, rows: list[tuple[str, str, str]]) -> list[str]:
    out = Console(file=io.StringIO(), width=100)
    monkeypatch.setattr(_render, "console", out)
    print_list("Jobs of c1", COLUMNS, rows, right=("nodes",))
    text = out.file.getvalue()  # type: ignore[attr-defined]
    return [line.rstrip() for line in text.splitlines()]


def test_a_short_list_is_a_table_and_its_cells_are_text_not_markup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = _printed(monkeypatch, [("j1", "16", "capacity: [bold]no[/] rack")])
    assert lines[0] == "Jobs of c1"
    assert any("┃ job" in line for line in lines)  # Rich's header row
    assert any("capacity: [bold]no[/] rack" in line for line in lines)


def test_a_long_list_is_plain_columns_with_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [(f"j{n}", str(n), "[x]") for n in range(LONG_LIST + 1)]
    lines = _printed(monkeypatch, rows)
    want_width = len(f"j{LONG_LIST}")
    assert lines[:3] == [
        "Jobs of c1",
        "job".ljust(want_width) + "  nodes  why",
        "j0".ljust(want_width) + "      0  [x]",
    ]
    assert len(lines) == 2 + len(rows)
    assert lines[-1] == f"j{LONG_LIST}  {LONG_LIST:>5}  [x]"


def test_a_long_list_keeps_its_styles_and_its_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The racks list of a large cluster: plain columns, a failed node still in red."""
    from rich.text import Text

    rows = [
        (f"r{n:03}", Text("1", style="red") if n == 7 else "0", "") for n in range(LONG_LIST + 1)
    ]
    out = Console(file=io.StringIO(), width=100, color_system="truecolor", force_terminal=True)
    monkeypatch.setattr(_render, "console", out)
    print_list("Racks of c1", ("rack", "failed", "jobs"), rows, right=("failed",))
    text = out.file.getvalue()  # type: ignore[attr-defined]
    plain = Text.from_ansi(text).plain.splitlines()
    assert not [line for line in plain if line.endswith(" ")]  # the empty last cells too
    assert plain[:3] == ["Racks of c1", "rack  failed  jobs", "r000       0"]
    assert plain[9] == "r007       1" and len(plain) == 2 + len(rows)
    red = next(line for line in text.splitlines() if line.startswith("r007"))
    assert "\x1b[31m1\x1b[0m" in red  # the cell's own style, nothing else coloured
    assert "\x1b[" not in next(line for line in text.splitlines() if line.startswith("r006"))
