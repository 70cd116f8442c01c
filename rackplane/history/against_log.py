"""The store against the event log: `LogIndex` (what the events topic holds) and `compare`.

Theory of operation:
1. The caller reads the events topic to its true end (`rackplane.streams.log_scan`: markers,
   since ListOffsets cannot be trusted on Tansu) and hands every record to `LogIndex.add`,
   in partition order. Each event is decoded and re-serialized the way the sink stores it,
   then digested (sha256), so a stored payload and a logged event compare by digest; per
   cluster the index keeps the first record of each seq (the one every reader folds), and
   counts a later record of the same seq as a *duplicate* when it is the same event (a
   producer retry) or a *fork* when it is another (two writers decided for one cluster).
2. `compare` walks the stored (cluster, seq, digest) in order against the index and sorts
   every difference of a cluster:
   - *behind*: seqs after the store's last that the log has (the audit agent lags a running
     worker, or the store was copied earlier): a pass unless `strict`;
   - *missing*: seqs up to the store's last that the log has and the store lacks;
   - *extra*: stored seqs the log does not hold (not counted below the log's first seq of a
     cluster whose partition no longer starts at offset 0: retention deleted those, and they
     are reported as *before the log*);
   - *different*: one seq, other content;
   - *forks* and *gaps in the log*: problems of the log itself.
   With the log keys (`LogIndex.trust`), a record not signed by one is counted as *forged*
   and left out, as every reader of the log leaves it out; any fails the comparison.
   Each kind keeps its first few examples.
Pure: no broker, no duckdb.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rackplane.history._writer import to_json
from rackplane.logtrust import Judge, LogTrust
from rackplane.models import EVENTS

EXAMPLES = 3
KINDS = ("behind", "missing", "extra", "different", "forks", "log_gaps")
FAILING = frozenset({"missing", "extra", "different", "forks", "log_gaps"})


def digest(payload: bytes) -> bytes:
    """The digest both sides are compared by: sha256 of the stored JSON payload."""
    return hashlib.sha256(payload).digest()


@dataclass
class _ClusterLog:
    partition: int
    first: dict[int, tuple[bytes, int]] = field(default_factory=dict)
    """seq -> (digest, offset) of the first record of that seq."""
    duplicates: int = 0
    forks: int = 0
    fork_examples: list[str] = field(default_factory=list)


@dataclass
class LogIndex:
    """The events of the log per cluster (`add` every record of the topic, in order)."""

    topic: str
    clusters: dict[str, _ClusterLog] = field(default_factory=dict)
    records: int = 0
    undecodable: int = 0
    start: dict[int, int] = field(default_factory=dict)
    """partition -> the offset of its first record read (above 0: the log was trimmed)."""
    trust: LogTrust | None = None
    """The log keys: a record not signed by one is *forged*, indexed as no reader folds it."""
    forged_examples: list[str] = field(default_factory=list)
    judge: Judge[int] = field(init=False)

    def __post_init__(self) -> None:
        self.judge = Judge(self.trust)

    @property
    def forged(self) -> int:
        return self.judge.forged

    def add(self, partition: int, offset: int, value: bytes | None) -> None:
        """Index one record (markers are not passed in)."""
        self.records += 1
        self.start.setdefault(partition, offset)
        try:
            event = EVENTS.validate_json(value or b"")
        except ValidationError:
            self.undecodable += 1
            return
        why = self.judge.refuses(partition, event)
        if why is not None:
            if len(self.forged_examples) < EXAMPLES:
                self.forged_examples.append(
                    f"{self.where(partition, offset)}: {event.type} {event.cluster}@{event.seq} "
                    f"not written by a controller: {why}"
                )
            return
        log = self.clusters.get(event.cluster)
        if log is None:
            log = self.clusters[event.cluster] = _ClusterLog(partition)
        d = digest(to_json(event))
        seen = log.first.get(event.seq)
        if seen is None:
            log.first[event.seq] = (d, offset)
        elif seen[0] == d:
            log.duplicates += 1
        else:
            log.forks += 1
            if len(log.fork_examples) < EXAMPLES:
                log.fork_examples.append(
                    f"seq {event.seq}: two different events in the log, "
                    f"{self.where(partition, seen[1])} and @{offset}"
                )

    def where(self, partition: int, offset: int) -> str:
        return f"{self.topic}[{partition}]@{offset}"


@dataclass
class ClusterDiff:
    """One cluster, the store against the log."""

    cluster: str
    in_log: int = 0
    """Distinct seqs in the log."""
    stored: int = 0
    """Distinct seqs in the store."""
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    duplicates: int = 0
    """Identical records of one seq in the log beyond the first (a pass)."""
    before_log: int = 0
    """Stored seqs older than the log's first (trimmed by retention; a pass)."""
    examples: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})

    def ok(self, *, strict: bool = False) -> bool:
        kinds = FAILING | {"behind"} if strict else FAILING
        return not any(self.counts[k] for k in kinds)

    def note(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        if len(self.examples[kind]) < EXAMPLES:
            self.examples[kind].append(example)

    def verdict(self) -> str:
        """`in step`, `behind by 12`, or the differences in a few words."""
        words = {
            "missing": "missing from the store", "extra": "stored, not in the log",
            "different": "different", "forks": "forked in the log",
            "log_gaps": "missing from the log",
        }  # fmt: skip
        parts = [f"{self.counts[k]:,} {w}" for k, w in words.items() if self.counts[k]]
        if self.counts["behind"]:
            parts.insert(0, f"behind by {self.counts['behind']:,}")
        return ", ".join(parts) or "in step"

    def as_json(self, *, strict: bool = False) -> dict[str, Any]:
        return {
            "cluster": self.cluster, "ok": self.ok(strict=strict), "in_log": self.in_log,
            "stored": self.stored, **self.counts, "duplicates": self.duplicates,
            "before_log": self.before_log, "verdict": self.verdict(),
            "examples": {k: v for k, v in self.examples.items() if v},
        }  # fmt: skip


def compare(log: LogIndex, stored: Iterable[tuple[str, int, bytes]]) -> list[ClusterDiff]:
    """Every cluster of the log or the store, sorted; `stored` in (cluster, seq) order."""
    diffs: dict[str, ClusterDiff] = {}
    store_seqs: dict[str, set[int]] = {}
    last_cluster, last_seq = None, None
    for cluster, seq, d in stored:
        if (cluster, seq) == (last_cluster, last_seq):
            continue  # a seq stored twice: the seq check reports it
        last_cluster, last_seq = cluster, seq
        diff = diffs.get(cluster)
        if diff is None:
            diff = diffs[cluster] = ClusterDiff(cluster)
            store_seqs[cluster] = set()
        store_seqs[cluster].add(seq)
        diff.stored += 1
        clog = log.clusters.get(cluster)
        seen = clog.first.get(seq) if clog is not None else None
        if seen is None:
            if clog is not None and log.start.get(clog.partition, 0) > 0 and seq < min(clog.first):
                diff.before_log += 1
            else:
                diff.note("extra", f"seq {seq}: stored, not in the log")
        elif seen[0] != d:
            where = log.where(clog.partition, seen[1]) if clog is not None else ""
            diff.note("different", f"seq {seq}: the store and the log ({where}) differ")
    for cluster, clog in log.clusters.items():
        diff = diffs.setdefault(cluster, ClusterDiff(cluster))
        _log_side(log, clog, diff, store_seqs.get(cluster, set()))
    return [diffs[c] for c in sorted(diffs)]


def _log_side(log: LogIndex, clog: _ClusterLog, diff: ClusterDiff, stored: set[int]) -> None:
    """What the log holds that the store lacks, and the log's own problems."""
    diff.in_log = len(clog.first)
    diff.duplicates = clog.duplicates
    diff.counts["forks"] = clog.forks
    diff.examples["forks"] = list(clog.fork_examples)
    store_last = max(stored, default=0)
    for seq in sorted(clog.first):
        if seq in stored:
            continue
        where = log.where(clog.partition, clog.first[seq][1])
        if seq > store_last:
            diff.note("behind", f"seq {seq}: in the log ({where}), not stored yet")
        else:
            diff.note("missing", f"seq {seq}: in the log ({where}), not stored")
    trimmed = log.start.get(clog.partition, 0) > 0
    low = min(clog.first) if trimmed else 1
    for seq in range(low, max(clog.first) + 1):
        if seq not in clog.first:
            diff.note("log_gaps", f"seq {seq}: not in the log")
