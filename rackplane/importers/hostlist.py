"""Slurm hostlist expressions: `gb[001-003,007],login1` <-> a list of node names.

Theory of operation: an expression is a comma-separated list of items (commas inside brackets
do not separate). An item is literal text with zero or more bracket groups; each group is a
comma-separated list of numbers or `lo-hi` ranges, and the item expands to the cartesian
product of its groups, first group slowest (`r[1-2]n[01-02]` -> r1n01 r1n02 r2n01 r2n02). A
range keeps the zero padding of its lower bound: `[08-10]` -> 08 09 10, `[8-10]` -> 8 9 10.

`compress_hostlist` is the inverse for readable output. It walks the names in order and folds
a run of names that share a prefix and a padding width into one bracket group, consecutive
numbers into `lo-hi` ranges. It never reorders, so `expand_hostlist(compress_hostlist(x)) == x`
for any list of names it accepts (names without brackets, commas or whitespace).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

MAX_NAMES = 1_000_000
"""An expression expanding to more names than this is refused (`gb[0-999999999]` is a typo)."""

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$", re.DOTALL)
_FORBIDDEN_IN_NAMES = frozenset("[],")


def expand_hostlist(expression: str) -> list[str]:
    """Expand a Slurm hostlist expression into node names, in order.

    Args:
        expression: e.g. `gb[001-003,007],login1` or `r[1-2]n[01-02]`.

    Returns:
        The names, e.g. `["gb001", "gb002", "gb003", "gb007", "login1"]`. Duplicates are kept.

    Raises:
        ValueError: the expression is empty, has unbalanced or nested brackets, an empty
            name or group, a range that is not numeric or runs backwards, or expands to more
            than `MAX_NAMES` names. The message quotes the expression and names the problem.
    """
    if not expression.strip():
        raise ValueError("empty hostlist expression")
    names: list[str] = []
    for item in _split_items(expression):
        for name in _expand_item(item, expression):
            names.append(name)
            if len(names) > MAX_NAMES:
                raise ValueError(f"more than {MAX_NAMES:,} names in hostlist {expression!r}")
    return names


def compress_hostlist(names: Iterable[str]) -> str:
    """Write node names as a compact hostlist expression, keeping their order.

    Args:
        names: node names, e.g. `["gb001", "gb002", "gb003", "gb007", "login1"]`.

    Returns:
        An expression such as `gb[001-003,007],login1`; `expand_hostlist` gives the names
        back in the same order.

    Raises:
        ValueError: `names` is empty, or a name is empty or holds a bracket, a comma or
            whitespace (it could not be read back).
    """
    groups: list[_Group] = []
    for name in names:
        _check_name(name)
        match = _TRAILING_NUMBER.match(name)
        if match is None:
            groups.append(_Group(prefix=name, width=0))
            continue
        prefix, digits = match.group(1), match.group(2)
        number = int(digits)
        last = groups[-1] if groups else None
        if last is not None and last.accepts(prefix, digits):
            last.add(number)
        else:
            group = _Group(prefix=prefix, width=len(digits) if digits[0] == "0" else 1)
            group.add(number)
            groups.append(group)
    if not groups:
        raise ValueError("cannot compress an empty list of names")
    return ",".join(g.render() for g in groups)


@dataclass
class _Group:
    """Names `prefix<n>` for the numbers in `ranges`, each written zero-padded to `width`.

    `width == 0` marks a name without a trailing number: the prefix is the whole name.
    """

    prefix: str
    width: int
    ranges: list[list[int]] = field(default_factory=list)

    def accepts(self, prefix: str, digits: str) -> bool:
        # A name joins only if writing its number at this width gives back its exact digits.
        return (
            self.width > 0
            and prefix == self.prefix
            and str(int(digits)).zfill(self.width) == digits
        )

    def add(self, number: int) -> None:
        if self.ranges and self.ranges[-1][1] + 1 == number:
            self.ranges[-1][1] = number
        else:
            self.ranges.append([number, number])

    def render(self) -> str:
        if self.width == 0:
            return self.prefix
        parts = [
            f"{lo:0{self.width}d}" if lo == hi else f"{lo:0{self.width}d}-{hi:0{self.width}d}"
            for lo, hi in self.ranges
        ]
        if len(parts) == 1 and "-" not in parts[0]:
            return f"{self.prefix}{parts[0]}"
        return f"{self.prefix}[{','.join(parts)}]"


def _check_name(name: str) -> None:
    if not name:
        raise ValueError("cannot compress an empty node name")
    bad = _FORBIDDEN_IN_NAMES.intersection(name)
    if bad or any(c.isspace() for c in name):
        raise ValueError(
            f"node name {name!r} cannot be written in a hostlist: "
            "it holds a bracket, a comma or whitespace"
        )


def _split_items(expression: str) -> list[str]:
    """Split at commas outside brackets; check brackets balance and do not nest."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, char in enumerate(expression):
        if char == "[":
            if depth:
                raise ValueError(f"nested '[' at position {i + 1} in hostlist {expression!r}")
            depth = 1
        elif char == "]":
            if not depth:
                raise ValueError(f"unbalanced ']' at position {i + 1} in hostlist {expression!r}")
            depth = 0
        elif char == "," and not depth:
            items.append(expression[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' (no closing ']') in hostlist {expression!r}")
    items.append(expression[start:])
    stripped = [item.strip() for item in items]
    if any(not item for item in stripped):
        raise ValueError(f"empty name between commas in hostlist {expression!r}")
    return stripped


def _expand_item(item: str, expression: str) -> Iterable[str]:
    """Expand one comma-free item: literal text and bracket groups, as a cartesian product."""
    # re.split with a capturing group alternates literal, group, literal, ..., literal.
    pieces = re.split(r"\[([^\]]*)\]", item)
    literals = pieces[0::2]
    groups = [_expand_group(g, expression) for g in pieces[1::2]]
    for literal in literals:
        if any(c.isspace() for c in literal):
            raise ValueError(f"whitespace inside the name {item!r} in hostlist {expression!r}")
    if not groups:
        return [item]
    return (
        "".join(itertools.chain.from_iterable(itertools.zip_longest(literals, combo, fillvalue="")))
        for combo in itertools.product(*groups)
    )


def _expand_group(group: str, expression: str) -> list[str]:
    """Expand the inside of one bracket group: `001-003,007` -> 001 002 003 007."""
    if not group.strip():
        raise ValueError(f"empty brackets '[]' in hostlist {expression!r}")
    numbers: list[str] = []
    for part in group.split(","):
        match = _RANGE.match(part.strip())
        if match is None:
            raise ValueError(
                f"{part.strip()!r} in brackets is not a number or a lo-hi range "
                f"in hostlist {expression!r}"
            )
        lo_text, hi_text = match.group(1), match.group(2)
        if hi_text is None:
            numbers.append(lo_text)
            continue
        lo, hi = int(lo_text), int(hi_text)
        if lo > hi:
            raise ValueError(f"range {lo_text}-{hi_text} runs backwards in hostlist {expression!r}")
        if hi - lo >= MAX_NAMES:
            raise ValueError(
                f"range {lo_text}-{hi_text} is longer than {MAX_NAMES:,} names "
                f"in hostlist {expression!r}"
            )
        width = len(lo_text)
        numbers.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
    return numbers
