"""History: the DuckDB audit store, time travel, incident analysis, what-if, Parquet export.

An adapter package (it may use duckdb); the folding is the core's `evolve`. Public names:
`DuckDBAuditSink` (the writer), `open_history` / `HistoryReader` (read a DuckDB file or a
Parquet export), `state_at` (pure replay), `HistoryError` and `HistoryGap` (a cluster's
stored seqs are not 1..N: reads that fold refuse it).
"""

from rackplane.history.errors import HistoryError, HistoryGap
from rackplane.history.reader import HistoryReader, open_history
from rackplane.history.replay import state_at
from rackplane.history.sink import DEFAULT_DB, DuckDBAuditSink

__all__ = [
    "DEFAULT_DB",
    "DuckDBAuditSink",
    "HistoryError",
    "HistoryGap",
    "HistoryReader",
    "open_history",
    "state_at",
]
