"""The DuckDB tables of the history store and the one way rows get into them.

Every table has `row_id` (insertion order, the order of its hash chain), typed columns for
queries, the message's JSON `payload`, and `prev_hash`/`hash`. `chain_heads` keeps each
chain's last row, so a deletion at the end of a table is detected too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np

from rackplane.history._rows import COMMAND_COLUMNS, EVENT_COLUMNS, REJECTION_COLUMNS

TABLES = ("events", "commands", "rejections")

DDL = """
CREATE TABLE IF NOT EXISTS events (
    row_id BIGINT NOT NULL, cluster VARCHAR NOT NULL, seq BIGINT NOT NULL,
    type VARCHAR NOT NULL, "at" TIMESTAMPTZ NOT NULL, job VARCHAR, node VARCHAR,
    rack VARCHAR, actor VARCHAR NOT NULL, causation_id VARCHAR, correlation_id VARCHAR,
    payload VARCHAR NOT NULL, prev_hash VARCHAR NOT NULL, hash VARCHAR NOT NULL,
    PRIMARY KEY (cluster, seq)
);
CREATE TABLE IF NOT EXISTS commands (
    row_id BIGINT NOT NULL, id VARCHAR NOT NULL PRIMARY KEY, cluster VARCHAR NOT NULL,
    type VARCHAR NOT NULL, issued_at TIMESTAMPTZ, job VARCHAR, node VARCHAR, rack VARCHAR,
    actor VARCHAR NOT NULL, causation_id VARCHAR, correlation_id VARCHAR,
    payload VARCHAR NOT NULL, prev_hash VARCHAR NOT NULL, hash VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS rejections (
    row_id BIGINT NOT NULL, key VARCHAR NOT NULL PRIMARY KEY, source_topic VARCHAR NOT NULL,
    "partition" BIGINT, "offset" BIGINT, agent VARCHAR NOT NULL, "at" TIMESTAMPTZ NOT NULL,
    reason VARCHAR NOT NULL, payload VARCHAR NOT NULL, prev_hash VARCHAR NOT NULL,
    hash VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS chain_heads (
    tbl VARCHAR PRIMARY KEY, row_id BIGINT NOT NULL, hash VARCHAR NOT NULL
);
"""

COLUMNS: dict[str, tuple[str, ...]] = {
    "events": EVENT_COLUMNS,
    "commands": COMMAND_COLUMNS,
    "rejections": REJECTION_COLUMNS,
}
_TIMES = {"at_us": '"at"', "issued_at_us": "issued_at"}


def stored(name: str) -> str:
    """The SQL that reads back the content columns of a table, in the hashed order."""
    out = []
    for c in COLUMNS[name]:
        if c in _TIMES:
            out.append(f"epoch_us({_TIMES[c]}) AS {c}")
        else:
            out.append(f'"{c}"')
    return ", ".join(out)


def _insert_sql(name: str) -> str:
    cols = ["row_id"] + [_TIMES.get(c, f'"{c}"') for c in COLUMNS[name]] + ["prev_hash", "hash"]
    exprs = ["row_id"] + [
        f"make_timestamptz({c})" if c in _TIMES else f'"{c}"' for c in COLUMNS[name]
    ]
    return (
        f"INSERT INTO {name} ({', '.join(cols)}) "
        f"SELECT {', '.join(exprs)}, prev_hash, hash FROM _batch"
    )


INSERT = {name: _insert_sql(name) for name in TABLES}


def insert(
    con: duckdb.DuckDBPyConnection,
    name: str,
    rows: Sequence[Sequence[Any]],
    first_row_id: int,
    hashes: Sequence[tuple[str, str]],
) -> None:
    """Insert `rows` (content columns) with their row ids and (prev_hash, hash) in one
    statement: the columns travel as numpy arrays, never row by row (STACK_NOTES)."""
    columns = list(zip(*rows, strict=True))
    batch: dict[str, Any] = {
        "row_id": np.arange(first_row_id, first_row_id + len(rows), dtype=np.int64)
    }
    for c, values in zip(COLUMNS[name], columns, strict=True):
        batch[c] = np.array(values, dtype=object)
    batch["prev_hash"] = np.array([p for p, _ in hashes], dtype=object)
    batch["hash"] = np.array([h for _, h in hashes], dtype=object)
    con.register("_batch", batch)
    try:
        con.execute(INSERT[name])
    finally:
        con.unregister("_batch")
