"""Hostile input: 1,000 records per topic, cycling through the ways a record can be bad.

Each record comes with what the suite expects of it (`_load.Expect`): on the commands,
telemetry and events topics every bad record must reach `rackplane.rejected` with a reason
(`reject`), except a valid command naming a node its (known) cluster lacks, which a
`CommandRejected` event answers as well (`either`). Garbage on the rejected topic must only
break nothing (`none`): nothing reads that topic to decide.

The categories (issue 15: "not JSON, wrong types, unknown `type`, NUL and bidi characters in
ids and actors, oversized, unknown clusters, unknown nodes, mis-keyed"):

| category | commands | telemetry | events | rejected |
|---|---|---|---|---|
| not JSON, not an object, unknown `type`, wrong types, missing fields | x | x | x | x |
| NUL / bidi control in an id, in an actor (or node, reason) | x | x | x | x |
| oversized record (over `max_message_bytes`), oversized field | x | x | x | x |
| unknown cluster (150 names) | x | x | x | |
| unknown node of a known cluster | x | x | | |
| mis-keyed (record key is not its cluster) | x | | x | |
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.faults._load import Expect

PER_TOPIC = 1_000
GHOSTS = 150
BIDI = "\u202e"  # RIGHT-TO-LEFT OVERRIDE
NUL = "\x00"


@dataclass(frozen=True)
class Hostile:
    topic: str
    key: bytes | None
    value: bytes
    kind: str
    expect: Expect
    command_id: str | None = None
    cluster: str | None = None


class HostileInput:
    """The hostile records for one case's clusters (`clusters[i]` are registered)."""

    def __init__(self, clusters: list[str], *, limit: int, tag: str, seed: int = 1) -> None:
        self.clusters = clusters
        self.limit = limit
        self.tag = tag
        self.rng = random.Random(seed)
        self.n = 0

    def all(self) -> list[Hostile]:
        """PER_TOPIC records for each of the four topics, interleaved."""
        makers: dict[str, list[Callable[[], Hostile]]] = {
            "commands": self._commands(),
            "telemetry": self._telemetry(),
            "events": self._events(),
            "rejected": self._rejected(),
        }
        out = []
        for i in range(PER_TOPIC):
            for kinds in makers.values():
                out.append(kinds[i % len(kinds)]())
        return out

    # -- helpers --------------------------------------------------------------------------

    def _id(self, prefix: str = "h") -> str:
        self.n += 1
        return f"{prefix}-{self.tag}-{self.n}"

    def _known(self) -> str:
        return self.rng.choice(self.clusters)

    def _ghost(self) -> str:
        return f"ghost-{self.tag}-{self.rng.randrange(GHOSTS)}"

    def _now(self) -> str:
        return datetime.now(UTC).isoformat()

    def _garbage(self) -> bytes:
        return bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 200)))

    def _oversized(self, topic: str) -> bytes:
        return json.dumps({"type": "x", "topic": topic, "pad": "p" * (self.limit + 100)}).encode()

    @staticmethod
    def _json(value: Any) -> bytes:
        return json.dumps(value).encode()

    def _cordon(self, cluster: str, **changes: Any) -> dict[str, Any]:
        body = {
            "type": "CordonNode",
            "id": self._id(),
            "cluster": cluster,
            "actor": "operator:hostile",
            "node": "r0-n1",
            "reason": "hostile",
        }
        return body | changes

    def _command(self, kind: str, body: dict[str, Any], *, key: str | None = None,
                 expect: Expect = "reject") -> Hostile:  # fmt: skip
        cluster = body.get("cluster") if isinstance(body.get("cluster"), str) else None
        command_id = body.get("id") if isinstance(body.get("id"), str) else None
        k = (key if key is not None else cluster or "k").encode()
        return Hostile("commands", k, self._json(body), kind, expect, command_id, cluster)

    # -- per topic ------------------------------------------------------------------------

    def _commands(self) -> list[Callable[[], Hostile]]:
        c = self._known
        g = self._ghost
        bad: list[Callable[[], Hostile]] = [
            lambda: Hostile("commands", c().encode(), self._garbage(), "not JSON", "reject"),
            lambda: Hostile("commands", c().encode(), b"[1, 2]", "not an object", "reject"),
            lambda: self._command("unknown type", self._cordon(c(), type="DropCluster")),
            lambda: self._command("wrong types", self._cordon(c(), node=42, actor=["x"])),
            lambda: self._command(
                "missing fields", {"type": "SubmitJob", "id": self._id(), "cluster": c()}
            ),
            lambda: self._command("NUL in id", self._cordon(c(), id=f"h{NUL}{self._id()}")),
            lambda: self._command("bidi in id", self._cordon(c(), id=f"h{BIDI}{self._id()}")),
            lambda: self._command("NUL in actor", self._cordon(c(), actor=f"op{NUL}erator")),
            lambda: self._command("bidi in actor", self._cordon(c(), actor=f"operator:{BIDI}evil")),
            lambda: Hostile(
                "commands", c().encode(), self._oversized("commands"), "oversized", "reject"
            ),
            lambda: self._command(
                "oversized field", self._cordon(c(), correlation_id="z" * 30_000)
            ),
            lambda: self._command("unknown cluster", self._cordon(g())),
            lambda: self._command(
                "unknown node", self._cordon(c(), node=f"nope-{self.n}"), expect="either"
            ),
            lambda: self._command("mis-keyed", self._cordon(c()), key=f"elsewhere-{self.n}"),
        ]
        return bad

    def _sample(self, cluster: str, node: str = "r1-n1", **changes: Any) -> dict[str, Any]:
        gpu = {"index": 0, "temperature_c": 50.0}
        body = {"cluster": cluster, "node": node, "at": self._now(), "gpus": [gpu]}
        return body | changes

    def _telemetry_record(self, kind: str, body: dict[str, Any] | bytes) -> Hostile:
        value = body if isinstance(body, bytes) else self._json(body)
        node = body.get("node") if isinstance(body, dict) else None
        key = (node if isinstance(node, str) else "r1-n1").encode()
        return Hostile("telemetry", key, value, kind, "reject")

    def _telemetry(self) -> list[Callable[[], Hostile]]:
        c, g, t = self._known, self._ghost, self._telemetry_record
        return [
            lambda: t("not JSON", self._garbage()),
            lambda: t("not an object", b'"sample"'),
            lambda: t("wrong types", self._sample(c(), gpus=[{"index": "one"}])),
            lambda: t("unknown field", self._sample(c(), fan_rpm=9000)),
            lambda: t("missing fields", {"cluster": c(), "node": "r1-n1"}),
            lambda: t("NUL in node", self._sample(c(), node=f"r1{NUL}n1")),
            lambda: t("bidi in node", self._sample(c(), node=f"r1-n1{BIDI}")),
            lambda: t("oversized", self._oversized("telemetry")),
            lambda: t("unknown cluster", self._sample(g())),
            lambda: t("unknown node", self._sample(c(), node=f"nope-{self.n}")),
        ]

    def _event(self, cluster: str, **changes: Any) -> dict[str, Any]:
        seq = 10**9 + self.n  # far ahead: applying it would need a billion events first
        body = {
            "type": "NodeCordoned",
            "id": f"{cluster}/{seq}",
            "cluster": cluster,
            "seq": seq,
            "at": self._now(),
            "actor": "operator:hostile",
            "causation_id": self._id(),
            "node": "r0-n1",
            "reason": "hostile",
        }
        self.n += 1
        return body | changes

    def _event_record(
        self, kind: str, body: dict[str, Any] | bytes, key: str | None = None
    ) -> Hostile:
        value = body if isinstance(body, bytes) else self._json(body)
        cluster = body.get("cluster") if isinstance(body, dict) else None
        k = key if key is not None else cluster if isinstance(cluster, str) else self._known()
        return Hostile("events", k.encode(), value, kind, "reject")

    def _events(self) -> list[Callable[[], Hostile]]:
        c, g, e = self._known, self._ghost, self._event_record
        return [
            lambda: e("not JSON", self._garbage()),
            lambda: e("not an object", b"null"),
            lambda: e("unknown type", self._event(c(), type="ClusterDeleted")),
            lambda: e("wrong types", self._event(c(), seq="next")),
            lambda: e("missing fields", {"type": "NodeFailed", "cluster": c()}),
            lambda: e("NUL in actor", self._event(c(), actor=f"op{NUL}")),
            lambda: e("bidi in actor", self._event(c(), actor=f"operator:{BIDI}")),
            lambda: e("oversized", self._oversized("events")),
            lambda: e("unknown cluster", self._event(g(), seq=1, id="x/1")),
            lambda: e("mis-keyed", self._event(g(), seq=1, id="x/1"), key=c()),
        ]

    def _rejected(self) -> list[Callable[[], Hostile]]:
        def r(kind: str, value: bytes) -> Hostile:
            return Hostile("rejected", b"hostile", value, kind, "none")

        def rejection(**changes: Any) -> bytes:
            body = {"source_topic": "x", "reason": "r", "agent": "a", "at": self._now(),
                    "size": 1, "raw_base64": ""}  # fmt: skip
            return self._json(body | changes)

        return [
            lambda: r("not JSON", self._garbage()),
            lambda: r("not an object", b"[]"),
            lambda: r("wrong types", rejection(size="big")),
            lambda: r("unknown field", rejection(extra=1)),
            lambda: r("NUL in reason", rejection(reason=f"r{NUL}")),
            lambda: r("bidi in agent", rejection(agent=f"a{BIDI}")),
            lambda: r("oversized", self._oversized("rejected")),
        ]


def batches(items: list[Hostile], size: int) -> Iterator[list[Hostile]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
