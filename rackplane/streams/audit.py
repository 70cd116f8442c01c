"""The audit interface: every event, command and rejection, in the order they were read.

`AuditSink` is what the history store implements (DuckDB, issue 6). `JsonlAuditSink` is a
plain implementation: three JSON-lines files, appended, flushed per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import IO, Protocol

from rackplane.models import COMMANDS, EVENTS, REJECTIONS, Command, Event, Rejection


class AuditSink(Protocol):
    """Receives what the pipeline saw, batch by batch, in topic order."""

    def record_events(self, events: Sequence[Event]) -> None: ...

    def record_commands(self, commands: Sequence[Command]) -> None: ...

    def record_rejections(self, rejections: Sequence[Rejection]) -> None: ...

    def close(self) -> None: ...


class JsonlAuditSink:
    """Appends to `events.jsonl`, `commands.jsonl`, `rejections.jsonl` in a directory."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[bytes]] = {}

    def _write(self, name: str, lines: Sequence[bytes]) -> None:
        if not lines:
            return
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = (self.dir / f"{name}.jsonl").open("ab")
        f.write(b"".join(line + b"\n" for line in lines))
        f.flush()

    def record_events(self, events: Sequence[Event]) -> None:
        self._write("events", [EVENTS.dump_json(e) for e in events])

    def record_commands(self, commands: Sequence[Command]) -> None:
        self._write("commands", [COMMANDS.dump_json(c) for c in commands])

    def record_rejections(self, rejections: Sequence[Rejection]) -> None:
        self._write("rejections", [REJECTIONS.dump_json(r) for r in rejections])

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
