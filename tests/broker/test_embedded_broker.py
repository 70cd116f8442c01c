"""The embedded Tansu broker starts where it says, refuses a taken port, and cleans up."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rackplane.streams import EmbeddedBroker, EmbeddedBrokerError, embedded

pytestmark = pytest.mark.broker


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 with someone else listening on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_embedded_broker_answers_where_it_says_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    log = tmp_path / "tansu.log"
    with EmbeddedBroker(log_path=log) as broker:
        assert broker.url == f"kafka://{broker.bootstrap}"
        assert broker.bootstrap == f"127.0.0.1:{broker.port}"
        socket.create_connection(("127.0.0.1", broker.port), timeout=1).close()
        pid = broker.pid
    assert pid is not None
    assert not broker.running
    assert not _alive(pid)
    assert log.exists(), "a log path passed in is kept"


def test_the_embedded_broker_stops_when_the_block_raises() -> None:
    broker = EmbeddedBroker()
    pids: list[int | None] = []

    def use_and_fail() -> None:
        with broker:
            pids.append(broker.pid)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        use_and_fail()
    assert pids[0] is not None
    assert not _alive(pids[0])
    assert broker.log_path is None, "a temporary log is removed"


def test_starting_on_a_port_in_use_fails_with_an_error_naming_the_port(taken_port: int) -> None:
    broker = EmbeddedBroker(port=taken_port)
    with pytest.raises(EmbeddedBrokerError, match=f"port {taken_port} .* in use"):
        broker.start()
    assert not broker.running
    assert broker.log_path is None, "a failed start removes its temporary log"


def test_losing_the_race_for_the_port_is_reported_not_mistaken_for_ready(
    taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Someone takes the port between the pre-check and Tansu's bind: Tansu panics, and the
    # listener that answers is not Tansu's.
    monkeypatch.setattr(embedded, "_port_is_taken", lambda port: False)
    with pytest.raises(EmbeddedBrokerError, match=f"port {taken_port} .* in use"):
        EmbeddedBroker(port=taken_port).start()


def test_the_broker_dies_with_a_parent_that_was_killed() -> None:
    import subprocess
    import sys
    import time

    code = (
        "import os, sys\n"
        "from rackplane.streams import EmbeddedBroker\n"
        "b = EmbeddedBroker().start()\n"
        "print(b.pid, flush=True)\n"
        "os._exit(0)  # no atexit, no stop(): as if killed\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    pid = int(out.stdout.strip())
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().split()[2]
        except FileNotFoundError:
            return
        if state == "Z":  # exited, waiting to be reaped by init
            return
        time.sleep(0.1)
    raise AssertionError(f"broker {pid} outlived its parent")
