"""History: the DuckDB audit store, time travel, incident analysis, what-if, Parquet export.

An adapter package (it may use duckdb); the folding is the core's `evolve`. Public names:
`DuckDBAuditSink` (the writer), `open_history` / `HistoryReader` (read a DuckDB file or a
Parquet export), `state_at` (pure replay), `HistoryError`.
"""

from rackplane.history.errors import HistoryError
from rackplane.history.reader import HistoryReader, open_history
from rackplane.history.replay import state_at
from rackplane.history.sink import DEFAULT_DB, DuckDBAuditSink

__all__ = [
    "DEFAULT_DB",
    "DuckDBAuditSink",
    "HistoryError",
    "HistoryReader",
    "open_history",
    "state_at",
]
