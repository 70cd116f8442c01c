"""Who may write what on the broker: the Kafka ACLs of one rackplane deployment.

Each component has a principal of its own (docs/OPERATIONS.md, "The broker's ACLs"):

| principal  | may                                                                           |
|------------|-------------------------------------------------------------------------------|
| `worker`   | read and write commands, events, rejected and snapshots; read telemetry;      |
|            | create and check rackplane's topics; Faust's own topics and consumer groups   |
|            | (`<app_id>*`); transactions (exactly-once mode)                               |
| `client`   | write commands; read events and rejected (the CLI waits for its outcome) and  |
|            | snapshots (the read commands start from the newest checkpoint)                |
| `exporter` | write telemetry                                                               |

With `allow.everyone.if.no.acl.found=false` (Kafka's default) everything else is refused: a
client cannot append to the log, an exporter cannot send commands, nobody but the workers
writes the snapshots. `acls` is the one list: `rackplane acls` prints it as `kafka-acls.sh`
commands, and the ACL tier (`tests/acl`) applies those very arguments to a real Kafka with
its `AclCommand` and checks each principal is refused everywhere else.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Resource = Literal["topic", "group", "transactional-id", "cluster"]
Pattern = Literal["literal", "prefixed"]


@dataclass(frozen=True, slots=True)
class Acl:
    """Operations one principal is allowed on one resource (or every resource with a prefix)."""

    principal: str
    resource: Resource
    name: str
    pattern: Pattern
    operations: tuple[str, ...]

    def args(self) -> list[str]:
        """The arguments of `kafka-acls.sh --add` for it (Kafka's `AclCommand`)."""
        out = ["--add", "--allow-principal", f"User:{self.principal}"]
        for op in self.operations:
            out += ["--operation", op]
        if self.resource == "cluster":
            return [*out, "--cluster"]
        return [*out, f"--{self.resource}", self.name, "--resource-pattern-type", self.pattern]


@dataclass(frozen=True, slots=True)
class Principals:
    """The SASL user names of the three components."""

    worker: str = "worker"
    client: str = "client"
    exporter: str = "exporter"


def acls(prefix: str, app_id: str, principals: Principals = Principals()) -> list[Acl]:
    """Every ACL a deployment with topic prefix `prefix` and Faust app id `app_id` needs."""
    w, c, e = principals.worker, principals.client, principals.exporter

    def topic(who: str, name: str, *ops: str) -> Acl:
        return Acl(who, "topic", f"{prefix}.{name}", "literal", ops)

    return [
        topic(w, "commands", "Read", "Write", "Describe", "DescribeConfigs"),
        topic(w, "events", "Read", "Write", "Describe", "DescribeConfigs"),
        topic(w, "rejected", "Read", "Write", "Describe", "DescribeConfigs"),
        topic(w, "snapshots", "Read", "Write", "Describe", "DescribeConfigs"),
        topic(w, "telemetry", "Read", "Describe", "DescribeConfigs"),
        Acl(w, "topic", f"{prefix}.", "prefixed", ("Create",)),
        Acl(w, "topic", f"{app_id}-", "prefixed", ("All",)),  # Faust's changelogs, assignor
        Acl(w, "group", app_id, "prefixed", ("Read", "Describe")),  # Faust, telemetry, audit
        Acl(w, "transactional-id", app_id, "prefixed", ("Write", "Describe")),
        Acl(w, "cluster", "kafka-cluster", "literal", ("IdempotentWrite", "Describe")),
        topic(c, "commands", "Write", "Describe"),
        topic(c, "events", "Read", "Describe"),
        topic(c, "rejected", "Read", "Describe"),
        topic(c, "snapshots", "Read", "Describe"),
        topic(e, "telemetry", "Write", "Describe"),
    ]


def command_lines(
    prefix: str,
    app_id: str,
    principals: Principals = Principals(),
    *,
    bootstrap: str,
    command_config: str = "admin.properties",
) -> list[str]:
    """`kafka-acls.sh` command lines that create `acls(...)`, for an admin to run
    (`command_config`: the admin's client properties file)."""
    head = f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config {command_config}"
    return [" ".join([head, *a.args()]) for a in acls(prefix, app_id, principals)]
