"""The operator console (Textual): `rackplane tui`. An adapter: folds events, sends commands."""

from rackplane.tui.app import ConsoleApp
from rackplane.tui.sources import (
    EngineSource,
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
    "EngineSource",
    "HistorySource",
    "LiveSource",
    "MemorySource",
    "ReadOnlySource",
    "Source",
    "SourceError",
    "history_source",
]
