"""How a worker connects and what it runs. (Issue 9 turns this into the settings model.)"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamConfig:
    """Broker, topics and agents of one rackplane worker."""

    broker: str = "kafka://127.0.0.1:9092"
    prefix: str = "rackplane"
    partitions: int = 4
    replication: int = 1
    app_id: str = "rackplane"
    exactly_once: bool = False
    web_port: int = 6066
    web_bind: str = "127.0.0.1"
    datadir: str = ".rackplane/worker"
    max_message_bytes: int = 1_048_576
    """Larger values are rejected at the edge, before decoding."""
    session_timeout: float = 6.0
    """Consumer-group session: joins wait about half of it on Tansu (STACK_NOTES)."""
    policies: tuple[str, ...] = ("spare_swap", "tas", "defrag")
    gpu_manager: bool = True
    projections: bool = True
    audit_dir: str | None = None
    """Where the audit sink writes (JSON lines), when set."""
    db: str | None = None
    """The DuckDB history file the audit sink records into, when set (`rackplane.history`)."""

    @property
    def bootstrap(self) -> str:
        """`host:port[,host:port]` for Kafka clients, from `kafka://...`."""
        scheme, sep, rest = self.broker.partition("://")
        if not sep or scheme != "kafka" or not rest:
            raise ValueError(f"broker {self.broker!r}: expected kafka://host:port[,host:port]")
        return rest.rstrip("/")

    @property
    def faust_broker(self) -> str:
        """The broker URL in Faust's form."""
        return ";".join(f"kafka://{h}" for h in self.bootstrap.split(","))

    def topic(self, name: str) -> str:
        """Full name of one of rackplane's topics: telemetry, commands, events, rejected."""
        return f"{self.prefix}.{name}"
