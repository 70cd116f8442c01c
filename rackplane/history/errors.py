"""The one error of the history package: a clear message that names the path."""

from __future__ import annotations


class HistoryError(RuntimeError):
    """A history file or directory cannot be opened or read as asked (the message says why)."""
