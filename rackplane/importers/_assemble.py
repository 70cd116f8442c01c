"""Build a `Topology` from what a source said, blaming the right line when it does not fit.

Theory of operation: every importer first reads its format into drafts (a rack id, its nodes,
its pod, and *where* in the file each came from), then calls `assemble_topology`. The checks
that span several entries (a rack id or node used twice, a rack naming an unlisted pod) are
done here, before the `Topology` validator would catch them without knowing the line, so the
error names the second occurrence and points back at the first. Whatever the models still
reject (an id with a space in it, 65 GPUs a node) is reported at the draft's place too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from rackplane.importers._yaml import LineMap, file_error, format_path
from rackplane.importers.errors import TopologyFileError
from rackplane.models.topology import Pod, Rack, Topology


@dataclass(frozen=True, slots=True)
class Where:
    """A place in a file: a 1-based line and/or a dotted field path."""

    line: int | None = None
    field: str | None = None

    @classmethod
    def of(cls, lines: LineMap, *path: str | int) -> Where:
        """The place of `path` in a loaded document: its line and its dotted field."""
        return cls(lines.line_of(path), format_path(path))

    def error(self, source: str, expected: str, got: str | None = None) -> TopologyFileError:
        """A `TopologyFileError` at this place."""
        return TopologyFileError(source, expected, line=self.line, field=self.field, got=got)

    def describe(self) -> str:
        """`line 7` / `racks[2]` / `racks[2] (line 7)`, for pointing back at an earlier entry."""
        if self.field and self.line:
            return f"{self.field} (line {self.line})"
        if self.line:
            return f"line {self.line}"
        return self.field or "an earlier entry"


@dataclass(frozen=True, slots=True)
class RackDraft:
    """One NVLink domain as a source described it."""

    id: str
    nodes: tuple[str, ...]
    pod: str
    gpus_per_node: int
    where: Where = field(default_factory=Where)
    """Where the rack (and its id) was written."""
    nodes_where: Where = field(default_factory=Where)
    """Where its node list was written."""
    pod_where: Where = field(default_factory=Where)
    """Where its pod was written (or the rack, when the pod was implied)."""


@dataclass(frozen=True, slots=True)
class PodDraft:
    """One IB pod as a source described it."""

    id: str
    superpod: str | None = None
    where: Where = field(default_factory=Where)


def assemble_topology(
    source: str,
    cluster: str,
    racks: Sequence[RackDraft],
    pods: Sequence[PodDraft] = (),
    *,
    where: Where | None = None,
) -> Topology:
    """Check the drafts against each other and build the `Topology`.

    Args:
        source: the file's name, for errors.
        cluster: the cluster id.
        racks: the racks in file order.
        pods: the pods, when the source lists them (needed for superpods); else derived.
        where: where the cluster as a whole is described, for errors about it.

    Raises:
        TopologyFileError: a repeated rack id, pod id or node; a rack naming a pod that `pods`
            lacks; an id or count the models refuse; no racks at all.
    """
    top = where or Where(line=None)
    if not racks:
        raise top.error(source, "expected at least one rack (NVLink domain)")
    _check_unique_racks(source, racks)
    _check_unique_nodes(source, racks)
    pod_models = _build_pods(source, pods)
    if pod_models:
        listed = [p.id for p in pod_models]
        for rack in racks:
            if rack.pod not in listed:
                shown = ", ".join(listed[:8]) + (", ..." if len(listed) > 8 else "")
                raise rack.pod_where.error(
                    source, f"expected one of the listed pods ({shown})", repr(rack.pod)
                )
    rack_models = tuple(_build_rack(source, r) for r in racks)
    try:
        return Topology(cluster=cluster, racks=rack_models, pods=pod_models)
    except ValidationError as err:
        raise file_error(err, source, LineMap(), line=top.line) from None


def _check_unique_racks(source: str, racks: Sequence[RackDraft]) -> None:
    first: dict[str, RackDraft] = {}
    for rack in racks:
        earlier = first.setdefault(rack.id, rack)
        if earlier is not rack:
            raise rack.where.error(
                source,
                f"expected a unique rack id; {rack.id!r} is already used at "
                f"{earlier.where.describe()}",
            )


def _check_unique_nodes(source: str, racks: Sequence[RackDraft]) -> None:
    owner: dict[str, RackDraft] = {}
    for rack in racks:
        seen_here: set[str] = set()
        for node in rack.nodes:
            if node in seen_here:
                raise rack.nodes_where.error(
                    source, f"expected each node once; {node!r} is listed twice in {rack.id!r}"
                )
            seen_here.add(node)
            earlier = owner.setdefault(node, rack)
            if earlier is not rack:
                raise rack.nodes_where.error(
                    source,
                    f"expected each node in exactly one rack; {node!r} is also in "
                    f"{earlier.id!r} at {earlier.nodes_where.describe()}",
                )


def _build_pods(source: str, pods: Sequence[PodDraft]) -> tuple[Pod, ...]:
    seen: dict[str, PodDraft] = {}
    built: list[Pod] = []
    for pod in pods:
        earlier = seen.setdefault(pod.id, pod)
        if earlier is not pod:
            raise pod.where.error(
                source,
                f"expected a unique pod id; {pod.id!r} is already used at "
                f"{earlier.where.describe()}",
            )
        try:
            built.append(Pod(id=pod.id, superpod=pod.superpod))
        except ValidationError as err:
            raise _at(err, source, pod.where) from None
    return tuple(built)


def _build_rack(source: str, rack: RackDraft) -> Rack:
    try:
        return Rack(id=rack.id, pod=rack.pod, nodes=rack.nodes, gpus_per_node=rack.gpus_per_node)
    except ValidationError as err:
        detail = err.errors(include_url=False)[0]
        loc = detail["loc"]
        place = {"nodes": rack.nodes_where, "pod": rack.pod_where}.get(
            str(loc[0]) if loc else "", rack.where
        )
        raise _at(err, source, place) from None


def _at(err: ValidationError, source: str, where: Where) -> TopologyFileError:
    """Report a model's complaint at a draft's place (the model's own path means little here)."""
    located = file_error(err, source, LineMap(), line=where.line)
    return TopologyFileError(
        source,
        located.expected,
        line=located.line,
        field=where.field or located.field,
        got=located.got,
    )
