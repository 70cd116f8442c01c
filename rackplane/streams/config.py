"""How a worker connects and what it runs.

`rackplane.config.RackplaneSettings` (defaults < file < env < flags) builds this for the worker
and the client commands; tests and the embedded demo build it directly.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rackplane.logtrust import LogTrust


@dataclass(frozen=True)
class KafkaSecurity:
    """How clients authenticate to Kafka and encrypt: passed through to Faust and aiokafka."""

    protocol: str = "PLAINTEXT"
    """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    sasl_mechanism: str = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def ssl_context(self) -> Any:
        """An `ssl.SSLContext` from the CA, certificate and key files (None without TLS)."""
        if not self.uses_ssl:
            return None
        from aiokafka.helpers import create_ssl_context

        context = create_ssl_context(
            cafile=self.ssl_cafile,
            certfile=self.ssl_certfile,
            keyfile=self.ssl_keyfile,
            password=self.ssl_key_password,
        )
        context.check_hostname = self.ssl_check_hostname
        return context

    def aiokafka_options(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's producers, consumers and admin client."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_ssl:
            options["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            options |= {
                "sasl_mechanism": self.sasl_mechanism,
                "sasl_plain_username": self.sasl_username,
                "sasl_plain_password": self.sasl_password,
            }
        return options

    def faust_credentials(self) -> Any:
        """Faust's `broker_credentials` (None for PLAINTEXT)."""
        import faust

        if self.uses_sasl:
            return faust.SASLCredentials(
                username=self.sasl_username,
                password=self.sasl_password,
                mechanism=self.sasl_mechanism,
                ssl_context=self.ssl_context(),
            )
        if self.uses_ssl:
            return faust.SSLCredentials(self.ssl_context())
        return None


def bootstrap_of(broker: str) -> str:
    """The `host:port[,host:port]` of a `kafka://host:port[,host:port]` broker URL.

    Refused here, before any client sees it: another scheme, no address, an empty host, and a
    port that is not a whole number from 1 to 65535 (aiokafka would raise OverflowError deep in
    its connect, or wait for a port nothing can listen on).

    Raises:
        ValueError: `'URL': why`, naming the address at fault.
    """
    scheme, sep, rest = broker.partition("://")
    if not sep or scheme != "kafka" or not rest.rstrip("/"):
        raise ValueError(f"{broker!r}: expected kafka://host:port[,host:port]")
    addresses = rest.rstrip("/").split(",")
    for address in addresses:
        host, colon, port = address.rpartition(":")
        where = f"{broker!r}: {address!r}" if len(addresses) > 1 else repr(broker)
        if not address:
            raise ValueError(f"{where}: an empty address (expected host:port[,host:port])")
        if not colon:
            raise ValueError(f"{where}: no port (expected host:port)")
        if not host.strip("[]"):
            raise ValueError(f"{where}: no host (expected host:port)")
        if any(c.isspace() or not c.isprintable() for c in host):
            raise ValueError(f"{where}: the host holds a space or a control character")
        if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError(f"{where}: port {port!r} is not a TCP port (1-65535)")
    return ",".join(addresses)


MIN_TOKEN_CHARS = 16
"""A web token shorter than this is refused (`secrets.token_urlsafe(32)` gives 43)."""


def is_loopback(address: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


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
    max_event_bytes: int = 4 * 1_048_576
    """The largest record batch the controller appends to the events topic (the topic's
    `max.message.bytes`): one command's events must fit in it, or the command is rejected
    (`event_too_large`) before anything is sent."""
    outage_limit: float = 300.0
    """Seconds the controller keeps retrying appends the broker refuses or loses before the
    worker stops (non-zero) for a supervisor to restart it."""
    allow_finite_retention: bool = False
    """Start even when the events topic has a finite retention (the log would forget)."""
    idempotent: bool = True
    """Ask for an idempotent producer (Apache Kafka); without one (Tansu) the worker says so
    and readers count retried copies as duplicates."""
    checkpoint_every: int = 10_000
    """Events of a partition between two checkpoints (snapshots of all its clusters); a
    rebuild reads the newest checkpoint plus the tail. 0: no checkpoints (exactly-once mode
    takes none: its events are not committed when the controller sees them)."""
    seen_window: int | None = None
    """Command ids a fresh state remembers (None: the core's default; tests set it small)."""
    session_timeout: float = 6.0
    """Consumer-group session: joins wait about half of it on Tansu (STACK_NOTES)."""
    fetch_wait_ms: int = 20
    """Longest a fetch waits at the broker when no data is there (`fetch_max_wait_ms` of every
    consumer of the worker and the client). Tansu answers only when it runs out, so on the
    embedded broker it bounds every hop's latency; Apache Kafka answers as soon as data
    arrives, so there it only paces the idle fetches. A fetch answered empty while data waits
    raises it for that consumer (`_fetch_wait`)."""
    policies: tuple[str, ...] = (
        "spare_swap",
        "tas",
        "reclaim",
        "defrag",
        "time_limits",
        "reservations",
    )
    gpu_manager: bool = True
    projections: bool = True
    audit_dir: str | None = None
    """Where the audit sink writes (JSON lines), when set."""
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    db: str | None = None
    """The DuckDB history file the audit sink records into, when set (`rackplane.history`)."""
    web_token: str | None = field(default=None, repr=False)
    """The bearer token every view but /health, /ready and /metrics requires (None: none,
    which only a worker bound to a loopback address may run with). A secret: never logged."""
    worker_key_file: str | None = None
    """The worker's key file: the policies and the GPU Manager sign their commands with it,
    the controller its events and checkpoints, and its readers take no event or checkpoint
    not signed by it or by `log_keys` (None: nothing is signed, and every event is taken)."""
    log_keys: tuple[str, ...] = ()
    """Public keys (base64) of the other workers whose events and checkpoints are trusted
    (workers with keys of their own; an older key while the worker key is rotated)."""
    unsigned_log_prefix: bool = False
    """Take a partition's unsigned events until its first signed one (a log written before
    the workers had keys; see docs/OPERATIONS.md)."""

    def log_trust(self) -> LogTrust | None:
        """What a reader that is no worker trusts: the `log_keys` (None: none set, every
        event is taken).

        Raises:
            LogTrustError: a log key is not an Ed25519 public key."""
        from rackplane.logtrust import LogTrust

        if not self.log_keys:
            return None
        return LogTrust.of(self.log_keys, unsigned_prefix=self.unsigned_log_prefix)

    def web_problem(self) -> str | None:
        """Why the views may not be served as configured (None: they may)."""
        if self.web_token is None and not is_loopback(self.web_bind):
            return (
                f"web_bind {self.web_bind} serves the worker's views beyond this machine without "
                "a token: set RACKPLANE_WEB_TOKEN (a secret; every view but /health, /ready and "
                "/metrics then requires it as a bearer token) or bind 127.0.0.1"
            )
        if self.web_token is not None and len(self.web_token) < MIN_TOKEN_CHARS:
            have = len(self.web_token)
            return f"the web token has {have} characters: use at least {MIN_TOKEN_CHARS}"
        return None

    @property
    def bootstrap(self) -> str:
        """`host:port[,host:port]` for Kafka clients, from `kafka://...`.

        Raises:
            ValueError: `broker 'URL': why` (see `bootstrap_of`).
        """
        try:
            return bootstrap_of(self.broker)
        except ValueError as err:
            raise ValueError(f"broker {err}") from None

    @property
    def faust_broker(self) -> str:
        """The broker URL in Faust's form."""
        return ";".join(f"kafka://{h}" for h in self.bootstrap.split(","))

    def kafka_options(self) -> dict[str, Any]:
        """`bootstrap_servers` and the security options, for any aiokafka client."""
        return {"bootstrap_servers": self.bootstrap, **self.security.aiokafka_options()}

    def topic(self, name: str) -> str:
        """Full name of one of rackplane's topics: telemetry, commands, events, rejected."""
        return f"{self.prefix}.{name}"
