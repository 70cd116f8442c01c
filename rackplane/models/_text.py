"""The text rules: every string of every message has a length limit and a charset.

Theory of operation: strings in messages are of two kinds.

- *Names*: ids (clusters, racks, nodes, jobs, commands, events), actors, command types. They
  become Kafka keys, DuckDB values, file names and terminal cells, and people compare them by
  eye ("operator:alice"), so they hold only ASCII letters, digits and `. _ : / @ + -`, start
  with a letter or digit and have a maximum length (`NameRule`). Nothing in them can reorder,
  hide or imitate another character.
- *Free text*: reasons, causes, notes, explanations, job names, GPU model strings. Any Unicode
  that prints, plus newline and tab, up to a maximum length (`FreeText`). Refused: NUL and the
  other control characters (CR and ESC included: they move a terminal's cursor), bidi controls
  (they reorder what follows: `operator:\\u202eecila` displays as "operator:alice"), zero-width
  and the other format characters, line and paragraph separators, lone surrogates (they cannot
  be encoded as UTF-8, so a message holding one could be built but never sent) and the
  noncharacters U+FFFE and U+FFFF.

The refused characters are a table written here (`_REFUSED`, Unicode 15.1), not the running
Python's Unicode database: a message valid on one Python is valid on every other, and a log
outlives the versions of its readers.

Both rules are patterns checked inside pydantic's core (a message is mostly such strings, and
bulk decoding must stay cheap: a validator in Python cost ~0.2 us a field), with a readable
error in place of the pattern ("expected an actor: ASCII letters, digits and ..."). The exact
culprit is worded when an error is shown: `describe_error` turns any `ValidationError` into
one line such as "actor: contains a bidi control character (U+202E) at position 9 (expected
an actor: ...)". Lengths count code points, as pydantic does; positions count from 0.

`printable` is the one function here that never fails: it escapes refused characters as
`\\uXXXX` and truncates with a marker, for records built from bytes an attacker chose
(`Rejection`).
"""

import bisect
import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, ValidationError
from pydantic_core import CoreSchema, ErrorDetails, core_schema

_NUL, _CONTROL, _BIDI, _ZERO_WIDTH = (
    "a NUL character",
    "a control character",
    "a bidi control character",
    "a zero-width character",
)
_FORMAT, _SEPARATOR, _SURROGATE, _NONCHARACTER = (
    "a format character",
    "a line or paragraph separator",
    "a lone surrogate",
    "a noncharacter",
)

_REFUSED: tuple[tuple[int, int, str], ...] = (
    # (first, last, what): every control (Cc) and format (Cf) character of Unicode 15.1 but
    # tab and newline, the line and paragraph separators (Zl, Zp), the surrogates (Cs) and
    # U+FFFE/U+FFFF. Sorted, disjoint. A test checks it covers what Python's database says.
    (0x0000, 0x0000, _NUL),
    (0x0001, 0x0008, _CONTROL),
    (0x000B, 0x001F, _CONTROL),  # U+0009 (tab) and U+000A (newline) are text
    (0x007F, 0x009F, _CONTROL),  # DEL and the C1 controls
    (0x00AD, 0x00AD, _FORMAT),  # soft hyphen: invisible
    (0x0600, 0x0605, _FORMAT),
    (0x061C, 0x061C, _BIDI),  # Arabic letter mark
    (0x06DD, 0x06DD, _FORMAT),
    (0x070F, 0x070F, _FORMAT),
    (0x0890, 0x0891, _FORMAT),
    (0x08E2, 0x08E2, _FORMAT),
    (0x180E, 0x180E, _ZERO_WIDTH),  # Mongolian vowel separator
    (0x200B, 0x200D, _ZERO_WIDTH),  # zero-width space, non-joiner, joiner
    (0x200E, 0x200F, _BIDI),  # left-to-right and right-to-left marks
    (0x2028, 0x2029, _SEPARATOR),
    (0x202A, 0x202E, _BIDI),  # embeddings, pop, overrides
    (0x2060, 0x2060, _ZERO_WIDTH),  # word joiner
    (0x2061, 0x2064, _FORMAT),  # invisible operators
    (0x2066, 0x2069, _BIDI),  # isolates
    (0x206A, 0x206F, _FORMAT),  # deprecated shaping controls
    (0xD800, 0xDFFF, _SURROGATE),
    (0xFEFF, 0xFEFF, _ZERO_WIDTH),  # byte order mark (zero-width no-break space)
    (0xFFF9, 0xFFFB, _FORMAT),  # interlinear annotation
    (0xFFFE, 0xFFFF, _NONCHARACTER),
    (0x110BD, 0x110BD, _FORMAT),
    (0x110CD, 0x110CD, _FORMAT),
    (0x13430, 0x1343F, _FORMAT),  # Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3, _FORMAT),  # shorthand format controls
    (0x1D173, 0x1D17A, _FORMAT),  # musical symbol format controls
    (0xE0001, 0xE0001, _FORMAT),  # language tag
    (0xE0020, 0xE007F, _FORMAT),  # tag characters: invisible ASCII
)
_FIRSTS = [first for first, _, _ in _REFUSED]


def _regex_class(ranges: tuple[tuple[int, int, str], ...]) -> str:
    """The inside of a regex class for `ranges`, in a syntax both Python's and Rust's regex
    engines read (`\\U0000202e`)."""
    return "".join(f"\\U{a:08x}" + ("" if a == b else f"-\\U{b:08x}") for a, b, _ in ranges)


_REFUSED_RE = re.compile(f"[{_regex_class(_REFUSED)}]")
_TEXT_PATTERN = f"^[^{_regex_class(tuple(r for r in _REFUSED if r[2] != _SURROGATE))}]*$"
"""Free text as one pattern for pydantic's core (surrogates never reach its Rust regex)."""


def refused(char: str) -> str | None:
    """What kind of refused character `char` is ("a bidi control character"), or None."""
    cp = ord(char)
    i = bisect.bisect_right(_FIRSTS, cp) - 1
    if i >= 0 and cp <= _REFUSED[i][1]:
        return _REFUSED[i][2]
    return None


def _named(char: str) -> str:
    """`char` for an error message: its kind and code point, never the character if unsafe."""
    code = f"U+{ord(char):04X}"
    kind = refused(char)
    if kind is not None:
        return f"{kind} ({code})"
    if char == " ":
        return f"a space ({code})"
    if not char.isprintable():
        return f"a non-printing character ({code})"
    return f"{char!r} ({code})"


def text_problem(value: str) -> str | None:
    """Why `value` is not free text ("contains a NUL character (U+0000) at position 3"), or None.

    Length is not checked here (the field's limit is).
    """
    found = _REFUSED_RE.search(value)
    if found is None:
        return None
    return f"contains {_named(found.group())} at position {found.start()}"


LABEL_MAX, REASON_MAX, NOTE_MAX = 200, 2_000, 4_000
"""The lengths of `Label`, `Reason` and `Note`."""


@dataclass(frozen=True)
class FreeText:
    """Annotation: free text of at most `max_length` characters (see the module docstring)."""

    max_length: int

    @property
    def wanted(self) -> str:
        """What a valid value looks like, for errors."""
        return (
            f"expected text of at most {self.max_length:,} characters without control, bidi, "
            "zero-width or other format characters (newline and tab are fine)"
        )

    def culprit(self, value: str) -> str | None:
        """What in `value` breaks this rule ("contains a NUL character (U+0000) at position 3")."""
        if len(value) > self.max_length:
            return f"has {len(value):,} characters; at most {self.max_length:,} are allowed"
        return text_problem(value)

    def problem(self, value: str) -> str | None:
        """What a user reads: the culprit says it all."""
        return self.culprit(value)

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.custom_error_schema(
            core_schema.str_schema(max_length=self.max_length, pattern=_TEXT_PATTERN),
            custom_error_type="text_invalid",
            custom_error_message=self.wanted,
            custom_error_context={"max_length": self.max_length},
        )


@dataclass(frozen=True)
class NameRule:
    """Annotation: a name (see the module docstring), called `what` in errors ("an actor")."""

    what: str
    error_type: str
    max_length: int
    first: str = "A-Za-z0-9"
    """The characters a name may start with, as the inside of a regex class."""
    rest: str = "A-Za-z0-9._:/@+-"
    """The characters that may follow it."""
    chars: str = "ASCII letters, digits and . _ : / @ + -, starting with a letter or digit"
    """`first` and `rest` in words."""

    def __post_init__(self) -> None:
        _RULES[self.error_type] = self

    @property
    def pattern(self) -> str:
        """The whole rule as one regex."""
        return f"^[{self.first}][{self.rest}]{{0,{self.max_length - 1}}}$"

    @property
    def wanted(self) -> str:
        """What a valid value looks like, for errors."""
        return f"expected {self.what}: {self.chars}, at most {self.max_length} characters"

    def culprit(self, value: str) -> str | None:
        """What in `value` breaks this rule ("contains a space (U+0020) at position 8")."""
        if not value:
            return "is empty"
        if len(value) > self.max_length:
            return f"has {len(value):,} characters"
        if re.match(f"[{self.first}]", value) is None:
            return f"starts with {_named(value[0])}"
        other = re.search(f"[^{self.rest}]", value)
        if other is not None:
            return f"contains {_named(other.group())} at position {other.start()}"
        return None

    def problem(self, value: str) -> str | None:
        """What a user reads: the culprit and the rule ("is empty (expected an actor: ...)")."""
        culprit = self.culprit(value)
        return None if culprit is None else f"{culprit} ({self.wanted})"

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.custom_error_schema(
            core_schema.str_schema(pattern=self.pattern),
            custom_error_type=self.error_type,
            custom_error_message=self.wanted,
        )


_RULES: dict[str, NameRule] = {}
"""Each name rule by the type of its errors (filled as rules are made)."""


def rule_of(error: ErrorDetails) -> NameRule | FreeText | None:
    """The rule a pydantic error comes from (an id's, a text's), if it comes from one."""
    kind = error.get("type", "")
    if kind == "text_invalid":
        return FreeText(int((error.get("ctx") or {}).get("max_length", NOTE_MAX)))
    return _RULES.get(kind)


Label = Annotated[str, FreeText(LABEL_MAX)]
"""A short human string: a job's name, a GPU model ("NVIDIA GB200"), a topic, an agent."""
Reason = Annotated[str, FreeText(REASON_MAX)]
"""A command's free text: reasons, causes, notes, explanations."""
Note = Annotated[str, FreeText(NOTE_MAX)]
"""An event's free text: room for a command's reason and the controller's words around it."""

_MARKER_ROOM = 48


def printable(value: str, max_length: int) -> str:
    """`value` as valid free text of at most `max_length` characters. Never raises.

    Refused characters become `\\uXXXX` (`\\UXXXXXXXX` above U+FFFF); a value too long is cut
    and ends with a marker that gives its original length. An escape is never cut in half.
    """
    max_length = max(max_length, _MARKER_ROOM)
    head = value[: max_length + 1]  # every character becomes at least one: the rest is cut
    escaped = _REFUSED_RE.sub(_escape, head)
    if len(escaped) <= max_length and len(head) == len(value):
        return escaped
    marker = f"...[truncated: {len(value):,} characters]"
    budget = max_length - len(marker)
    out: list[str] = []
    pos = 0
    for found in _REFUSED_RE.finditer(head):
        literal = head[pos : found.start()]
        if len(literal) >= budget:
            return "".join(out) + literal[:budget] + marker
        code = _escape(found)
        if len(literal) + len(code) > budget:
            return "".join(out) + literal + marker
        out += (literal, code)
        budget -= len(literal) + len(code)
        pos = found.end()
    return "".join(out) + head[pos:][:budget] + marker


def _escape(found: re.Match[str]) -> str:
    cp = ord(found.group())
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def describe_error(err: ValidationError) -> str:
    """One line for a user: the first error with its location, what exactly is wrong with a
    name or a text ("actor: contains a bidi control character (U+202E) at position 9
    (expected an actor: ...)"), and how many more errors there were. Safe to print: refused
    characters come out escaped."""
    first = err.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "message"
    message = str(first.get("msg", "invalid"))
    rule = rule_of(first)
    value = first.get("input")
    if rule is not None and isinstance(value, str):
        message = rule.problem(value) or message
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return printable(f"{where}: {message}{more}", 2_000)
