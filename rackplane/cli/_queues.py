"""`rackplane queues`: the cluster's queue tree now, from the live event log.

Quota, what each queue holds (guaranteed and borrowed), what waits in it, and its fair
share, read as `rackplane status` reads (rackplane.streams.live: any machine, writes
nothing). The rules behind the figures are rackplane/policies/quotas.py.
"""

from __future__ import annotations

from dataclasses import asdict

from rich.markup import escape
from rich.table import Table

from rackplane.cli._config import ConfigFile
from rackplane.cli._read import Broker, Cluster, Json, Prefix, Timeout, _settings, _view
from rackplane.cli._render import console, print_json


def queues(
    cluster: Cluster,
    broker: Broker = None,
    prefix: Prefix = None,
    timeout: Timeout = 10.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """The cluster's queues: quota, held (borrowed), waiting and fair share."""
    from rackplane.policies.quotas import queue_rows

    s = _settings(config_file, broker, prefix)
    state = _view(s, cluster, timeout).state
    rows = queue_rows(state)
    if json_out:
        print_json([asdict(r) for r in rows])
        return
    if not rows:
        console.print(f"cluster {escape(cluster)} has no queues (PolicySettings.queues)")
        return
    t = Table(
        title=f"Queues of {cluster} as of event {state.seq:,}",
        title_justify="left",
        header_style="bold",
    )
    width = max(2 * r.depth + len(r.queue) for r in rows)
    t.add_column("queue", no_wrap=True, min_width=width)
    for name in ("quota", "limits", "held", "over", "GPUs", "jobs", "waiting", "share"):
        t.add_column(name, justify="right")

    def limit(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    for r in rows:
        t.add_row(
            "  " * r.depth + escape(r.queue),
            f"{r.nominal_nodes:,}",
            f"{limit(r.borrowing_limit)}/{limit(r.lending_limit)}",
            f"{r.held_nodes:,}",
            f"{r.borrowed_nodes:,}",
            f"{r.held_gpus:,}",
            f"{r.running_jobs:,}",
            f"{r.waiting_jobs:,} ({r.blocked_jobs:,})",
            f"{r.share:.3f}" + (f" x{r.weight:g}" if r.weight != 1 else ""),
        )
    console.print(t)
    console.print(
        "in nodes. quota: nominal; limits: borrowing/lending (- none); over: held above the "
        "quota, borrowed and reclaimable; jobs: running; waiting: jobs (blocked); share: usage "
        "over weighted quota (x weight), lowest goes first"
    )
