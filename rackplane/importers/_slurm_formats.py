"""Read Slurm's two block-topology files into one neutral `BlockLayout`.

Theory of operation: `topology.yaml` (Slurm 25.05+) is a list of named topologies, each one of
block, tree or flat; `topology.conf` (classic) is `BlockName=... Nodes=...` lines plus an
optional `BlockSizes=` line. Both say the same thing for the block plugin: base blocks (NVLink
domains) in file order, with aggregation sizes. Each reader checks its own syntax, picks the
block topology, and returns the blocks with the place each was written, so `slurm.py` can
group them into pods without caring which file they came from.
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
_TREE_PARAMETERS = frozenset({"switchname", "switches", "linkspeed"})


@dataclass(frozen=True, slots=True)
class BlockSpec:
    """One base block: a name, its nodes, where each was written."""

    name: str
    nodes: tuple[str, ...]
    where: Where
    nodes_where: Where


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


def _parameters(line: str, source: str, number: int) -> list[tuple[str, str]]:
    """`BlockName=b1 Nodes=gb[1-2]` -> [("blockname", "b1"), ("nodes", "gb[1-2]")]."""
    params: list[tuple[str, str]] = []
    for token in line.split():
        key, sep, value = token.partition("=")
        lowered = key.lower()
        if not sep or not key:
            raise TopologyFileError(
                source, "expected Parameter=value", line=number, got=repr(token)
            )
        if lowered in _TREE_PARAMETERS:
            raise TopologyFileError(
                source, NEEDS_BLOCK, line=number, field=key, got="a topology/tree line"
            )
        if lowered not in _CONF_PARAMETERS:
            raise TopologyFileError(
                source,
                f"unknown parameter {key!r} (allowed: {', '.join(_CONF_PARAMETERS.values())})",
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
    try:
        nodes = tuple(expand_hostlist(values["nodes"]))
    except ValueError as err:
        raise TopologyFileError(
            source, f"expected a hostlist expression: {err}", line=number, field="Nodes"
        ) from None
    return BlockSpec(
        name=values["blockname"],
        nodes=nodes,
        where=Where(number, "BlockName"),
        nodes_where=Where(number, "Nodes"),
    )
