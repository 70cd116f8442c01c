"""Two checkouts' client commands, alternating, against one live cluster (issue 20).

    python -m bench.cli_ab OTHER_CHECKOUT [--runs 10]

Starts `rackplane up --headless --tansu` of the 128-rack example from this checkout (as
`bench.cli` does), then runs `submit --no-wait`, `status`, `jobs`, `racks` and `rack` from this
checkout and from OTHER_CHECKOUT (e.g. a `git worktree add --detach /tmp/old COMMIT`) by turns,
the order swapped every round, each command a fresh process with its checkout first on the
path. Alternating matters on a machine whose speed moves from one hour to the next, and because
every command gets slower as `up`'s log grows. Prints one JSON row per checkout and command
(wall and CPU medians, every wall time). Figures: docs/BENCHMARKS.md, "CLI commands, what a
client command imports".
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

from bench.cli import _RACKPLANE, CLUSTER, ROOT, _live_up, _Runs

COMMANDS = ("submit --no-wait", "status", "jobs", "racks", "rack")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_ab", description=__doc__)
    parser.add_argument("other", type=Path, help="the other checkout's root")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    trees = {"this": ROOT, "other": args.other.resolve()}
    runs = {k: {c: _Runs() for c in COMMANDS} for k in trees}
    ids = itertools.count()
    with _live_up(lambda m: print(m, file=sys.stderr)) as broker:
        for i in range(args.runs):
            order = list(trees.items()) if i % 2 == 0 else list(reversed(trees.items()))
            for name, tree in order:
                env = {**os.environ, "PYTHONPATH": str(tree)}
                at = ["--broker", broker]
                job = f"bench-ab-{os.getpid()}-{next(ids)}"
                argvs = {
                    "submit --no-wait": ["submit", "--cluster", CLUSTER, "--job", job,
                                         "--nodes", "16", "--no-wait"],
                    "status": ["status"],
                    "jobs": ["jobs", "--cluster", CLUSTER],
                    "racks": ["racks", "--cluster", CLUSTER],
                    "rack": ["rack", "r001", "--cluster", CLUSTER],
                }  # fmt: skip
                for command in COMMANDS:
                    runs[name][command].time([*_RACKPLANE, *argvs[command], *at], cwd=tree, env=env)
    for name, tree in trees.items():
        for command in COMMANDS:
            r = runs[name][command]
            row = {"checkout": str(tree), **r.row(command, None)}
            row["walls"] = [round(x, 3) for x in r.wall]
            print(json.dumps(row))


if __name__ == "__main__":
    main()
