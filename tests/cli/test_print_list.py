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
