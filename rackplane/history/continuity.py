"""`check_seqs(reader)`: are each cluster's stored events seqs 1..N, each once?

The controller numbers a cluster's events 1, 2, 3... with no gap (the dedupe key is
(cluster, seq)), so a store that misses a seq lost an event (issue 15: a full disk whose
failed batches were acknowledged), and a seq stored twice (a Parquet export has no primary
key) is two stories of one moment. Either makes every fold over the cluster a lie: replay,
timelines, what-if and the console refuse such a history (`HistoryReader.events` raises
`HistoryGap`), and `rackplane history verify` names the first problem of each cluster:
`cluster c1: seq 5000 missing (stored 4999, then 5012)`.

The hash chains (`verify.py`) cannot see this: a batch that was never stored leaves no
broken link, since the next batch chains onto the last row that was stored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rackplane.history.reader import HistoryReader

SeqProblem = Literal["missing", "duplicate"]


@dataclass(frozen=True, slots=True)
class SeqReport:
    """One cluster's verdict: `problem` is None when its seqs are 1..`last`, each once."""

    cluster: str
    events: int
    last: int
    missing: int = 0
    """Seqs in 1..last not stored."""
    duplicates: int = 0
    """Rows beyond the first of their seq."""
    problem: SeqProblem | None = None
    seq: int | None = None
    """The first seq missing, or stored more than once."""
    before: int | None = None
    """The stored seq just before the first problem (None: it is at the start)."""
    after: int | None = None
    """The seq stored after the first missing ones."""

    @property
    def ok(self) -> bool:
        return self.problem is None

    def detail(self) -> str:
        """The first problem in a few words (empty when there is none)."""
        if self.problem == "duplicate":
            return f"seq {self.seq} stored more than once"
        if self.problem == "missing":
            if self.before is None:
                return f"seq {self.seq} missing (the first stored is {self.after})"
            if self.after is None:
                return f"seq {self.seq} missing (the last stored is {self.before})"
            return f"seq {self.seq} missing (stored {self.before}, then {self.after})"
        return ""

    def line(self) -> str:
        """`cluster c1: seq 5000 missing (stored 4999, then 5012)`."""
        return f"cluster {self.cluster}: {self.detail() or f'seqs 1..{self.last}, each once'}"

    def as_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster, "events": self.events, "last_seq": self.last,
            "ok": self.ok, "missing": self.missing, "duplicates": self.duplicates,
            "problem": self.problem, "seq": self.seq, "detail": self.detail(),
        }  # fmt: skip


def check_seqs(reader: HistoryReader) -> list[SeqReport]:
    """One report per cluster with events, sorted by cluster."""
    return [_report(reader, *counts, end=counts[4]) for counts in reader.seq_counts()]


def seq_report(reader: HistoryReader, cluster: str, *, upto_seq: int | None = None) -> SeqReport:
    """The report of one cluster, over seqs 1..`upto_seq` if given (all of them must be
    stored), else over its seqs up to the last stored."""
    found = reader.seq_counts(cluster, upto_seq=upto_seq)
    _, rows, distinct, first, last = found[0] if found else (cluster, 0, 0, 0, 0)
    end = upto_seq if upto_seq is not None else last
    return _report(reader, cluster, rows, distinct, first, last, end=end)


def _report(
    reader: HistoryReader,
    cluster: str,
    rows: int,
    distinct: int,
    first: int,
    last: int,
    *,
    end: int,
) -> SeqReport:
    """The verdict on seqs 1..`end` given the counts of the stored ones up to it."""
    base = SeqReport(
        cluster, rows, last, missing=max(end - distinct, 0), duplicates=rows - distinct
    )
    if rows == distinct == end:
        return base
    found = reader.first_seq_break(cluster, upto_seq=end)
    if found is not None:
        before, seq = found
        if before == seq:
            return replace(base, problem="duplicate", seq=seq, before=before)
        return replace(base, problem="missing", seq=(before or 0) + 1, before=before, after=seq)
    # 1..last is whole: the seqs after it, up to `end`, are missing
    after = reader.next_seq(cluster, last)
    return replace(base, problem="missing", seq=last + 1, before=last or None, after=after)
