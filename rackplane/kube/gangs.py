"""A gang of pods as a rackplane job: its id and its `JobSpec`, read from the pods' metadata.

Rules of this file:
    - A gang is the pods of one namespace with the same `rackplane.io/job` label; its job id is
      `<namespace>/<label value>`.
    - The spec comes from the gang's first pod by name: each field from its annotation, else
      its label, `rackplane.io/<field>`. `nodes` is required (one pod per node, so it is the
      gang's size); the rest default as `JobSpec` does; the owner defaults to `kube:<namespace>`.
    - A PodGroup's gang (`objects.GroupView`): each field from the group's annotation first;
      `nodes` defaults to the group's size (the Workload API's gang `minCount`, the others'
      `minMember`).
    - Durations (`checkpoint-interval`, `expected-duration`) are seconds or `90s`, `30m`, `2h`.
    - The queue (`rackplane.io/queue`) falls back to Kueue's `kueue.x-k8s.io/queue-name` label
      (the LocalQueue the pods name): a cluster that names its leaf queues after its
      LocalQueues takes Kueue-labelled workloads as they are. Without either, the plan maps
      the gang's namespace to the queue of that name, where the cluster has one.
    - A value that cannot be read refuses the gang with a one-line reason (`GangError`); the
      adapter writes it on the pods (`rackplane.io/problem`) and submits nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta

from pydantic import ValidationError

from rackplane.kube.objects import GROUP, WORKLOAD_API, GroupView, PodView
from rackplane.models import JobSpec
from rackplane.models._text import describe_error

FIELDS = (
    "nodes",
    "kind",
    "priority",
    "slice-size",
    "min-nodes-per-slice",
    "checkpoint-interval",
    "expected-duration",
    "owner",
    "name",
    "queue",
)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""Kueue's label naming a workload's LocalQueue."""
_INTS = {"nodes", "priority", "slice-size", "min-nodes-per-slice"}
_DURATIONS = {"checkpoint-interval", "expected-duration"}
_UNITS = {"s": 1, "m": 60, "h": 3600}


class GangError(ValueError):
    """The gang's metadata does not make a job spec."""


def job_id(namespace: str, label: str) -> str:
    """The rackplane job of a gang."""
    return f"{namespace}/{label}"


def gang_spec(pod: PodView, group: GroupView | None = None) -> JobSpec:
    """The job spec a gang's first pod (and its PodGroup, if any) asks for.

    Raises:
        GangError: a field is missing or cannot be read; the spec is invalid.
    """
    raw = _fields(pod.annotations, pod.labels)
    if group is not None:
        raw |= _fields(group.annotations, {})
        if "nodes" not in raw and group.min_count is not None:
            raw["nodes"] = str(group.min_count)
    if "queue" not in raw and KUEUE_QUEUE_LABEL in pod.labels:
        raw["queue"] = pod.labels[KUEUE_QUEUE_LABEL]
    if "nodes" not in raw:
        raise GangError(
            f"{GROUP}/nodes is missing: say how many nodes (pods) the gang has"
            + (
                (
                    " (or give its PodGroup a gang minCount)"
                    if group.api == WORKLOAD_API.version
                    else " (or give its PodGroup a minMember)"
                )
                if group is not None
                else ""
            )
        )
    values: dict[str, object] = {}
    for name, text in raw.items():
        key = name.replace("-", "_")
        if name in _INTS:
            if not re.fullmatch(r"-?\d{1,7}", text.strip()):
                raise GangError(f"{GROUP}/{name}: expected a whole number, got {text!r}")
            values[key] = int(text)
        elif name in _DURATIONS:
            values[key] = _duration(name, text)
        else:
            values[key] = text
    values.setdefault("owner", f"kube:{pod.key.namespace}")
    try:
        return JobSpec(id=job_id(pod.key.namespace, pod.job), **values)
    except ValidationError as err:
        raise GangError(describe_error(err)) from None


def _fields(annotations: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in FIELDS:
        key = f"{GROUP}/{name}"
        value = annotations.get(key, labels.get(key))
        if value is not None:
            out[name] = value
    return out


def _duration(name: str, text: str) -> timedelta:
    m = re.fullmatch(r"\s*(\d{1,9})\s*([smh]?)\s*", text)
    if m is None or int(m.group(1)) == 0:
        raise GangError(f"{GROUP}/{name}: expected a positive duration such as 900, 90s, 30m, 2h")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2) or "s"])
