"""The errors of the history package: a clear message that names the path or the cluster."""

from __future__ import annotations


class HistoryError(RuntimeError):
    """A history file or directory cannot be opened or read as asked (the message says why)."""


class HistoryGap(HistoryError):
    """A cluster's stored events are not seqs 1..N: a fold over them would lie.

    The message is one line: the path, the cluster and its first problem
    (`cluster c1: seq 5000 missing (stored 4999, then 5012)`).
    """

    def __init__(self, message: str, *, cluster: str, seq: int) -> None:
        super().__init__(message)
        self.cluster = cluster
        self.seq = seq
        """The first seq that is missing, or stored more than once."""
