"""The settings model: every knob of a worker and of the client commands, in one place.

Theory of operation: one pydantic model, `RackplaneSettings`, read from four layers, each
overriding the one before it: the defaults written here < an optional YAML config file
(`--config FILE` or `RACKPLANE_CONFIG`) < environment variables `RACKPLANE_<NAME>` (nested
policy fields as `RACKPLANE_POLICY__<NAME>`) < command-line flags. `config._load` reads the
layers and merges them into one mapping the model validates (the environment as
pydantic-settings reads it: names in any case, list, tuple, mapping and model fields as
JSON; pydantic-settings itself cost every CLI command ~40-60 ms of imports). Secrets are
`SecretStr`: they never print (`rackplane config show` masks them) and reach Kafka clients
only through `stream_config()`.
"""

from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from rackplane.models import Actor, PolicySettings
from rackplane.streams.config import KafkaSecurity, StreamConfig, bootstrap_of

POLICY_AGENTS = ("spare_swap", "tas", "reclaim", "defrag", "time_limits", "reservations")
"""The policy agents a worker can run (kept equal to `rackplane.streams.app.POLICIES`)."""

ENV_PREFIX = "RACKPLANE_"

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]


class Raw:
    """Field metadata: the environment's value is given as it is (the field's validator splits
    it), not decoded as JSON like other list fields."""


class RackplaneSettings(BaseModel):
    """How rackplane connects to Kafka, where it keeps data, and the policy overrides."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_default=True,
        # field docstrings: read by docs/CONFIG.md's `attribute_docs`, not at class creation
    )

    # -- Kafka ------------------------------------------------------------------------------
    broker: str = "kafka://127.0.0.1:9092"
    """The Kafka cluster: `kafka://host:port[,host:port]`."""
    topic_prefix: str = Field(default="rackplane", pattern=r"^[A-Za-z0-9._-]{1,200}$")
    """Topics are `<prefix>.telemetry`, `.commands`, `.events`, `.rejected`."""
    partitions: int = Field(default=4, ge=1, le=10_000)
    """Partitions of each topic when rackplane creates it; bounds the useful worker count."""
    replication: int = Field(default=1, ge=1, le=16)
    """Replication factor of topics rackplane creates (3 on a production cluster)."""
    kafka_security_protocol: SecurityProtocol = "PLAINTEXT"
    """PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS)."""
    kafka_sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    """SASL mechanism: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN."""
    kafka_sasl_username: str | None = None
    """SASL user (with a SASL_* protocol)."""
    kafka_sasl_password: SecretStr | None = None
    """SASL password (secret: pass it as RACKPLANE_KAFKA_SASL_PASSWORD, never in a file)."""
    kafka_ssl_cafile: Path | None = None
    """CA bundle that signs the brokers' certificates (default: the system's)."""
    kafka_ssl_certfile: Path | None = None
    """Client certificate for mutual TLS."""
    kafka_ssl_keyfile: Path | None = None
    """Private key of the client certificate."""
    kafka_ssl_key_password: SecretStr | None = None
    """Password of the private key (secret)."""
    kafka_ssl_check_hostname: bool = True
    """Check that the broker's certificate names the host connected to."""

    # -- worker -----------------------------------------------------------------------------
    app_id: str = Field(default="rackplane", pattern=r"^[A-Za-z0-9._-]{1,200}$")
    """Consumer group of the workers: workers with the same id share the partitions."""
    exactly_once: bool = False
    """Kafka transactions (Apache Kafka only; the embedded broker has none)."""
    policies: Annotated[tuple[str, ...], Raw()] = POLICY_AGENTS
    """Policy agents this worker runs (comma-separated in env and flags)."""
    gpu_manager: bool = True
    """Run the GPU Manager (reads telemetry, reports node health)."""
    projections: bool = True
    """Run the projections and their web views."""
    web_bind: str = "127.0.0.1"
    """Address of the JSON views and /metrics (0.0.0.0 in a container)."""
    web_port: int = Field(default=6066, ge=1, le=65_535)
    """Port of the JSON views and /metrics."""
    web_token: SecretStr | None = None
    """Bearer token every view but /health, /ready and /metrics requires (secret: pass it as
    RACKPLANE_WEB_TOKEN, never in a file). A worker bound beyond loopback needs one."""
    data_dir: Path = Path(".rackplane/worker")
    """Worker data directory (Faust's tables)."""
    audit_dir: Path | None = None
    """Write the audit trail (JSON lines) here, when set."""
    max_message_bytes: int = Field(default=1_048_576, ge=1_024, le=64 * 1_048_576)
    """Larger messages are rejected at the edge before decoding (to the rejected topic)."""
    max_event_bytes: int = Field(default=4 * 1_048_576, ge=65_536, le=64 * 1_048_576)
    """The largest record batch the controller appends to the events topic (its
    `max.message.bytes`): a command whose events would not fit is rejected (`event_too_large`)
    before anything is sent."""
    outage_limit: float = Field(default=300.0, gt=0, le=86_400)
    """Seconds the controller retries appends the broker refuses or loses (an outage) before
    the worker exits non-zero for its supervisor to restart it."""
    checkpoint_every: int = Field(default=10_000, ge=0, le=10_000_000)
    """Events of a partition between two checkpoints (snapshots of all its clusters on the
    compacted snapshots topic): a rebuild reads the newest checkpoint plus the tail. 0: none.
    Exactly-once mode takes none."""
    allow_finite_retention: bool = False
    """Start against an events topic with a finite retention (the log would then forget: a
    restart after the retention rebuilds from what is left). Off: the worker refuses."""
    session_timeout: float = Field(default=6.0, gt=0, le=300)
    """Consumer-group session timeout, seconds."""
    fetch_wait_ms: int = Field(default=20, ge=1, le=30_000)
    """Longest a consumer's fetch waits at the broker when nothing is there, ms (workers and
    clients). The embedded broker (Tansu) answers only when it runs out, so there it bounds the
    latency of every hop; Apache Kafka answers as soon as data arrives, so there it only paces
    idle polling: 100-500 cuts idle fetch requests on a production cluster. On Tansu, 20 ms
    gets most of the latency of 5 ms (p50 at 500 commands/s ~42 vs ~37 ms; 50 ms: ~57) for
    1-2% of a core of idle fetching more than 50 ms (docs/BENCHMARKS.md). A fetch answered
    empty while data waits raises the wait for that consumer."""
    log_level: LogLevel = "warning"
    """Log level (quiet by default)."""

    # -- history and clients ----------------------------------------------------------------
    history_db: Path = Path("rackplane.duckdb")
    """DuckDB file of the audit history: what `history` and `replay` read, and what the worker
    records into when `record_history` is on."""
    record_history: bool = False
    """The worker records every event, command and rejection into `history_db` (also
    `rackplane worker --db FILE`)."""
    actor: Actor | None = None
    """Who the client commands act as (default `operator:$USER`); admin commands check it.
    ASCII letters, digits and . _ : / @ + -, at most 128 characters."""
    key_file: Path | None = None
    """Your key file (`rackplane keys new`): the CLI and the console sign every command with
    it, and act as its actor. A cluster that trusts keys takes only signed commands. Mode
    0600; its private key is never printed."""
    worker_key_file: Path | None = None
    """The worker's key file: the policies' proposals and the GPU Manager's reports are signed
    with it (a cluster with keys trusts it with the `policy` role), and so are the events and
    checkpoints the controller writes; the worker then takes no event or checkpoint not
    signed by it or by `log_keys`."""
    log_keys: tuple[str, ...] = ()
    """Public keys (base64, `rackplane keys show`) of the workers whose events and checkpoints
    are trusted: a worker trusts them besides its own key (an older key while the worker key
    is rotated); the CLI and the console then show only events signed by one of them; `history
    verify` checks the stored events' signatures against them (and `worker_key_file`'s)."""
    unsigned_log_prefix: bool = False
    """Take a partition's unsigned events until its first signed one: for a log written
    before the workers had keys (docs/OPERATIONS.md, "A signed log")."""
    cluster_file: Path | None = None
    """Cluster file `rackplane register` sends when no file is named."""
    policy: PolicySettings = PolicySettings()
    """Policy overrides applied over the cluster file's `policy:` at `register` (only the
    fields set here, e.g. RACKPLANE_POLICY__ADMINS='["operator:alice"]')."""

    @field_validator("broker")
    @classmethod
    def _kafka_url(cls, value: str) -> str:
        bootstrap_of(value)  # a ValueError names the URL and what is wrong with it
        return value

    @field_validator("policies", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        return value

    @field_validator("policies")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [p for p in value if p not in POLICY_AGENTS]
        if unknown:
            raise ValueError(f"unknown policies {unknown}; choose from {', '.join(POLICY_AGENTS)}")
        return value

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> Self:
        if self.kafka_security_protocol.startswith("SASL_") and not (
            self.kafka_sasl_username and self.kafka_sasl_password
        ):
            raise ValueError(
                f"kafka_security_protocol {self.kafka_security_protocol} needs "
                "kafka_sasl_username and kafka_sasl_password (RACKPLANE_KAFKA_SASL_PASSWORD)"
            )
        return self

    def security(self) -> KafkaSecurity:
        """The Kafka security options, secrets revealed, for the clients only."""

        def reveal(secret: SecretStr | None) -> str | None:
            return secret.get_secret_value() if secret is not None else None

        def path(p: Path | None) -> str | None:
            return str(p) if p is not None else None

        return KafkaSecurity(
            protocol=self.kafka_security_protocol,
            sasl_mechanism=self.kafka_sasl_mechanism,
            sasl_username=self.kafka_sasl_username,
            sasl_password=reveal(self.kafka_sasl_password),
            ssl_cafile=path(self.kafka_ssl_cafile),
            ssl_certfile=path(self.kafka_ssl_certfile),
            ssl_keyfile=path(self.kafka_ssl_keyfile),
            ssl_key_password=reveal(self.kafka_ssl_key_password),
            ssl_check_hostname=self.kafka_ssl_check_hostname,
        )

    def stream_config(self) -> StreamConfig:
        """What the worker and the clients run with."""
        return StreamConfig(
            broker=self.broker,
            prefix=self.topic_prefix,
            partitions=self.partitions,
            replication=self.replication,
            app_id=self.app_id,
            exactly_once=self.exactly_once,
            web_port=self.web_port,
            web_bind=self.web_bind,
            web_token=self.web_token.get_secret_value() if self.web_token else None,
            datadir=str(self.data_dir),
            max_message_bytes=self.max_message_bytes,
            max_event_bytes=self.max_event_bytes,
            outage_limit=self.outage_limit,
            allow_finite_retention=self.allow_finite_retention,
            checkpoint_every=self.checkpoint_every,
            session_timeout=self.session_timeout,
            fetch_wait_ms=self.fetch_wait_ms,
            policies=self.policies,
            gpu_manager=self.gpu_manager,
            projections=self.projections,
            audit_dir=str(self.audit_dir) if self.audit_dir is not None else None,
            db=str(self.history_db) if self.record_history else None,
            security=self.security(),
            worker_key_file=str(self.worker_key_file) if self.worker_key_file else None,
            log_keys=self.log_keys,
            unsigned_log_prefix=self.unsigned_log_prefix,
        )

    def policy_over(self, base: PolicySettings) -> PolicySettings:
        """`base` (a cluster file's policy) with the policy fields set in this configuration."""
        changes = {k: getattr(self.policy, k) for k in self.policy.model_fields_set}
        return PolicySettings.model_validate(base.model_dump() | changes)
