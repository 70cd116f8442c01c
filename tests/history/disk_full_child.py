"""A sink in a process of its own, driven line by line, for the disk-full tests.

`python -m tests.history.disk_full_child duckdb|jsonl PATH MESSAGES` loads the messages
(JSON lines: `{"kind": "events"|"commands"|"rejections", "json": ...}`) and answers one JSON
line per request on stdin:
`{"record": "events", "start": 0, "stop": 50}`, `{"chunk": 8}`, `{"sql": "..."}`,
`{"close": true}`; the answer is `{"ok": true}` or `{"ok": false, "error": "..."}`.
The test lowers and raises this process's RLIMIT_FSIZE with `resource.prlimit`: past the
limit every write fails with EFBIG (Python ignores SIGXFSZ), as on a full disk; stdout is a
pipe, which the limit does not touch.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rackplane.history import DuckDBAuditSink
from rackplane.models import COMMANDS, EVENTS, REJECTIONS
from rackplane.streams.audit import JsonlAuditSink

PARSE = {
    "events": EVENTS.validate_json,
    "commands": COMMANDS.validate_json,
    "rejections": REJECTIONS.validate_json,
}


def main(kind: str, path: str, messages: str) -> None:
    loaded: dict[str, list[Any]] = {k: [] for k in PARSE}
    with open(messages) as f:
        for line in f:
            m = json.loads(line)
            loaded[m["kind"]].append(PARSE[m["kind"]](m["json"]))
    sink: Any = DuckDBAuditSink(path) if kind == "duckdb" else JsonlAuditSink(path)
    answer({"ok": True, "ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "record" in request:
                batch = loaded[request["record"]][request["start"] : request["stop"]]
                getattr(sink, f"record_{request['record']}")(batch)
            elif "chunk" in request:
                sink.chunk = request["chunk"]
            elif "sql" in request:
                sink.con.execute(request["sql"])
            elif "close" in request:
                sink.close()
                answer({"ok": True})
                return
        except Exception as err:
            answer({"ok": False, "error": f"{type(err).__name__}: {err}"})
            continue
        answer({"ok": True})


def answer(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(*sys.argv[1:4])
