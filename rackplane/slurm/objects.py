"""Slurm's nodes and jobs as the adapter sees them, and the job spec a job's comment asks for.

Theory of operation: the adapter reads slurmctld with its client commands (`sinfo --json` for
the nodes, `squeue -o` for the jobs of the partition rackplane manages, `scontrol show
topology`) and reduces each node and job to a small immutable view: what the rules in `plan`
read. Nothing here does I/O.

A job's spec (rules):
    - The job id in rackplane is `slurm/<job id>`; its size is the job's node count (`-N`),
      one rackplane node per Slurm node; its owner `slurm:<user>`; its name the job's name
      when that is a valid label.
    - The rest comes from the job's comment, when it starts with `rackplane:`: `key=value`
      words separated by spaces or commas, keys as in `rackplane submit` and the Kubernetes
      annotations: `slice-size`, `kind`, `priority`, `min-nodes-per-slice`,
      `checkpoint-interval`, `expected-duration` (seconds or `90s`, `30m`, `2h`), `owner`.
      Example: `sbatch --hold -p gpu -N 32 --comment "rackplane: slice-size=16 kind=managed"`.
    - A comment that cannot be read refuses the job with a one-line reason (`SpecError`).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import NamedTuple

from pydantic import ValidationError

from rackplane.models import JobSpec
from rackplane.models._text import describe_error

JOB_PREFIX = "slurm/"
COMMENT_PREFIX = "rackplane:"
HELD = frozenset({"JobHeldUser", "JobHeldAdmin"})
"""squeue's reasons of a held job."""
ACTIVE = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "RESIZING", "STOPPED"})
"""Job states in which the job holds its nodes in Slurm."""
PENDING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})
FAILED = frozenset(
    {"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
DOWN_STATES = frozenset({"DOWN", "FAIL"})
"""Node base states in which a node cannot run work: rackplane's `failed` (as are the flags
FAIL and NOT_RESPONDING). UNKNOWN (a node slurmctld has not heard from since it started) and
FUTURE are not failures."""
DRAIN_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED"})

_FIELDS = (
    "kind",
    "priority",
    "slice-size",
    "min-nodes-per-slice",
    "checkpoint-interval",
    "expected-duration",
    "owner",
)
_INTS = {"priority", "slice-size", "min-nodes-per-slice"}
_DURATIONS = {"checkpoint-interval", "expected-duration"}
_UNITS = {"s": 1, "m": 60, "h": 3600}
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")


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
    name: str
    comment: str
    started: datetime | None = None
    """When its current run started (UTC; None while pending)."""

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
    if job.name and _LABEL.match(job.name):
        values.setdefault("name", job.name)
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
