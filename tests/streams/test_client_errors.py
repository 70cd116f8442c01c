"""A client of the pipeline says plainly when no broker answers, and soon."""

from __future__ import annotations

import asyncio
import socket

import pytest

from rackplane.streams.client import BrokerUnreachable, Client
from rackplane.streams.config import StreamConfig


async def test_a_listener_that_never_answers_is_given_up_on_within_the_connect_timeout() -> None:
    with socket.socket() as silent:  # takes connections, says nothing (not Kafka)
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        config = StreamConfig(broker=f"kafka://127.0.0.1:{port}")
        started = asyncio.get_running_loop().time()
        with pytest.raises(BrokerUnreachable, match="gave no Kafka answer within 1 s"):
            async with Client(config, connect_timeout=1.0):
                pass
        assert asyncio.get_running_loop().time() - started < 10


async def test_nothing_listening_is_said_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        config = StreamConfig(broker=f"kafka://127.0.0.1:{port}")
        with pytest.raises(
            BrokerUnreachable, match=f"could not connect to a broker at 127.0.0.1:{port}"
        ):
            async with Client(config):
                pass
