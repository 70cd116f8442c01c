"""The fingerprint of a simulated run: proof that a speed-up left the simulation unchanged.

`python -m bench.sim_digest 128:60:tas+spares [1024:4:tas+spares ...]` simulates each
`RACKS:DAYS:POLICY` spec exactly as `python -m bench.sim` does (`bench.sim.bench_scenario`)
and prints, per spec, one JSON line: the sha256 over every event's `model_dump_json()` in the
order the engine produced them (collected through the simulator's observer, after every
command), the number of events, the sha256 of the metrics' JSON, and the CPU seconds of the
run (`time.process_time`, observer included). Two commits simulate the same run if and only if
(up to sha256) their events and metrics digests are equal.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Sequence

from bench.sim import bench_scenario, spec_args
from rackplane.models import Event
from rackplane.projections import ClusterState
from rackplane.sim import Simulation


def digest(racks: int, days: float, policy: str, seed: int = 1) -> dict[str, object]:
    """Simulate one spec; its events' digest, count, metrics' digest and CPU seconds."""
    scenario, name = bench_scenario(racks, days, policy, seed)
    h = hashlib.sha256()
    count = 0

    def observe(state: ClusterState, events: Sequence[Event]) -> None:
        nonlocal count
        count += len(events)
        for e in events:
            h.update(e.model_dump_json().encode())
            h.update(b"\n")

    cpu = time.process_time()
    metrics = Simulation(scenario, name, observer=observe).run()
    cpu = time.process_time() - cpu
    return {
        "spec": f"{racks}:{days:g}:{policy}",
        "events": count,
        "events_sha256": h.hexdigest(),
        "metrics_sha256": hashlib.sha256(metrics.model_dump_json().encode()).hexdigest(),
        "cpu_s": round(cpu, 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Print one JSON line per spec."""
    for racks, days, policy in spec_args("sim_digest", __doc__, argv):
        print(json.dumps(digest(racks, days, policy)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
