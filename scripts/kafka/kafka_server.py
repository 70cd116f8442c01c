#!/usr/bin/env python3
"""A throwaway single-node Apache Kafka 4.1.1 broker (KRaft) for `make test-kafka`.

Theory of operation
-------------------
1. Fetch. The broker classpath is `org.apache.kafka:kafka_2.13:4.1.1` and its runtime
   dependencies plus an slf4j binding (`pom.xml` next to this file). Maven copies them into a
   cache directory (`$RACKPLANE_CACHE/kafka-4.1.1`, else `~/.cache/rackplane/kafka-4.1.1`).
   The download goes to a sibling temporary directory that is renamed into place only when
   complete, and it is skipped when the cache holds `kafka_2.13-4.1.1.jar` with
   `kafka/Kafka.class` inside.
2. Configure. A fresh temporary directory gets `server.properties` for one combined
   broker+controller node on 127.0.0.1 (two free ports: broker and controller) and a data
   directory, which `kafka.tools.StorageTool format` formats with a new cluster id.
3. Start. `java -Xms512m -Xmx512m -cp 'JARS/*' kafka.Kafka server.properties` in its own
   process group, its output in `kafka.log` in that directory.
4. Ready. Kafka is ready when a Metadata request over plain TCP (the Kafka wire protocol,
   stdlib only) lists our broker: that is after KRaft elected the controller and unfenced the
   broker, so topics can be created and written. A port taken meanwhile (BindException) is
   retried on new ports.
5. Stop. SIGTERM to the process group (a clean controlled shutdown), SIGKILL after a timeout;
   the temporary directory is removed (kept, with its path printed, when Kafka failed).
6. Hurt (the fault suite, tests/faults). `kill()` SIGKILLs the broker and keeps its directory;
   `restart()` starts it again on the same data directory and ports (so the log survives) and
   waits until it is ready; `pause()` / `resume()` send SIGSTOP / SIGCONT.

CLI::

    python scripts/kafka/kafka_server.py run -- .venv/bin/pytest tests/broker -q
    python scripts/kafka/kafka_server.py fetch          # only download the jars
    python scripts/kafka/kafka_server.py serve          # run until Ctrl-C

`run` puts `RACKPLANE_TEST_BROKER=kafka://127.0.0.1:PORT` into CMD's environment and exits
with CMD's status. The broker also listens with SASL_PLAINTEXT + SCRAM-SHA-512 (a user made
at format time): `RACKPLANE_TEST_SASL_BROKER=kafka://127.0.0.1:SASL_PORT`, with
`RACKPLANE_TEST_SASL_USERNAME` / `RACKPLANE_TEST_SASL_PASSWORD`, for the security tests.
`run --acl` starts it instead with an authorizer (`StandardAuthorizer`, nothing allowed
without an ACL) and SASL only: `RACKPLANE_TEST_ACL_BROKER=kafka://127.0.0.1:SASL_PORT`,
`RACKPLANE_TEST_ACL_USERS` (JSON: user -> password, for `admin`, a super user, and the
components' `worker`, `client` and `exporter`, all made at format time) and
`RACKPLANE_TEST_KAFKA_JARS` (the classpath directory: `org.apache.kafka.tools.AclCommand`,
i.e. kafka-acls.sh, is in it). Its controller listener stays PLAINTEXT on 127.0.0.1, as the
KRaft quorum's own principal (ANONYMOUS) must be a super user: on a shared machine that is
loopback only; in production the controller listener belongs on a network of its own.
When Kafka cannot be fetched or started it exits with status 3 and says
why (with the tail of the Maven output or broker log): it never skips.

Standard library only; no rackplane imports (this must run before anything is installed).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
BROKER_JAR = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar"
TOOLS_JAR = f"kafka-tools-{KAFKA_VERSION}.jar"
POM = Path(__file__).resolve().with_name("pom.xml")
HOST = "127.0.0.1"
ENV_VAR = "RACKPLANE_TEST_BROKER"
SASL_ENV_VAR = "RACKPLANE_TEST_SASL_BROKER"
SASL_MECHANISM = "SCRAM-SHA-512"
SASL_USERNAME = "rackplane-test"
SASL_PASSWORD = "rackplane-test-secret"  # a throwaway broker's throwaway user
ACL_USERS = {
    user: f"{user}-rackplane-test-secret" for user in ("admin", "worker", "client", "exporter")
}
"""The ACL broker's users (throwaway passwords of a throwaway broker); `admin` is super."""
ACL_ENV_VAR = "RACKPLANE_TEST_ACL_BROKER"
EXIT_KAFKA_FAILED = 3
_TAIL_LINES = 40
_PORT_RETRIES = 3


class KafkaError(RuntimeError):
    """Kafka could not be fetched or started."""


def say(message: str) -> None:
    """Print one progress line (to stderr, so CMD's stdout stays its own)."""
    print(f"[kafka] {message}", file=sys.stderr, flush=True)


def tail(path: Path, lines: int = _TAIL_LINES) -> str:
    """Return the last `lines` lines of a text file, or a note when it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(cannot read {path})"
    return "\n".join(text.strip().splitlines()[-lines:]) or f"({path} is empty)"


# -- 1. fetch -----------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """`$RACKPLANE_CACHE/kafka-4.1.1`, else `~/.cache/rackplane/kafka-4.1.1`."""
    root = os.environ.get("RACKPLANE_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "rackplane"
    return base / f"kafka-{KAFKA_VERSION}"


def jars_are_complete(directory: Path) -> bool:
    """True when `directory` holds the broker jar with `kafka/Kafka.class` inside, and the
    tools jar with `AclCommand` (a cache from before the ACL tier lacks it: fetched again)."""
    wanted = (
        (BROKER_JAR, "kafka/Kafka.class"),
        (TOOLS_JAR, "org/apache/kafka/tools/AclCommand.class"),
    )
    try:
        for jar, entry in wanted:
            with zipfile.ZipFile(directory / jar) as archive:
                archive.getinfo(entry)
    except (OSError, KeyError, zipfile.BadZipFile):
        return False
    return True


def fetch_jars(cache_dir: Path | None = None) -> Path:
    """Make sure the broker classpath is in `cache_dir`; download it with Maven if not.

    Returns:
        The directory holding the jars.

    Raises:
        KafkaError: Maven is missing or failed, or the result lacks the broker.
    """
    target = (cache_dir or default_cache_dir()).expanduser().resolve()
    if jars_are_complete(target):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaError("Maven (`mvn`) is not on PATH: it is needed to fetch the Kafka jars")
    say(f"fetching Apache Kafka {KAFKA_VERSION} jars with Maven into {target} ...")
    started = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        command = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        try:
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise KafkaError("Maven did not finish fetching the Kafka jars in 15 minutes") from err
        if result.returncode != 0:
            output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-_TAIL_LINES:])
            raise KafkaError(f"Maven failed (exit {result.returncode}):\n{output}")
        if not jars_are_complete(staging):
            raise KafkaError(f"Maven finished but {BROKER_JAR} or {TOOLS_JAR} is incomplete")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    count = len(list(target.glob("*.jar")))
    say(f"fetched {count} jars in {time.monotonic() - started:.1f} s")
    return target


# -- 2. configure -------------------------------------------------------------------------


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def new_cluster_id() -> str:
    """A Kafka cluster id, as `StorageTool random-uuid` makes it (saves a JVM start)."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka's Uuid avoids ids that look like options
            return text


def server_properties(
    port: int, controller_port: int, sasl_port: int, data_dir: Path, *, acl: bool = False
) -> str:
    """One combined broker+controller node on 127.0.0.1 (see STACK_NOTES.md), with a second,
    SASL_PLAINTEXT/SCRAM listener on `sasl_port`. `acl`: SASL only (no PLAINTEXT listener for
    clients; the broker talks to itself as `admin`) and an authorizer that allows nothing
    without an ACL."""
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    if acl:
        scram = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="admin" password="{ACL_USERS["admin"]}";'
        )
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port},SASL_PLAINTEXT://{HOST}:{sasl_port},"
        f"CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port},SASL_PLAINTEXT://{HOST}:{sasl_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": SASL_MECHANISM,
        f"listener.name.sasl_plaintext.{SASL_MECHANISM.lower()}.sasl.jaas.config": scram,
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        # One partition instead of 50: the first consumer-group join is faster.
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    if acl:
        settings |= {
            "listeners": f"SASL_PLAINTEXT://{HOST}:{sasl_port},CONTROLLER://{HOST}:{controller_port}",
            "advertised.listeners": f"SASL_PLAINTEXT://{HOST}:{sasl_port}",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": SASL_MECHANISM,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


# -- 4. ready: a Metadata request over the Kafka wire protocol -----------------------------


def _request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    client_id = b"rackplane-kafka-server"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks += chunk
    return bytes(chunks)


def _round_trip(sock: socket.socket, request: bytes, correlation_id: int) -> bytes:
    sock.sendall(request)
    (size,) = struct.unpack(">i", _read_exact(sock, 4))
    response = _read_exact(sock, size)
    (answered,) = struct.unpack(">i", response[:4])
    if answered != correlation_id:
        raise ConnectionError("unexpected correlation id")
    return response[4:]


def metadata_brokers(port: int, timeout: float = 2.0) -> list[tuple[int, str, int]]:
    """Ask the broker on `port` for its cluster's brokers (Metadata v1, no topics).

    Returns:
        `(node_id, host, port)` of each live broker; empty while the broker is fenced.

    Raises:
        OSError: No connection, or the broker closed it (not ready yet).
    """
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        # Metadata v1; topics = [] (v1: an empty array asks for no topics, null for all).
        body = _round_trip(sock, _request(3, 1, 1, struct.pack(">i", 0)), 1)
    (count,) = struct.unpack_from(">i", body, 0)
    offset = 4
    brokers = []
    for _ in range(count):
        node_id, host_len = struct.unpack_from(">ih", body, offset)
        offset += 6
        host = body[offset : offset + host_len].decode()
        offset += host_len
        (broker_port, rack_len) = struct.unpack_from(">ih", body, offset)
        offset += 6 + max(rack_len, 0)
        brokers.append((node_id, host, broker_port))
    return brokers


# -- 3 and 5. start and stop --------------------------------------------------------------


class KafkaServer:
    """A single-node Kafka started from `jars`, in a fresh temporary directory.

    Use as a context manager, or `start()` / `stop()`.
    """

    def __init__(
        self,
        jars: Path,
        *,
        java: str = "java",
        ready_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        acl: bool = False,
        render: Callable[[int, int, int, Path], str] | None = None,
    ) -> None:
        """`acl`: the ACL broker (see the module docstring). `render`: server.properties of
        its own, from (port, controller port, SASL port, data directory): a configuration
        under test (the compose file's), with the ACL broker's users; ready when its log
        says it started."""
        self.jars = jars
        self.acl = acl or render is not None
        self.render = render
        self.java = java
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.work_dir: Path | None = None
        self.port: int | None = None
        self.sasl_port: int | None = None
        self._ports: tuple[int, int, int] | None = None
        """Broker, controller and SASL ports of the last start (`restart()` reuses them)."""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """`127.0.0.1:PORT` for Kafka clients."""
        if self.port is None:
            raise KafkaError("Kafka is not running")
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """`kafka://127.0.0.1:PORT`."""
        return f"kafka://{self.bootstrap}"

    @property
    def sasl_url(self) -> str:
        """`kafka://127.0.0.1:SASL_PORT` (SASL_PLAINTEXT, SCRAM-SHA-512)."""
        if self.sasl_port is None:
            raise KafkaError("Kafka is not running")
        return f"kafka://{HOST}:{self.sasl_port}"

    @property
    def log_path(self) -> Path | None:
        """The broker's output file."""
        return self.work_dir / "kafka.log" if self.work_dir else None

    def __enter__(self) -> KafkaServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> KafkaServer:
        """Format storage, start Kafka and wait until its metadata lists the broker.

        Raises:
            KafkaError: Java is missing, formatting failed, or Kafka exited or was not ready
                within `ready_timeout` seconds. Nothing is left running; the directory with
                the log is kept and named in the message.
        """
        if shutil.which(self.java) is None:
            raise KafkaError(f"`{self.java}` is not on PATH: Kafka {KAFKA_VERSION} needs Java 17+")
        started = time.monotonic()
        for attempt in range(1, _PORT_RETRIES + 1):
            try:
                self._start_once()
            except _PortTaken:
                self.stop()
                if attempt == _PORT_RETRIES:
                    raise KafkaError("Kafka could not bind its ports (retried)") from None
                continue
            except KafkaError as err:
                kept = self.work_dir
                self.stop(keep_dir=True)
                raise KafkaError(f"{err}\n(kept for a post-mortem: {kept})") from err
            except BaseException:
                self.stop()
                raise
            say(f"Kafka ready on {self.bootstrap} in {time.monotonic() - started:.1f} s")
            return self
        raise AssertionError("unreachable")

    def stop(self, keep_dir: bool = False) -> None:
        """SIGTERM the broker's process group, SIGKILL after `stop_timeout`; idempotent.

        Args:
            keep_dir: Keep the temporary directory (data and log) for a post-mortem.
        """
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            _signal_group(process, signal.SIGCONT)  # a paused broker cannot shut down
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                say(f"Kafka did not stop in {self.stop_timeout:.0f} s after SIGTERM: killing it")
                _signal_group(process, signal.SIGKILL)
                process.wait()
        self.port = None
        self.sasl_port = None
        self._ports = None
        if self.work_dir is not None and not keep_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs (it leads its own process group)."""
        running = self._process is not None and self._process.poll() is None
        return self._process.pid if running and self._process is not None else None

    def kill(self) -> None:
        """SIGKILL the broker (a crash: nothing flushed, no controlled shutdown).

        The directory, its data and the ports are kept for `restart()`.

        Raises:
            KafkaError: Kafka is not running.
        """
        process = self._process
        if process is None or process.poll() is not None:
            raise KafkaError("Kafka is not running: nothing to kill")
        _signal_group(process, signal.SIGCONT)  # a paused broker dies too
        _signal_group(process, signal.SIGKILL)
        process.wait()

    def restart(self) -> KafkaServer:
        """Start the broker again on the same data directory and ports; wait until ready.

        Raises:
            KafkaError: it was never started, it is still running, or it was not ready within
                `ready_timeout` seconds (a port taken meanwhile included).
        """
        if self.work_dir is None or self._ports is None:
            raise KafkaError("Kafka was never started: nothing to restart")
        if self.pid is not None:
            raise KafkaError("Kafka is still running: kill() it first")
        started = time.monotonic()
        port, _, sasl_port = self._ports
        self._launch(self.work_dir / "server.properties", self.work_dir / "kafka.log")
        self.port, self.sasl_port = port, sasl_port
        try:
            self._wait_ready(port, self.work_dir / "kafka.log")
        except _PortTaken:
            raise KafkaError(f"Kafka could not bind its old ports {self._ports} again") from None
        say(f"Kafka restarted on {self.bootstrap} in {time.monotonic() - started:.1f} s")
        return self

    def pause(self) -> None:
        """SIGSTOP the broker's process group: it holds its connections and answers nothing."""
        if self._process is None or self._process.poll() is not None:
            raise KafkaError("Kafka is not running: nothing to pause")
        _signal_group(self._process, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT the broker's process group after `pause()`."""
        if self._process is None or self._process.poll() is not None:
            raise KafkaError("Kafka is not running: nothing to resume")
        _signal_group(self._process, signal.SIGCONT)

    def _classpath(self) -> str:
        return str(self.jars / "*")

    def _launch(self, properties: Path, log_path: Path) -> None:
        with log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [
                    self.java,
                    "-Xms512m",
                    "-Xmx512m",
                    "-Djava.awt.headless=true",
                    "-Dorg.slf4j.simpleLogger.showDateTime=true",
                    "-cp",
                    self._classpath(),
                    "kafka.Kafka",
                    str(properties),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
                start_new_session=True,
            )

    def _start_once(self) -> None:
        self.work_dir = Path(tempfile.mkdtemp(prefix="rackplane-kafka-"))
        port, controller_port, sasl_port = free_port(), free_port(), free_port()
        while len({port, controller_port, sasl_port}) < 3:
            controller_port, sasl_port = free_port(), free_port()
        properties = self.work_dir / "server.properties"
        data = self.work_dir / "data"
        if self.render is not None:
            properties.write_text(self.render(port, controller_port, sasl_port, data))
        else:
            properties.write_text(
                server_properties(port, controller_port, sasl_port, data, acl=self.acl)
            )
        log_path = self.work_dir / "kafka.log"

        fmt = subprocess.run(
            [
                self.java,
                "-cp",
                self._classpath(),
                "kafka.tools.StorageTool",
                "format",
                "-t",
                new_cluster_id(),
                "-c",
                str(properties),
                *self._scram_users(),
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if fmt.returncode != 0:
            output = "\n".join((fmt.stdout + fmt.stderr).strip().splitlines()[-_TAIL_LINES:])
            raise KafkaError(f"formatting Kafka storage failed (exit {fmt.returncode}):\n{output}")

        self._launch(properties, log_path)
        self.port = port
        self.sasl_port = sasl_port
        self._ports = (port, controller_port, sasl_port)
        self._wait_ready(port, log_path)

    def _scram_users(self) -> list[str]:
        users = ACL_USERS if self.acl else {SASL_USERNAME: SASL_PASSWORD}
        out = []
        for name, password in users.items():
            out += ["--add-scram", f"{SASL_MECHANISM}=[name={name},password={password}]"]
        return out

    def _wait_ready(self, port: int, log_path: Path) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self._process.poll() is not None:
                log = tail(log_path)
                if "Address already in use" in log:
                    raise _PortTaken
                raise KafkaError(
                    f"Kafka exited with status {self._process.returncode} before it was ready; "
                    f"last lines of {log_path}:\n{log}"
                )
            if self.acl:  # no listener takes a request before SASL: the broker says it is up
                if "Kafka Server started" in tail(log_path, 400) and _accepts(self.sasl_port):
                    return
            else:
                with contextlib.suppress(OSError, struct.error, UnicodeDecodeError):
                    if any(broker_port == port for _, _, broker_port in metadata_brokers(port)):
                        return
            if time.monotonic() > deadline:
                raise KafkaError(
                    f"Kafka was not ready on {HOST}:{port} within {self.ready_timeout:.0f} s; "
                    f"last lines of {log_path}:\n{tail(log_path)}"
                )
            time.sleep(0.25)


def _accepts(port: int | None) -> bool:
    """Whether a TCP connection to `port` on 127.0.0.1 is accepted."""
    if port is None:
        return False
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


class _PortTaken(Exception):
    """Internal: Kafka lost a race for one of its ports."""


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # The broker leads its own process group (start_new_session=True); never signal a reaped
    # pid, which may belong to someone else by now.
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


# -- CLI ------------------------------------------------------------------------------------


class _Terminated(Exception):
    """SIGTERM arrived: stop the broker on the way out."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def _run_command(command: list[str], env: dict[str, str]) -> int:
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as err:
        say(f"cannot run {command[0]!r}: {err}")
        return 127
    try:
        return child.wait()
    except (KeyboardInterrupt, _Terminated) as err:
        # Ctrl-C reached the child too (same process group); give it time to finish.
        if isinstance(err, _Terminated):
            child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return 130 if isinstance(err, KeyboardInterrupt) else 143


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="kafka_server.py",
        description=f"Run a throwaway single-node Apache Kafka {KAFKA_VERSION} (KRaft).",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where the jars live (default: $RACKPLANE_CACHE/kafka-4.1.1 or "
        "~/.cache/rackplane/kafka-4.1.1)",
    )
    parser.add_argument("--ready-timeout", type=float, default=120.0, help="seconds (120)")
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="start Kafka, run CMD with RACKPLANE_TEST_BROKER, stop")
    run.add_argument(
        "--acl", action="store_true", help="SASL only, with an authorizer (the ACL tier)"
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    sub.add_parser("fetch", help="only fetch the jars into the cache")
    sub.add_parser("serve", help="start Kafka and keep it running until Ctrl-C")
    args = parser.parse_args(argv)

    command: list[str] = list(getattr(args, "command", None) or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if args.action == "run" and not command:
        parser.error("run needs a command: run -- CMD ARGS...")

    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        jars = fetch_jars(args.cache_dir)
        if args.action == "fetch":
            say(f"jars ready in {jars}")
            return 0
        acl = bool(getattr(args, "acl", False))
        with KafkaServer(jars, ready_timeout=args.ready_timeout, acl=acl) as server:
            if args.action == "serve":
                say(f"serving {server.url}; Ctrl-C stops it")
                with contextlib.suppress(KeyboardInterrupt, _Terminated):
                    while server._process is not None and server._process.poll() is None:
                        time.sleep(0.5)
                return 0
            if acl:
                env = dict(
                    os.environ,
                    **{
                        ACL_ENV_VAR: server.sasl_url,
                        "RACKPLANE_TEST_ACL_USERS": json.dumps(ACL_USERS),
                        "RACKPLANE_TEST_KAFKA_JARS": str(jars),
                    },
                )
            else:
                env = dict(
                    os.environ,
                    **{
                        ENV_VAR: server.url,
                        SASL_ENV_VAR: server.sasl_url,
                        "RACKPLANE_TEST_SASL_USERNAME": SASL_USERNAME,
                        "RACKPLANE_TEST_SASL_PASSWORD": SASL_PASSWORD,
                    },
                )
            status = _run_command(command, env)
            say("stopping Kafka")
            return status
    except KafkaError as err:
        say(f"error: {err}")
        return EXIT_KAFKA_FAILED
    except (KeyboardInterrupt, _Terminated):
        say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
