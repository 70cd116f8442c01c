"""`verify(reader)`: walk each table's hash chain and name the first row that breaks it.

Algorithm overview, per table, rows in `row_id` order, `expected` = the previous row's hash
(GENESIS before the first row):
1. A row chained to an earlier row than the one before it, or a broken row after which a
   later row resumes the chain from `expected`, marks *inserted* rows: the rows between the
   row chained to and the row that resumes.
2. Else a row whose `prev_hash` is not `expected` follows *deleted* rows: the row it was
   chained to is gone.
3. Else a row whose payload does not hash to its `hash`, or whose typed columns differ from
   its payload, was *edited*.
4. After the last row: if the writer's recorded head (`chain_heads`) is a later row, rows
   were deleted at the end.
The chain has no secret: it detects tampering by anyone who does not recompute every later
hash (and the head), which is the audit trail's promise, not a signature.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rackplane.history._rows import GENESIS, chain
from rackplane.history._schema import TABLES
from rackplane.history.reader import HistoryReader

Problem = Literal["edited", "inserted", "deleted"]


@dataclass(frozen=True, slots=True)
class ChainReport:
    """One table's verdict: `problem` is None when the chain holds."""

    table: str
    rows: int
    problem: Problem | None = None
    row_id: int | None = None
    row: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.problem is None


def verify(reader: HistoryReader) -> list[ChainReport]:
    """Check every table; one report per table."""
    return [check_chain(t, reader.chain_rows(t), reader.chain_head(t)) for t in TABLES]


def check_chain(
    table: str, rows: Sequence[Sequence[Any]], head: tuple[int, str] | None
) -> ChainReport:
    """Check one table's rows: (row_id, label, prev_hash, hash, payload, typed_ok)."""
    expected = GENESIS
    seen: dict[str, int] = {GENESIS: -1}
    for i, row in enumerate(rows):
        row_id, label, prev, stored_hash = row[0], row[1], row[2], row[3]
        intact = chain(prev, row[4]) == stored_hash and row[5]
        if intact and prev == expected:
            expected = stored_hash
            seen[stored_hash] = i
            continue
        if prev in seen and seen[prev] < i - 1:  # chained to an earlier row: the rows between
            first = rows[seen[prev] + 1]  # were inserted (with hashes recomputed)
            return ChainReport(
                table, len(rows), "inserted", first[0], first[1],
                f"{i - seen[prev] - 1} row(s) from here on are not on the chain; "
                f"row_id {row_id} continues it",
            )  # fmt: skip
        resumes = next((j for j in range(i + 1, len(rows)) if rows[j][2] == expected), None)
        if resumes is not None and (not intact or prev != expected):
            return ChainReport(
                table, len(rows), "inserted", row_id, label,
                f"{resumes - i} row(s) from here on are not on the chain; "
                f"row_id {rows[resumes][0]} continues it",
            )  # fmt: skip
        if prev != expected:
            return ChainReport(
                table, len(rows), "deleted", row_id, label,
                "the row this one was chained to is missing: row(s) before it were deleted"
                + ("" if intact else " (and this row was changed)"),
            )  # fmt: skip
        return ChainReport(
            table, len(rows), "edited", row_id, label,
            "its payload no longer matches its hash"
            if chain(prev, row[4]) != stored_hash
            else "its typed columns no longer match its hashed payload",
        )  # fmt: skip
    if head is not None and rows and (head[1] != expected or head[0] != rows[-1][0]):
        last = rows[-1]
        return ChainReport(
            table, len(rows), "deleted", last[0], last[1],
            f"the writer's last row was row_id {head[0]}: rows after this one were deleted",
        )  # fmt: skip
    if head is not None and not rows:
        return ChainReport(table, 0, "deleted", None, "", "every row was deleted")
    return ChainReport(table, len(rows))
