"""Queues: who may use how much of a shared cluster (GPU quotas, borrowing, fair share).

A cluster's queues form a tree (org -> team, or deeper). Jobs name a leaf queue; a parent
queue holds no jobs of its own and sums what its children hold. Each queue has:

- a nominal quota in nodes: what it is guaranteed. A parent's nominal is the sum of its
  children's (it may be left 0, or stated equal to that sum);
- a borrowing limit: how far above its nominal it may go on capacity others leave unused
  (None: as far as there is room);
- a lending limit: how much of its unused nominal others may borrow (None: all of it). What
  it does not lend stays free for its own work;
- a weight: its fair-share weight (a queue of weight 2 is entitled to twice the share);
- the job kinds it may run, and whether its guaranteed jobs may preempt its own
  lower-priority work.

Nodes, not GPUs: every node of a rack has the same GPUs, and placement works in nodes; the
console and `rackplane queues` show the GPUs too. The rules that use the tree are in
`rackplane/policies/quotas.py`.
"""

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from rackplane.models._ids import QueueName
from rackplane.models.jobs import MAX_JOB_NODES, JobKind

MAX_QUEUES = 1_024
"""The most queues a cluster's settings hold (what one settings message can carry)."""
MAX_QUEUE_NODES = 10 * MAX_JOB_NODES
"""The largest quota a queue may state, in nodes."""


class QueueSpec(BaseModel):
    """One queue of the tree (see the module docstring)."""

    # Field docstrings are for readers, not pydantic descriptions: `use_attribute_docstrings`
    # re-reads and parses the source at import (with the settings models, ~35 ms a command).
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    name: QueueName
    parent: QueueName | None = None
    """The queue above it (an org above a team); None for a top-level queue."""
    nominal_nodes: int = Field(default=0, ge=0, le=MAX_QUEUE_NODES)
    """Nodes guaranteed to it. A parent's is the sum of its children's."""
    borrowing_limit: int | None = Field(default=None, ge=0, le=MAX_QUEUE_NODES)
    """Nodes it may use above its nominal, borrowed from others' unused quota; None: any."""
    lending_limit: int | None = Field(default=None, ge=0, le=MAX_QUEUE_NODES)
    """Nodes of its unused nominal others may borrow; None: all of it."""
    weight: float = Field(default=1.0, gt=0, le=1_000, allow_inf_nan=False)
    """Fair-share weight: the share it is entitled to, relative to its siblings."""
    kinds: tuple[JobKind, ...] = Field(
        default=(JobKind.MANAGED, JobKind.INTERACTIVE, JobKind.INFERENCE), min_length=1
    )
    """The job kinds it may run."""
    preempt_lower_priority: bool = False
    """A guaranteed job of this queue blocked by capacity may preempt lower-priority work of
    the same queue (Kueue's `withinClusterQueue: LowerPriority`)."""


def check_tree(queues: Sequence[QueueSpec], default: str | None) -> str | None:
    """Why these queues do not make a tree (or the default is not a leaf), or None."""
    by_name: dict[str, QueueSpec] = {}
    for q in queues:
        if q.name in by_name:
            return f"queue {q.name!r} is listed twice"
        by_name[q.name] = q
    children: dict[str, list[QueueSpec]] = {}
    for q in queues:
        if q.parent is None:
            continue
        if q.parent not in by_name:
            return f"queue {q.name!r} names parent {q.parent!r}, which is not a queue"
        children.setdefault(q.parent, []).append(q)
    for q in queues:
        seen = {q.name}
        up = q.parent
        while up is not None:
            if up in seen:
                return f"queue {q.name!r} is its own ancestor (through {up!r})"
            seen.add(up)
            up = by_name[up].parent
    for name, kids in children.items():
        stated = by_name[name].nominal_nodes
        total = sum(nominal(by_name, children, k.name) for k in kids)
        if stated not in (0, total):
            return (
                f"queue {name!r} states a nominal of {stated} nodes but its children's sum "
                f"to {total}: leave it 0 or make it {total}"
            )
    if default is not None:
        if default not in by_name:
            return f"the default queue {default!r} is not a queue"
        if default in children:
            return f"the default queue {default!r} has child queues: jobs go to a leaf queue"
    return None


def leaf_queues(queues: Sequence[QueueSpec]) -> set[str]:
    """The queues that hold jobs: those no queue names as its parent."""
    return {q.name for q in queues} - {q.parent for q in queues if q.parent is not None}


def nominal(by_name: dict[str, QueueSpec], children: dict[str, list[QueueSpec]], name: str) -> int:
    """A queue's nominal quota: its own for a leaf, its children's sum for a parent."""
    kids = children.get(name)
    if not kids:
        return by_name[name].nominal_nodes
    return sum(nominal(by_name, children, k.name) for k in kids)
