"""Read Slurm's topology files into neutral layouts: blocks for topology/block, switches for tree.

Theory of operation: `topology.yaml` (Slurm 25.05+) is a list of named topologies, each one of
block, tree or flat; the classic `topology.conf` holds one plugin's lines: `BlockName=...
Nodes=...` plus an optional `BlockSizes=` (topology/block) or `SwitchName=... Nodes=|Switches=`
(topology/tree). `scontrol show topology` (22.05) prints the tree in the conf's own syntax, one
line per switch with `Level=` added and, on upper switches, every node below them in `Nodes=`.

Each reader checks its own syntax and returns the entries with the place each was written:
`BlockLayout` (base blocks in file order, with aggregation sizes) or a tuple of `SwitchSpec`
(switches in file order, children by name). `slurm.py` turns them into racks and pods without
caring which file they came from; checks that span several lines (unknown children, cycles,
two parents) are its job, not the readers'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from rackplane.importers._assemble import Where
from rackplane.importers._common import NodeList
from rackplane.importers._yaml import format_path, load_document, validate
from rackplane.importers.errors import TopologyFileError
from rackplane.importers.hostlist import expand_hostlist
from rackplane.models._ids import Id, RackId

NEEDS_BLOCK = "rackplane needs the topology/block plugin: NVLink domains are blocks"
_CONF_PARAMETERS = {"blockname": "BlockName", "nodes": "Nodes", "blocksizes": "BlockSizes"}
_TREE_PARAMETERS = {
    "switchname": "SwitchName",
    "switches": "Switches",
    "nodes": "Nodes",
    "linkspeed": "LinkSpeed",
    "level": "Level",
}
CUT_HINT = (
    "if this is `scontrol show topology` output, scontrol cuts each line at SLURM_TOPO_LEN "
    "characters (default 512): run it as `SLURM_TOPO_LEN=65536 scontrol show topology`"
)
"""Appended to errors that a line cut short by scontrol would cause."""


@dataclass(frozen=True, slots=True)
class BlockSpec:
    """One base block: a name, its nodes, where each was written."""

    name: str
    nodes: tuple[str, ...]
    where: Where
    nodes_where: Where


@dataclass(frozen=True, slots=True)
class SwitchSpec:
    """One switch of a topology/tree: its name, nodes and child switches, and its line."""

    name: str
    nodes: tuple[str, ...]
    """A leaf's nodes; on an upper switch, what scontrol lists below it (in topology.conf: ())."""
    switches: tuple[str, ...]
    """Child switch names in the order written; () for a leaf."""
    line: int
    level: int | None = None
    """`Level=` as `scontrol show topology` prints it; None in topology.conf."""

    @property
    def is_leaf(self) -> bool:
        """A switch without child switches: its nodes hang off it directly."""
        return not self.switches

    @property
    def where(self) -> Where:
        return Where(self.line, "SwitchName")

    @property
    def nodes_where(self) -> Where:
        return Where(self.line, "Nodes")

    @property
    def switches_where(self) -> Where:
        return Where(self.line, "Switches")


@dataclass(frozen=True, slots=True)
class BlockLayout:
    """A block topology: its name, aggregation sizes (base first) and base blocks in order."""

    name: str
    sizes: tuple[int, ...]
    sizes_where: Where
    blocks: tuple[BlockSpec, ...]


# --- topology.yaml ---------------------------------------------------------------------------


class _BlockDoc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    block: RackId
    nodes: NodeList


class _BlockTopologyDoc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    block_sizes: tuple[Annotated[int, Field(ge=1, strict=True)], ...] = ()
    blocks: tuple[_BlockDoc, ...] = Field(min_length=1)


class _TopologyDoc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    topology: Id
    cluster_default: bool = Field(default=False, strict=True)
    block: _BlockTopologyDoc | None = None
    tree: dict[str, Any] | None = None
    flat: bool | None = Field(default=None, strict=True)

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> _TopologyDoc:
        kinds = [k for k in ("block", "tree", "flat") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                "expected exactly one of 'block', 'tree' or 'flat' "
                f"(found {', '.join(kinds) or 'none'})"
            )
        return self

    @property
    def kind(self) -> str:
        return "block" if self.block is not None else "tree" if self.tree is not None else "flat"


class _TopologyListDoc(RootModel[tuple[_TopologyDoc, ...]]):
    pass


def read_topology_yaml(text: str, source: str, name: str | None) -> BlockLayout:
    """Read a Slurm `topology.yaml` and return the chosen block topology."""
    data, lines = load_document(text, source)
    if not isinstance(data, list) or not data:
        raise TopologyFileError(
            source,
            "expected a list of topologies (Slurm topology.yaml), each with 'topology: NAME'",
            line=lines.line_of(()),
        )
    topologies = validate(_TopologyListDoc, data, source, lines).root
    index = _choose(topologies, source, name)
    chosen = topologies[index]
    if chosen.block is None:
        raise TopologyFileError(
            source,
            NEEDS_BLOCK,
            line=lines.line_of((index, chosen.kind)),
            field=format_path((index, chosen.kind)),
            got=f"{chosen.kind} topology {chosen.topology!r}",
        )
    blocks = tuple(
        BlockSpec(
            name=b.block,
            nodes=b.nodes,
            where=Where.of(lines, index, "block", "blocks", j),
            nodes_where=Where.of(lines, index, "block", "blocks", j, "nodes"),
        )
        for j, b in enumerate(chosen.block.blocks)
    )
    return BlockLayout(
        name=chosen.topology,
        sizes=chosen.block.block_sizes,
        sizes_where=Where.of(lines, index, "block", "block_sizes"),
        blocks=blocks,
    )


def _choose(topologies: tuple[_TopologyDoc, ...], source: str, name: str | None) -> int:
    names = [t.topology for t in topologies]
    if name is not None:
        if name not in names:
            raise TopologyFileError(
                source, f"expected a topology named {name!r} (found: {', '.join(names)})"
            )
        return names.index(name)
    for i, t in enumerate(topologies):
        if t.cluster_default:
            return i
    block_ones = [i for i, t in enumerate(topologies) if t.block is not None]
    if len(block_ones) == 1:
        return block_ones[0]
    if not block_ones:
        return 0  # the caller reports that it is not a block topology
    raise TopologyFileError(
        source,
        "expected one topology with 'cluster_default: true', or a name to choose among "
        f"the block topologies {', '.join(names[i] for i in block_ones)}",
    )


# --- topology.conf ---------------------------------------------------------------------------


def read_topology_conf(text: str, source: str, name: str | None) -> BlockLayout:
    """Read a classic Slurm `topology.conf` with `BlockName=` lines."""
    blocks: list[BlockSpec] = []
    sizes: tuple[int, ...] = ()
    sizes_where = Where()
    for number, raw in enumerate(text.splitlines(), start=1):
        params = _parameters(raw.split("#", 1)[0], source, number)
        if not params:
            continue
        first = params[0][0]
        if first == "blocksizes":
            if sizes_where.line is not None:
                raise TopologyFileError(
                    source,
                    f"expected one BlockSizes line (the first is on line {sizes_where.line})",
                    line=number,
                    field="BlockSizes",
                )
            sizes, sizes_where = _sizes(params, source, number), Where(number, "BlockSizes")
        elif first == "blockname":
            blocks.append(_block(params, source, number))
        else:
            raise TopologyFileError(
                source,
                "expected a line to start with BlockName= or BlockSizes=",
                line=number,
                field=_CONF_PARAMETERS[first],
            )
    if not blocks:
        raise TopologyFileError(source, "expected at least one 'BlockName=... Nodes=...' line")
    return BlockLayout(
        name=name or "block", sizes=sizes, sizes_where=sizes_where, blocks=tuple(blocks)
    )


def _parameters(
    line: str, source: str, number: int, allowed: dict[str, str] = _CONF_PARAMETERS
) -> list[tuple[str, str]]:
    """`BlockName=b1 Nodes=gb[1-2]` -> [("blockname", "b1"), ("nodes", "gb[1-2]")].

    Names are case-insensitive (as Slurm reads them); `allowed` maps each lowered name to the
    spelling used in errors.
    """
    params: list[tuple[str, str]] = []
    for token in line.split():
        key, sep, value = token.partition("=")
        lowered = key.lower()
        if not sep or not key:
            raise TopologyFileError(
                source, "expected Parameter=value", line=number, got=repr(token)
            )
        if lowered not in allowed:
            raise TopologyFileError(
                source,
                f"unknown parameter {key!r} (allowed: {', '.join(allowed.values())})",
                line=number,
                field=key,
            )
        if any(lowered == seen for seen, _ in params):
            raise TopologyFileError(
                source, f"expected {key} once on a line", line=number, field=key
            )
        if not value.strip('"'):
            raise TopologyFileError(source, "expected a value", line=number, field=key)
        params.append((lowered, value.strip('"')))
    return params


def _sizes(params: list[tuple[str, str]], source: str, number: int) -> tuple[int, ...]:
    if len(params) > 1:
        raise TopologyFileError(
            source,
            "expected BlockSizes alone on its line",
            line=number,
            field=_CONF_PARAMETERS[params[1][0]],
        )
    text = params[0][1]
    parts = text.split(",")
    if not all(p.strip().isascii() and p.strip().isdigit() and int(p) >= 1 for p in parts):
        raise TopologyFileError(
            source,
            "expected comma-separated positive block sizes such as 18,144",
            line=number,
            field="BlockSizes",
            got=repr(text),
        )
    return tuple(int(p) for p in parts)


def _block(params: list[tuple[str, str]], source: str, number: int) -> BlockSpec:
    values = dict(params)
    if "nodes" not in values:
        raise TopologyFileError(
            source,
            "expected Nodes=<hostlist> on a BlockName line",
            line=number,
            field="BlockName",
        )
    if "blocksizes" in values:
        raise TopologyFileError(
            source, "expected BlockSizes on its own line", line=number, field="BlockSizes"
        )
    nodes = _hostlist(values["nodes"], source, number, "Nodes")
    return BlockSpec(
        name=values["blockname"],
        nodes=nodes,
        where=Where(number, "BlockName"),
        nodes_where=Where(number, "Nodes"),
    )


def _hostlist(text: str, source: str, number: int, field: str, hint: str = "") -> tuple[str, ...]:
    try:
        return tuple(expand_hostlist(text))
    except ValueError as err:
        raise TopologyFileError(
            source, f"expected a hostlist expression: {err}{hint}", line=number, field=field
        ) from None


# --- topology/tree: topology.conf SwitchName lines, `scontrol show topology` -----------------


def read_topology_tree(text: str, source: str) -> tuple[SwitchSpec, ...]:
    """Read topology/tree lines: a classic `topology.conf` or `scontrol show topology` output.

    A line with `Level=` is read as scontrol prints it (an upper switch lists its child switches
    and, in `Nodes=`, every node below it); a line without is read as topology.conf has it (a
    switch has nodes or child switches, not both).
    """
    switches: list[SwitchSpec] = []
    first_line: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0]
        key = line.split("=", 1)[0].strip().lower()
        if key in ("blockname", "blocksizes"):
            raise TopologyFileError(
                source,
                "expected SwitchName= lines only: the file has SwitchName= lines "
                f"(topology/tree), and {_CONF_PARAMETERS[key]}= belongs to topology/block",
                line=number,
                field=_CONF_PARAMETERS[key],
            )
        params = _parameters(line, source, number, _TREE_PARAMETERS)
        if not params:
            continue
        if params[0][0] != "switchname":
            raise TopologyFileError(
                source,
                "expected a line to start with SwitchName=",
                line=number,
                field=_TREE_PARAMETERS[params[0][0]],
            )
        spec = _switch(dict(params), source, number)
        earlier = first_line.setdefault(spec.name, number)
        if earlier != number:
            raise TopologyFileError(
                source,
                f"expected a unique switch name; {spec.name!r} is already used at line {earlier}",
                line=number,
                field="SwitchName",
            )
        switches.append(spec)
    return tuple(switches)


def _switch(values: dict[str, str], source: str, number: int) -> SwitchSpec:
    level = _count(values, "level", source, number)
    _count(values, "linkspeed", source, number)  # checked, not used: hops are what matter
    has_nodes, has_switches = "nodes" in values, "switches" in values
    if not has_nodes and not has_switches:
        raise TopologyFileError(
            source,
            "expected Nodes=<hostlist> or Switches=<hostlist> on a SwitchName line",
            line=number,
            field="SwitchName",
        )
    if level is None and has_nodes and has_switches:
        raise TopologyFileError(
            source,
            "expected Nodes= or Switches= on a topology.conf SwitchName line, not both "
            "(a switch has nodes or child switches)",
            line=number,
            field="Switches",
        )
    if level == 0 and has_switches:
        raise TopologyFileError(
            source,
            "expected no Switches= on a Level=0 switch (level 0 is a leaf)",
            line=number,
            field="Switches",
        )
    if level is not None and level > 0 and not has_switches:
        raise TopologyFileError(
            source,
            f"expected Switches= on a Level={level} switch; {CUT_HINT}",
            line=number,
            field="SwitchName",
        )
    hint = f"; {CUT_HINT}" if level is not None else ""
    return SwitchSpec(
        name=values["switchname"],
        nodes=_hostlist(values["nodes"], source, number, "Nodes", hint) if has_nodes else (),
        switches=(
            _hostlist(values["switches"], source, number, "Switches", hint) if has_switches else ()
        ),
        line=number,
        level=level,
    )


def _count(values: dict[str, str], key: str, source: str, number: int) -> int | None:
    """A whole-number parameter (`Level=`, `LinkSpeed=`), or None when the line lacks it."""
    if key not in values:
        return None
    text = values[key]
    if not (text.isascii() and text.isdigit()):
        raise TopologyFileError(
            source,
            "expected a whole number",
            line=number,
            field=_TREE_PARAMETERS[key],
            got=repr(text),
        )
    return int(text)
