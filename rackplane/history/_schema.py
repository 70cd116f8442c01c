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

TABLES = ("events", "commands", "rejections")

# Compression, chosen by measurement (1M events of the ingest benchmark, docs/BENCHMARKS.md):
# the payload is JSON, which zstd packs to ~100 B per event, at less CPU than the default
# (dictionary + FSST: ~230 B); so are the ids that are mostly distinct (job, node, rack,
# causation id: ~0.4 us less per row for ~13 B more); the hashes are random hex, which
# DuckDB's own string compression halves at best, at ~1.8 us per row: stored as they are.
# (Files created before keep the compression they were created with.)
DDL = """
CREATE TABLE IF NOT EXISTS events (
    row_id BIGINT NOT NULL, cluster VARCHAR NOT NULL, seq BIGINT NOT NULL,
    type VARCHAR NOT NULL, "at" TIMESTAMPTZ NOT NULL, job VARCHAR USING COMPRESSION zstd,
    node VARCHAR USING COMPRESSION zstd, rack VARCHAR USING COMPRESSION zstd,
    actor VARCHAR NOT NULL, causation_id VARCHAR USING COMPRESSION zstd, correlation_id VARCHAR,
    payload VARCHAR USING COMPRESSION zstd NOT NULL,
    prev_hash VARCHAR USING COMPRESSION uncompressed NOT NULL,
    hash VARCHAR USING COMPRESSION uncompressed NOT NULL,
    PRIMARY KEY (cluster, seq)
);
CREATE TABLE IF NOT EXISTS commands (
    row_id BIGINT NOT NULL, id VARCHAR NOT NULL PRIMARY KEY, cluster VARCHAR NOT NULL,
    type VARCHAR NOT NULL, issued_at TIMESTAMPTZ, job VARCHAR USING COMPRESSION zstd,
    node VARCHAR USING COMPRESSION zstd, rack VARCHAR USING COMPRESSION zstd,
    actor VARCHAR NOT NULL, causation_id VARCHAR USING COMPRESSION zstd, correlation_id VARCHAR,
    payload VARCHAR USING COMPRESSION zstd NOT NULL,
    prev_hash VARCHAR USING COMPRESSION uncompressed NOT NULL,
    hash VARCHAR USING COMPRESSION uncompressed NOT NULL
);
CREATE TABLE IF NOT EXISTS rejections (
    row_id BIGINT NOT NULL, key VARCHAR NOT NULL PRIMARY KEY, source_topic VARCHAR NOT NULL,
    "partition" BIGINT, "offset" BIGINT, agent VARCHAR NOT NULL, "at" TIMESTAMPTZ NOT NULL,
    reason VARCHAR NOT NULL, payload VARCHAR USING COMPRESSION zstd NOT NULL,
    prev_hash VARCHAR USING COMPRESSION uncompressed NOT NULL,
    hash VARCHAR USING COMPRESSION uncompressed NOT NULL
);
CREATE TABLE IF NOT EXISTS chain_heads (
    tbl VARCHAR PRIMARY KEY, row_id BIGINT NOT NULL, hash VARCHAR NOT NULL
);
"""

# Typed columns are derived from the payload by DuckDB, in the insert itself: one JSON parse
# per row (the list form of json_extract_string), in C++, instead of a dozen Python objects
# converted per row. `verify` runs the same expressions to check the stored columns.
_PATHS: dict[str, tuple[str, ...]] = {
    "events": ("cluster", "seq", "type", "at", "job", "job.id", "node", "old_node", "rack",
               "to_rack", "actor", "causation_id", "correlation_id"),
    "commands": ("id", "cluster", "type", "issued_at", "job", "job.id", "node", "old_node",
                 "rack", "to_rack", "actor", "causation_id", "correlation_id"),
    "rejections": ("source_topic", "partition", "offset", "agent", "at", "reason"),
}  # fmt: skip
_SUBJECT = {
    "job": "coalesce(v[6], v[5])",
    "node": "coalesce(v[7], v[8])",
    "rack": "coalesce(v[9], v[10])",
    "actor": "v[11]",
    "causation_id": "v[12]",
    "correlation_id": "v[13]",
}
DERIVED: dict[str, dict[str, str]] = {
    "events": {"cluster": "v[1]", "seq": "CAST(v[2] AS BIGINT)", "type": "v[3]",
               '"at"': "CAST(v[4] AS TIMESTAMPTZ)", **_SUBJECT},
    "commands": {"id": "v[1]", "cluster": "v[2]", "type": "v[3]",
                 "issued_at": "CAST(v[4] AS TIMESTAMPTZ)", **_SUBJECT},
    "rejections": {"key": "substr(sha256(payload), 1, 32)", "source_topic": "v[1]",
                   '"partition"': "CAST(v[2] AS BIGINT)", '"offset"': "CAST(v[3] AS BIGINT)",
                   "agent": "v[4]", '"at"': "CAST(v[5] AS TIMESTAMPTZ)", "reason": "v[6]"},
}  # fmt: skip
"""Per table: each typed column as SQL over the payload (`v` is the list of its paths)."""


def _parsed(name: str, source: str, extra: str) -> str:
    paths = ", ".join(f"'$.{p}'" for p in _PATHS[name])
    return f"(SELECT *, json_extract_string(payload, [{paths}]) AS v{extra} FROM {source})"


TYPED_CHECK: dict[str, str] = {
    name: " AND ".join(f"{col} IS NOT DISTINCT FROM {expr}" for col, expr in cols.items())
    for name, cols in DERIVED.items()
}
"""Per table: SQL true when a row's typed columns agree with its hashed payload; it reads
`v`, so select it from `parsed(name)`."""


def parsed(name: str) -> str:
    """The table with `v`, the list of its payload paths, for `TYPED_CHECK`."""
    return _parsed(name, name, "")


def _insert_sql(name: str) -> str:
    cols = DERIVED[name]
    # The payloads arrive as bytes (BLOB): `decode` makes them text after checking the UTF-8.
    text = "(SELECT row_id, decode(payload) AS payload, prev_hash, hash FROM _batch)"
    return (
        f"INSERT INTO {name} (row_id, {', '.join(cols)}, payload, prev_hash, hash) "
        f"SELECT row_id, {', '.join(cols.values())}, payload, prev_hash, hash "
        f"FROM {_parsed(name, text, '')}"
    )


INSERT = {name: _insert_sql(name) for name in TABLES}


def insert(
    con: duckdb.DuckDBPyConnection,
    name: str,
    payloads: Sequence[bytes],
    first_row_id: int,
    prev: str,
    hashes: Sequence[str],
) -> None:
    """Insert rows given by their UTF-8 payloads, row ids and hashes (`prev` is the hash of the
    row before the first), in one statement: four columns travel as numpy arrays, never row by
    row (STACK_NOTES)."""
    prev_hashes = np.empty(len(hashes), dtype=object)
    prev_hashes[0] = prev
    prev_hashes[1:] = hashes[:-1]
    batch: dict[str, Any] = {
        "row_id": np.arange(first_row_id, first_row_id + len(payloads), dtype=np.int64),
        "payload": np.array(payloads, dtype=object),
        "prev_hash": prev_hashes,
        "hash": np.array(hashes, dtype=object),
    }
    con.register("_batch", batch)
    try:
        con.execute(INSERT[name])
    finally:
        con.unregister("_batch")
