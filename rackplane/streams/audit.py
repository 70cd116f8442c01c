"""The audit interface: every event, command and rejection, in the order they were read.

`AuditSink` is what the history store implements (DuckDB, issue 6). `JsonlAuditSink` is a
plain implementation: three JSON-lines files, appended, flushed per batch.

A `record_*` that raises has stored nothing of the batch, so the caller (the audit agent)
can record the same batch again: the JSONL sink truncates a file back to where the batch
began when a write fails part-way (a full disk), and a file opened with a torn last line (a
crash mid-write) is cut back to its last whole line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

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
        self._files: dict[str, int] = {}
        """name -> file descriptor, opened for appending."""

    def _open(self, name: str) -> int:
        fd = self._files.get(name)
        if fd is None:
            fd = os.open(self.dir / f"{name}.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                _cut_torn_line(fd)
            except OSError:
                os.close(fd)
                raise
            self._files[name] = fd
        return fd

    def _write(self, name: str, lines: Sequence[bytes]) -> None:
        if not lines:
            return
        fd = self._open(name)
        data = memoryview(b"".join(line + b"\n" for line in lines))
        start = os.fstat(fd).st_size
        try:
            while data:
                data = data[os.write(fd, data) :]  # a full disk may take part of it, then fail
        except OSError:
            try:
                os.ftruncate(fd, start)  # no half batch, no half line, before the retry
            except OSError:
                # the file keeps a tail that the next open cuts back to its last whole line
                os.close(self._files.pop(name))
            raise

    def record_events(self, events: Sequence[Event]) -> None:
        self._write("events", [EVENTS.dump_json(e) for e in events])

    def record_commands(self, commands: Sequence[Command]) -> None:
        self._write("commands", [COMMANDS.dump_json(c) for c in commands])

    def record_rejections(self, rejections: Sequence[Rejection]) -> None:
        self._write("rejections", [REJECTIONS.dump_json(r) for r in rejections])

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()


def _cut_torn_line(fd: int) -> None:
    """Truncate an append-only JSON-lines file after its last newline (a write that a crash
    or a full disk cut short leaves a torn last line)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end, step = size, 65_536
    while end > 0:
        begin = max(0, end - step)
        newline = os.pread(fd, end - begin, begin).rfind(b"\n")
        if newline >= 0:
            os.ftruncate(fd, begin + newline + 1)
            return
        end = begin
    os.ftruncate(fd, 0)
