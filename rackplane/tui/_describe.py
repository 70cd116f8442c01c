"""What an event is about and why it happened, in words the events view shows and filters on."""

from __future__ import annotations

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
    jobs = _strs(getattr(event, "job", None)) + _strs(getattr(event, "jobs", None))
    jobs += _strs(getattr(event, "victims", None))
    nodes = _strs(getattr(event, "node", None)) + _strs(getattr(event, "old_node", None))
    nodes += _strs(getattr(event, "new_node", None)) + _strs(getattr(event, "removed", None))
    racks = _strs(getattr(event, "rack", None)) + _strs(getattr(event, "target_racks", None))
    racks += _strs(getattr(event, "from_racks", None)) + _strs(getattr(event, "to_rack", None))
    for placed in getattr(event, "slices", None) or ():
        racks += _strs(getattr(placed, "racks", None))
    if state is not None:
        racks += tuple(state.nodes[n].rack for n in nodes if n in state.nodes)
    return Subjects(
        tuple(dict.fromkeys(jobs)), tuple(dict.fromkeys(nodes)), tuple(dict.fromkeys(racks))
    )


def explain(event: Event) -> str:
    """The decision's own explanation, else its reason or cause, else a summary of the fact."""
    for name in ("explanation", "reason", "cause", "note"):
        text = getattr(event, name, "")
        if text:
            return str(text)
    match event.type:
        case "TopologyRegistered":
            t = event.topology  # type: ignore[union-attr]
            return f"{len(t.racks)} racks, {t.node_count} nodes"
        case "JobSubmitted":
            spec = event.job  # type: ignore[union-attr]
            return f"{spec.nodes} nodes, {spec.kind}, priority {spec.priority}"
        case "JobStarted" | "JobCompleted":
            return ""
        case _:
            return ""
