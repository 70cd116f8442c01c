"""Slurm's nodes and jobs as the adapter sees them, and the job spec a job's comment asks for.

Theory of operation: the adapter reads slurmctld with its client commands (`sinfo --json` for
the nodes, `squeue -o` for the jobs of the partition rackplane manages, `scontrol show
topology`) and reduces each node and job to a small immutable view: what the rules in `plan`
read. Nothing here does I/O.

A job's spec (rules):
    - The job id in rackplane is `slurm/<job id>`; its size is the job's node count (`-N`),
      one rackplane node per Slurm node; its owner `slurm:<user>`. (The job's name is not
      read: squeue has no safe way to print two user texts, see `SQUEUE_FORMAT`.)
    - The rest comes from the job's comment, when it starts with `rackplane:`: `key=value`
      words separated by spaces or commas, keys as in `rackplane submit` and the Kubernetes
      annotations: `slice-size`, `kind`, `priority`, `min-nodes-per-slice`,
      `checkpoint-interval`, `expected-duration` (seconds or `90s`, `30m`, `2h`), `owner`,
      `queue`. Without a `queue`, the plan maps the job's Slurm account to the queue of that
      name, else the managed partition to the queue of its name, where the cluster has one.
      Example: `sbatch --hold -p gpu -N 32 --comment "rackplane: slice-size=16 kind=managed"`.
    - A comment that cannot be read refuses the job with a one-line reason (`SpecError`).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from pydantic import ValidationError

from rackplane.importers.hostlist import expand_hostlist
from rackplane.models import JobSpec
from rackplane.models._text import describe_error

JOB_PREFIX = "slurm/"
COMMENT_PREFIX = "rackplane:"
HELD = frozenset({"JobHeldUser", "JobHeldAdmin", "job requeued in held state"})
"""squeue's reasons of a held job (the last after `scontrol requeuehold`, 22.05)."""
ACTIVE = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "RESIZING", "STOPPED"})
"""Job states in which the job holds its nodes in Slurm."""
PENDING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})
FAILED = frozenset(
    {"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
DOWN_STATES = frozenset({"DOWN", "FAIL"})
"""Node base states in which a node cannot run work: rackplane's `failed` (as is the flag
FAIL). NOT_RESPONDING alone is not: slurmctld shows it for 0.5-1 s after every RESUME and for
SlurmdTimeout before it sets the node DOWN (`down*`), which is the failure. UNKNOWN (a node
slurmctld has not heard from since it started) and FUTURE are not failures either."""
DRAIN_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED"})

_FIELDS = (
    "kind",
    "priority",
    "slice-size",
    "min-nodes-per-slice",
    "checkpoint-interval",
    "expected-duration",
    "owner",
    "queue",
)
_INTS = {"priority", "slice-size", "min-nodes-per-slice"}
_DURATIONS = {"checkpoint-interval", "expected-duration"}
_UNITS = {"s": 1, "m": 60, "h": 3600}


class SpecError(ValueError):
    """The job's comment does not make a job spec."""


class SlurmNode(NamedTuple):
    """What the rules read of a Slurm node."""

    name: str
    state: str
    """The base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, ..."""
    flags: frozenset[str]
    """DRAIN, NOT_RESPONDING, ... (upper case)."""
    reason: str = ""

    @property
    def problems(self) -> tuple[str, ...]:
        """Why the node cannot run work, in words (empty: it can)."""
        out = []
        if self.state in DOWN_STATES or self.flags & {"FAIL", "FAILING"}:
            out.append(self.state.lower() if self.state in DOWN_STATES else "failing")
            if "NOT_RESPONDING" in self.flags:
                out.append("not responding")
        if out and self.reason:
            out.append(self.reason)
        return tuple(out)

    @property
    def drained(self) -> bool:
        return bool(self.flags & DRAIN_FLAGS)


class SlurmJob(NamedTuple):
    """What the rules read of a Slurm job (a line of `squeue`)."""

    id: str
    state: str
    """Upper case: PENDING, RUNNING, COMPLETED, ..."""
    node_count: int
    reason: str
    nodes: tuple[str, ...]
    """The nodes it runs on (empty while pending)."""
    required: tuple[str, ...]
    """Its ReqNodeList: the nodes it must run on (rackplane sets exactly the placed ones)."""
    user: str
    comment: str
    started: datetime | None = None
    """When its current run started (UTC; None while pending)."""
    account: str = ""
    """Its Slurm account (`%a`)."""

    @property
    def job(self) -> str:
        """Its job id in rackplane."""
        return job_id(self.id)

    @property
    def held(self) -> bool:
        return self.state in PENDING and self.reason in HELD

    @property
    def pending(self) -> bool:
        return self.state in PENDING

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def job_id(slurm_id: str) -> str:
    """The rackplane job of Slurm job `slurm_id`."""
    return f"{JOB_PREFIX}{slurm_id}"


def job_spec(job: SlurmJob) -> JobSpec:
    """The job spec Slurm job `job` asks for (see the module docstring).

    Raises:
        SpecError: the comment cannot be read, or the spec is invalid.
    """
    values: dict[str, object] = {}
    for name, text in _comment_fields(job.comment).items():
        key = name.replace("-", "_")
        if name in _INTS:
            if not re.fullmatch(r"-?\d{1,7}", text):
                raise SpecError(f"{name}: expected a whole number, got {text!r}")
            values[key] = int(text)
        elif name in _DURATIONS:
            values[key] = _duration(name, text)
        else:
            values[key] = text
    values.setdefault("owner", f"slurm:{job.user}")
    try:
        return JobSpec(id=job.job, nodes=job.node_count, **values)
    except ValidationError as err:
        raise SpecError(describe_error(err)) from None


def _comment_fields(comment: str) -> dict[str, str]:
    text = comment.strip()
    if not text.lower().startswith(COMMENT_PREFIX):
        return {}
    out: dict[str, str] = {}
    for word in re.split(r"[\s,]+", text[len(COMMENT_PREFIX) :].strip()):
        if not word:
            continue
        key, sep, value = word.partition("=")
        if not sep or not value:
            raise SpecError(f"comment word {word!r}: expected key=value")
        if key not in _FIELDS:
            raise SpecError(f"comment key {key!r}: expected one of {', '.join(_FIELDS)}")
        out[key] = value
    return out


def _duration(name: str, text: str) -> timedelta:
    m = re.fullmatch(r"(\d{1,9})([smh]?)", text)
    if m is None or int(m.group(1)) == 0:
        raise SpecError(f"{name}: expected a positive duration such as 900, 90s, 30m, 2h")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2) or "s"])


# -- reading the client commands' output ---------------------------------------------------------

SQUEUE_FIELDS = ("%i", "%T", "%D", "%r", "%N", "%n", "%u", "%a", "%S", "%k")
"""What `squeue -o` prints of a job, in `SlurmJob`'s order. The one user text, the comment,
comes last, so a separator inside it stays in it (sbatch takes any byte in a comment); the
job's name is not printed, as a second user text could shift the fields."""
FIELD_SEP = "\x1f"
RECORD_END = "\x1e"
SQUEUE_FORMAT = FIELD_SEP.join(SQUEUE_FIELDS) + RECORD_END
"""squeue prints both control characters as they are (22.05); a comment may hold `|`, tabs and
newlines, which a plain `|` format would split. A comment holding the record end cuts its
record there: the rest does not parse and is reported, the job read with its comment cut."""


class ParseError(ValueError):
    """A client command printed something the adapter cannot read."""


def parse_squeue(text: str) -> tuple[list[SlurmJob], list[str]]:
    """The jobs of `squeue -h -o SQUEUE_FORMAT` (run with TZ=UTC), and one line per record
    that could not be read."""
    jobs: list[SlurmJob] = []
    bad: list[str] = []
    for raw in text.split(RECORD_END):
        record = raw.removeprefix("\n")
        if not record.strip():
            continue
        parts = record.split(FIELD_SEP, len(SQUEUE_FIELDS) - 1)
        try:
            if len(parts) != len(SQUEUE_FIELDS):
                raise ParseError(f"{len(parts)} fields, expected {len(SQUEUE_FIELDS)}")
            jid, state, count, reason, nodes, required, user, account, start, comment = parts
            jobs.append(
                SlurmJob(
                    id=jid.strip(),
                    state=state.strip().upper(),
                    node_count=int(count),
                    reason=reason.strip(),
                    nodes=_hosts(nodes),
                    required=_hosts(required),
                    user=user.strip(),
                    comment="" if comment == "(null)" else comment,
                    started=_time(start),
                    account=account.strip(),
                )
            )
        except ValueError as err:
            bad.append(f"{record[:80]!r}: {err}")
    return jobs, bad


def parse_sinfo_json(text: str, *, partition: str | None = None) -> dict[str, SlurmNode]:
    """The nodes of `sinfo --json` (22.05: `nodes[]` with `name`, `state`, `state_flags`,
    `reason`, `partitions`), those of `partition` only when given.

    Raises:
        ParseError: not the JSON sinfo prints.
    """
    try:
        doc = json.loads(text)
        raw_nodes = doc["nodes"]
        out: dict[str, SlurmNode] = {}
        for n in raw_nodes:
            if partition is not None and partition not in (n.get("partitions") or ()):
                continue
            name = str(n["name"])
            out[name] = SlurmNode(
                name=name,
                state=str(n.get("state") or "unknown").upper(),
                flags=frozenset(str(f).upper() for f in n.get("state_flags") or ()),
                reason=str(n.get("reason") or ""),
            )
        return out
    except (ValueError, KeyError, TypeError) as err:
        raise ParseError(f"sinfo --json printed something else: {err}") from None


def _hosts(expression: str) -> tuple[str, ...]:
    text = expression.strip()
    if not text or text in ("(null)", "N/A"):
        return ()
    return tuple(expand_hostlist(text))


def _time(text: str) -> datetime | None:
    text = text.strip()
    if not text or text in ("N/A", "Unknown", "None", "(null)"):
        return None
    return datetime.fromisoformat(text).replace(tzinfo=UTC)
