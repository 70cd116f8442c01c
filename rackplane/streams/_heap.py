"""Keeping the cyclic garbage collector's pauses out of the worker's latency.

A full (generation 2) collection scans every object the collector tracks. A started worker
holds ~130,000 of them (Faust, aiokafka, pydantic's schemas, a 128-rack cluster's state), and
one full collection paused it for 150-190 ms on the shared 2-CPU machine (measured with
`gc.callbacks` during the 500 commands/s latency benchmark): every command that arrived
meanwhile waited that long, enough to put the p99 over 50 ms on its own. Objects that live as
long as the worker are moved out of the collector's way with `gc.freeze()` (they stay
reference-counted: what becomes garbage without a cycle is still freed at once), so later full
collections only scan what was allocated since (measured: 2-8 ms for ~6,000 objects).

`settle()` runs when the worker is ready and after a cluster's state was rebuilt from the
event log: the two moments that leave many long-lived objects behind.
"""

from __future__ import annotations

import gc


def settle(*, collect: bool = False) -> int:
    """Move every object alive now to the collector's permanent generation.

    Args:
        collect: first run a full collection, so that cyclic garbage made so far is freed
            rather than frozen (a pause of its own: for start-up, not the hot path).

    Returns:
        How many objects the permanent generation holds now.
    """
    if collect:
        gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
