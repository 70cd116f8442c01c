"""The one error every topology source raises for a bad file.

Theory of operation: an operator who feeds rackplane a broken file needs three things to fix it:
which file, where in it (a line, a field path, or both) and what should have been there. Every
importer turns whatever went wrong (a YAML syntax error, a pydantic `ValidationError`, a bad
hostlist, a node in two racks) into a `TopologyFileError` carrying exactly that, and its `str()`
reads like a compiler message::

    site.yaml:12: racks[3].nodes: expected a hostlist expression or a list of node names (got 42)

It subclasses `ValueError`, so callers that only care that the input was bad need not import it.
"""

from __future__ import annotations


class TopologyFileError(ValueError):
    """A topology file (cluster file, Slurm topology, kubectl output) could not be used.

    Attributes:
        source: the file path, or the name the caller gave the text.
        line: 1-based line of the offending entry, when known.
        field: dotted path of the offending value (`racks[3].nodes`), when known.
        expected: what should have been there, in words (`expected an integer`,
            `unknown field 'podd' (allowed: id, pod, nodes, gpus_per_node)`).
        got: a short rendering of what was there instead, when that helps.
    """

    source: str
    line: int | None
    field: str | None
    expected: str | None
    got: str | None

    def __init__(
        self,
        source: str,
        expected: str | None = None,
        *,
        line: int | None = None,
        field: str | None = None,
        got: str | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.expected = expected
        self.got = got
        super().__init__(self._message())

    def _message(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        parts = [where]
        if self.field:
            parts.append(self.field)
        what = self.expected or "this file cannot be used"
        if self.got is not None:
            what = f"{what} (got {self.got})"
        parts.append(what)
        return ": ".join(parts)

    def __str__(self) -> str:
        return self._message()

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments do not survive the default exception pickling.
        return (_rebuild, (self.source, self.expected, self.line, self.field, self.got))


def _rebuild(
    source: str, expected: str | None, line: int | None, field: str | None, got: str | None
) -> TopologyFileError:
    return TopologyFileError(source, expected, line=line, field=field, got=got)
