"""The fault suite's counts as one Markdown table, for docs/BENCHMARKS.md.

python -m tests.faults.summary DIR      # DIR: $RACKPLANE_FAULT_REPORT of a run
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COLUMNS = (
    ("case", lambda d, c: d["case"]),
    ("passed", lambda d, c: "yes" if d["passed"] else f"no ({d['problems_total']})"),
    ("wall s", lambda d, c: d.get("wall_s", d.get("refusal", {}).get("seconds", ""))),
    ("load cmd/s", lambda d, c: d.get("load_commands_per_s", "")),
    ("commands sent", lambda d, c: c.get("sent_commands", 0)),
    ("acked", lambda d, c: c.get("acked_commands", 0)),
    ("decided once", lambda d, c: c.get("decided", 0)),
    ("events", lambda d, c: c.get("events", 0)),
    ("faults", lambda d, c: c.get("faults_injected", 0)),
    ("worker restarts", lambda d, c: c.get("worker_restarts", 0)),
    ("bad inputs", lambda d, c: c.get("bad_inputs_tried", 0)),
    ("lost", lambda d, c: c.get("lost", 0)),
    ("doubled", lambda d, c: c.get("decided_twice", 0)),
    ("forked", lambda d, c: c.get("forked", 0)),
    ("gaps", lambda d, c: c.get("gaps", 0)),
    ("duplicates", lambda d, c: c.get("duplicates", 0)),
    ("history missing", lambda d, c: c.get("history_missing", 0)),
)


def table(directory: Path) -> str:
    """One row per case report in `directory`."""
    rows: list[list[Any]] = []
    for path in sorted(directory.glob("*.json")):
        d = json.loads(path.read_text())
        rows.append([get(d, d.get("counts", {})) for _, get in COLUMNS])
    head = [name for name, _ in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m tests.faults.summary DIR", file=sys.stderr)
        return 2
    print(table(Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
