"""Synthetic cluster states for benchmarks: empty, half full, fragmented.

Built fast: placements come from one `Capacity` shared across the fill (the scheduler's own
`find_placement`), and the commands are folded through `decide` + `evolve` without policies.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from rackplane.models import (
    Command,
    CompleteJob,
    JobSpec,
    PlaceJob,
    PolicySettings,
    Rack,
    RegisterTopology,
    SliceAssignment,
    StartJob,
    SubmitJob,
    Topology,
)
from rackplane.policies import Capacity, Placement, decide, find_placement, schedule
from rackplane.projections import ClusterState, evolve, initial_state

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def topology(racks: int, nodes: int = 18, per_pod: int = 8) -> Topology:
    """`racks` NVL72-like racks of `nodes` nodes, `per_pod` racks per IB pod."""
    return Topology(
        cluster=f"bench-{racks}",
        racks=tuple(
            Rack(
                id=f"r{r:04d}",
                pod=f"p{r // per_pod:03d}",
                nodes=tuple(f"r{r:04d}n{i:02d}" for i in range(nodes)),
            )
            for r in range(racks)
        ),
    )


class Folder:
    """Applies commands to a state through the controller (no policies), time moving on."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.now = T0
        self.n = 0

    def send(self, make: Callable[..., Command], **fields: object) -> None:
        self.n += 1
        command = make(
            id=f"bench-{self.state.seq}-{self.n}",
            cluster=self.state.cluster,
            actor="bench",
            **fields,
        )
        for e in decide(self.state, command, now=self.now):
            assert e.type != "CommandRejected", e
            self.state = evolve(self.state, e)
        self.now += timedelta(seconds=1)

    def settle(self) -> ClusterState:
        """Run scheduling cycles, sending what each proposes, until one places nothing: the
        state a steady cycle meets."""
        while True:
            placed = False
            for command in schedule(self.state):
                placed = placed or isinstance(command, PlaceJob)
                fields = command.model_dump(
                    exclude={"id", "cluster", "actor", "type", "causation_id"}
                )
                self.send(type(command), **fields)
            if not placed:
                return self.state

    def place(self, spec: JobSpec, capacity: Capacity, *, start: bool = False) -> bool:
        """Submit `spec` and place it where the scheduler would; False when it does not fit."""
        self.send(SubmitJob, job=spec)
        p = find_placement(capacity, spec.slice_sizes)
        if not isinstance(p, Placement):
            return False
        capacity.commit(p)
        slices = tuple(SliceAssignment(nodes=n) for n in p.slices)
        self.send(PlaceJob, job=spec.id, slices=slices)
        if start:
            self.send(StartJob, job=spec.id)
        return True


def cluster(racks: int, fill: str, seed: int = 1) -> ClusterState:
    """A cluster state: `empty`; `half` (half the racks hold a 16-node job); `fragmented`
    (small jobs of 1-8 nodes on about 80% of the allocatable nodes, then a third of them
    finished, so free nodes are scattered)."""
    f = Folder(initial_state(f"bench-{racks}"))
    f.send(RegisterTopology, topology=topology(racks), settings=PolicySettings())
    rng = random.Random(seed)
    if fill == "empty":
        return f.state
    capacity = Capacity(f.state)
    if fill == "half":
        for j in range(racks // 2):
            f.place(JobSpec(id=f"h{j}", nodes=16), capacity)
        return f.state
    if fill != "fragmented":
        raise ValueError(fill)
    target = int(racks * 16 * 0.8)
    used, j = 0, 0
    while used < target:
        n = rng.randint(1, 8)
        spec = JobSpec(id=f"s{j}", nodes=n, slice_size=8, checkpoint_interval=timedelta(minutes=30))
        f.place(spec, capacity, start=True)
        used += n
        j += 1
    f.now += timedelta(minutes=20)
    for k in rng.sample(range(j), k=j // 3):
        f.send(CompleteJob, job=f"s{k}")
    return f.state


def blocked_by_topology(racks: int) -> ClusterState:
    """A fragmented cluster where every rack with room for 16 took a 16-node job, then one
    more 16-node job (priority 5) waits: blocked by topology, plenty of free nodes in total."""
    return blocked_folder(racks).state


def blocked_folder(racks: int) -> Folder:
    """`blocked_by_topology`'s cluster, with its folder (to send it more commands)."""
    f = Folder(cluster(racks, "fragmented"))
    capacity = Capacity(f.state)
    k = 0
    while f.place(JobSpec(id=f"fill{k}", nodes=16), capacity):
        k += 1
    f.send(SubmitJob, job=JobSpec(id="blocked", nodes=16, priority=5))
    return f
