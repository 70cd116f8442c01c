"""A single-node Apache Kafka 4.1.1 broker (KRaft) on 127.0.0.1, started from the jars that
`kafka_fetch` caches: for `rackplane up --kafka`, the test tiers (`scripts/kafka/kafka_server.py`)
and the fault suite. Standard library only.

Theory of operation
-------------------
1. Configure. A fresh temporary directory gets `server.properties` for one combined
   broker+controller node on 127.0.0.1 (free ports: broker, controller and, unless
   `sasl=False`, a SASL_PLAINTEXT/SCRAM listener with a user made at format time) and a data
   directory, which `kafka.tools.StorageTool format` formats with a new cluster id.
2. Start. `java -Xms512m -Xmx512m -cp 'JARS/*' kafka.Kafka server.properties` in its own
   process group, its output in `kafka.log` in that directory.
3. Ready. Kafka is ready when a Metadata request over plain TCP (`_kafka_wire`) lists our
   broker: that is after KRaft elected the controller and unfenced the broker, so topics can be
   created and written. A port taken meanwhile (BindException) is retried on new ports.
4. Stop. SIGTERM to the process group (a clean controlled shutdown), SIGKILL after a timeout;
   the temporary directory is removed (kept, with its path in the error, when Kafka failed).
5. Hurt (the fault suite, tests/faults). `kill()` SIGKILLs the broker and keeps its directory;
   `restart()` starts it again on the same data directory and ports (so the log survives) and
   waits until it is ready; `pause()` / `resume()` send SIGSTOP / SIGCONT.

`acl=True` starts it instead with an authorizer (`StandardAuthorizer`, nothing allowed without
an ACL) and SASL only, with the users of `ACL_USERS` (`admin` is a super user). Its controller
listener stays PLAINTEXT on 127.0.0.1, as the KRaft quorum's own principal (ANONYMOUS) must be
a super user: on a shared machine that is loopback only; in production the controller listener
belongs on a network of its own.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from rackplane.streams._kafka_wire import HOST, metadata_brokers
from rackplane.streams.kafka_fetch import (
    TAIL_LINES,
    KafkaError,
    Progress,
    require_java,
    say,
    tail,
)

SASL_MECHANISM = "SCRAM-SHA-512"
SASL_USERNAME = "rackplane-test"
SASL_PASSWORD = "rackplane-test-secret"  # a throwaway broker's throwaway user
ACL_USERS = {
    user: f"{user}-rackplane-test-secret" for user in ("admin", "worker", "client", "exporter")
}
"""The ACL broker's users (throwaway passwords of a throwaway broker); `admin` is super."""
_PORT_RETRIES = 3


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
    port: int,
    controller_port: int,
    sasl_port: int,
    data_dir: Path,
    *,
    acl: bool = False,
    sasl: bool = True,
) -> str:
    """One combined broker+controller node on 127.0.0.1 (see STACK_NOTES.md), with a second,
    SASL_PLAINTEXT/SCRAM listener on `sasl_port` unless `sasl` is False (then `sasl_port` is
    not used). `acl`: SASL only (no PLAINTEXT listener for clients; the broker talks to itself
    as `admin`) and an authorizer that allows nothing without an ACL."""
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
    elif not sasl:
        settings |= {
            "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }
        del settings["sasl.enabled.mechanisms"]
        del settings[f"listener.name.sasl_plaintext.{SASL_MECHANISM.lower()}.sasl.jaas.config"]
    return "".join(f"{key}={value}\n" for key, value in settings.items())


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
        sasl: bool = True,
        parent: Path | None = None,
        progress: Progress = say,
    ) -> None:
        """`acl`: the ACL broker (see the module docstring). `render`: server.properties of
        its own, from (port, controller port, SASL port, data directory): a configuration
        under test (the compose file's), with the ACL broker's users; ready when its log
        says it started. `sasl`: open the SASL/SCRAM listener with its test user (not for
        `rackplane up`: a PLAINTEXT listener on 127.0.0.1 only). `parent`: where the
        temporary directory goes (default: the system's). `progress`: told of the start."""
        self.jars = jars
        self.acl = acl or render is not None
        self.sasl = sasl or self.acl
        self.parent = parent
        self.progress = progress
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
        if self.sasl_port is None or not self.sasl:
            raise KafkaError("Kafka is not running with a SASL listener")
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
        require_java(self.java)
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
            self.progress(f"Kafka ready on {self.bootstrap} in {time.monotonic() - started:.1f} s")
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
                self.progress(
                    f"Kafka did not stop in {self.stop_timeout:.0f} s after SIGTERM: killing it"
                )
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
        self.progress(f"Kafka restarted on {self.bootstrap} in {time.monotonic() - started:.1f} s")
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
        self.work_dir = Path(tempfile.mkdtemp(prefix="rackplane-kafka-", dir=self.parent))
        port, controller_port, sasl_port = free_port(), free_port(), free_port()
        while len({port, controller_port, sasl_port}) < 3:
            controller_port, sasl_port = free_port(), free_port()
        properties = self.work_dir / "server.properties"
        data = self.work_dir / "data"
        if self.render is not None:
            properties.write_text(self.render(port, controller_port, sasl_port, data))
        else:
            properties.write_text(
                server_properties(
                    port, controller_port, sasl_port, data, acl=self.acl, sasl=self.sasl
                )
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
            output = "\n".join((fmt.stdout + fmt.stderr).strip().splitlines()[-TAIL_LINES:])
            raise KafkaError(f"formatting Kafka storage failed (exit {fmt.returncode}):\n{output}")

        self._launch(properties, log_path)
        self.port = port
        self.sasl_port = sasl_port
        self._ports = (port, controller_port, sasl_port)
        self._wait_ready(port, log_path)

    def _scram_users(self) -> list[str]:
        if not self.sasl:
            return []
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
