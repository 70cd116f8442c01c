"""The operator console (Textual): `rackplane tui`. An adapter: folds events, sends commands."""

from rackplane.tui.app import ConsoleApp
from rackplane.tui.sources import (
    HistorySource,
    LiveSource,
    MemorySource,
    ReadOnlySource,
    Source,
    SourceError,
    history_source,
)

__all__ = [
    "ConsoleApp",
    "HistorySource",
    "LiveSource",
    "MemorySource",
    "ReadOnlySource",
    "Source",
    "SourceError",
    "history_source",
]
