"""What an event is about and why it happened, in words the events view shows and filters on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rackplane.models import Event
from rackplane.projections import ClusterState


@dataclass(frozen=True, slots=True)
class Subjects:
    """The jobs, nodes and racks an event names."""

    jobs: tuple[str, ...]
    nodes: tuple[str, ...]
    racks: tuple[str, ...]

    def label(self) -> str:
        """A short "who" for a table cell."""
        return " ".join((*self.jobs[:2], *self.nodes[:2], *self.racks[:2]))


def _strs(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, tuple | list):
        return tuple(str(v) for v in value if v)
    return ()


def subjects(event: Event, state: ClusterState | None = None) -> Subjects:
    """The jobs, nodes and racks `event` names; a node's rack is added from `state`."""
    job = getattr(event, "job", None)
    job = getattr(job, "id", job)  # JobSubmitted carries the whole spec
    jobs = _strs(job) + _strs(getattr(event, "jobs", None))
    jobs += _strs(getattr(event, "victims", None))
    nodes = _strs(getattr(event, "node", None)) + _strs(getattr(event, "old_node", None))
    nodes += _strs(getattr(event, "new_node", None)) + _strs(getattr(event, "removed", None))
    for name in ("released", "old_nodes", "new_nodes"):
        nodes += _strs(getattr(event, name, None))
    racks = _strs(getattr(event, "rack", None)) + _strs(getattr(event, "target_racks", None))
    racks += _strs(getattr(event, "from_racks", None)) + _strs(getattr(event, "to_rack", None))
    for placed in getattr(event, "slices", None) or ():
        racks += _strs(getattr(placed, "racks", None))
    if state is not None:
        racks += tuple(state.nodes[n].rack for n in nodes if n in state.nodes)
    return Subjects(
        tuple(dict.fromkeys(jobs)), tuple(dict.fromkeys(nodes)), tuple(dict.fromkeys(racks))
    )


def racks_touched(events: Sequence[Event], before: ClusterState, after: ClusterState) -> set[str]:
    """Every rack whose cells `events` (which lead from `before` to `after`) may have changed:
    the racks they name, the racks of the nodes they name, and the racks that the jobs they
    name held or reserved before or after. A display shortcut for the live tail; the
    cluster view diffs the whole state when it is not given one (tested to agree)."""
    racks: set[str] = set()
    for event in events:
        s = subjects(event)
        racks.update(s.racks)
        for st in (before, after):
            racks.update(st.nodes[n].rack for n in s.nodes if n in st.nodes)
            for j in s.jobs:
                job = st.jobs.get(j)
                if job is not None:
                    racks.update(r for sl in job.slices for r in sl.racks)
                racks.update(st.reserved_for(j))
    return racks


def explain(event: Event) -> str:
    """The decision's own explanation, else its reason or cause, else a summary of the fact."""
    for name in ("explanation", "reason", "cause", "note", "detail"):
        text = getattr(event, name, "")
        if text:
            return str(text)
    match event.type:
        case "TopologyRegistered":
            t = event.topology
            return f"{len(t.racks)} racks, {t.node_count} nodes"
        case "JobSubmitted":
            spec = event.job
            return f"{spec.nodes} nodes, {spec.kind}, priority {spec.priority}"
        case "JobStarted" | "JobCompleted":
            return ""
        case _:
            return ""
