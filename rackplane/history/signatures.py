"""`check_signatures(reader, trust)`: was every stored event written by a controller?

The hash chains (`verify.py`) have no secret: whoever can write the file can recompute every
hash and the stored head, and the chain then holds over a changed actor, a deleted event or
an inserted one. The controller's signatures (`rackplane.logtrust`) do have one: the worker's
private key, which the history file never holds. Each stored event is checked against the
log keys the operator names (never keys found in the file), so an edited event fails its
signature, an inserted one has none, and a deleted one leaves its seq missing
(`continuity.py`) unless the later events are renumbered, which fails theirs.
What signatures cannot see: events cut off the end (nothing after them to miss them);
`--against-log` compares the store with the log for that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import ValidationError

from rackplane.history.reader import HistoryReader
from rackplane.logtrust import Judge, LogTrust
from rackplane.models import EVENTS

EXAMPLES = 3


@dataclass
class SignatureReport:
    """The verdict over every stored event."""

    events: int = 0
    signed: int = 0
    """Events signed by a trusted key, whose signature verifies."""
    refused: int = 0
    """Events a reader of the log would skip: unsigned, signed by another key, or changed."""
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.refused == 0

    def as_json(self) -> dict[str, object]:
        return {"ok": self.ok, "events": self.events, "signed": self.signed,
                "refused": self.refused, "examples": self.examples}  # fmt: skip


def check_signatures(
    reader: HistoryReader, trust: LogTrust, progress: Callable[[int], None] | None = None
) -> SignatureReport:
    """Check each stored event's signature, by cluster and seq. With
    `trust.unsigned_prefix`, a cluster's unsigned events before its first signed one pass."""
    report = SignatureReport()
    by_cluster: Judge[str] = Judge(trust)
    for cluster, seq, payload in reader.event_payloads():
        report.events += 1
        try:
            event = EVENTS.validate_json(payload)
        except ValidationError as err:
            why: str | None = f"not an event ({err.errors()[0]['msg']})"
        else:
            why = by_cluster.refuses(cluster, event)
        if why is None:
            report.signed += event.signature is not None
        else:
            report.refused += 1
            if len(report.examples) < EXAMPLES:
                report.examples.append(f"cluster {cluster}: seq {seq}: {why}")
        if progress is not None and report.events % 10_000 == 0:
            progress(report.events)
    return report
