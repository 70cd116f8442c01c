"""Identifier types shared by every model: names with the rules of `_text` (read it first).

Ids are plain strings with a conservative alphabet: they become Kafka keys, DuckDB values,
file names and terminal cells, so nothing in them may need quoting. A compound id is built from
names: an event's `cluster/seq`, a policy's `<policy>:<seq>:<n>`, the GPU Manager's
`gpu_manager:<node>:<time>`; it has room for a name at its longest plus the rest.
"""

from typing import Annotated

from pydantic import StringConstraints

from rackplane.models._text import NameRule

ID_RULE = NameRule("an id", "id_invalid", 128)
COMPOUND_ID_RULE = NameRule("a compound id", "compound_id_invalid", 256)
ACTOR_RULE = NameRule("an actor", "actor_invalid", 128)
QUEUE_RULE = NameRule(
    "a queue name", "queue_invalid", 63, rest="A-Za-z0-9_.-", chars="letters, digits, _ . -"
)
COMMAND_TYPE_RULE = NameRule(
    "a command type",
    "command_type_invalid",
    64,
    first="A-Z",
    rest="A-Za-z",
    chars="ASCII letters, starting with a capital",
)

Id = Annotated[str, ID_RULE]
"""A name of something in a cluster (the cluster itself, a rack, a node, a pod, a job):
`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$`."""
ClusterId = Id
RackId = Id
NodeId = Id
PodId = Id
JobId = Id
DeviceId = Id
"""A GPU's UUID (`GPU-8c4a...`) or PCI bus id (`00000000:19:00.0`), as the driver gives it."""

QueueName = Annotated[str, QUEUE_RULE]
"""A queue's name (`PolicySettings.queues`): `^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`, so a
Kubernetes namespace or a Slurm account fits."""

CompoundId = Annotated[str, COMPOUND_ID_RULE]
"""An id made of names (see the module docstring): at most 256 characters."""
CommandId = CompoundId
EventId = CompoundId

Actor = Annotated[str, ACTOR_RULE]
"""Who: `operator:alice`, `user:research`, `policy:tas`, `gpu_manager`, `runtime`. The id
alphabet, so no actor can display as another (`operator:\\u202eecila` is refused)."""

CommandType = Annotated[str, COMMAND_TYPE_RULE]
"""A command's `type` (`CancelJob`), as events about a command record it."""

POD_REF_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$"
PodRef = Annotated[str, StringConstraints(pattern=POD_REF_PATTERN, max_length=317)]
"""A Kubernetes pod as `namespace/name` (a DNS label, a DNS subdomain): how a workload
manager's adapter names the processes of a job it started."""
