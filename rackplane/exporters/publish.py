"""The exporters' loop: read a source every interval and publish its samples, keyed by cluster."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rackplane.models import NodeTelemetry

if TYPE_CHECKING:
    from rackplane.streams.config import StreamConfig

Source = Callable[[datetime], list[NodeTelemetry]]
"""Reads the node(s) now; may block (it runs in a thread)."""
Wait = Callable[[float], None]
"""Blocks up to the given seconds (the NVML exporter collects XID events meanwhile)."""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_interval(text: str) -> float:
    """'10s', '500ms', '2m', '1h' or plain seconds -> seconds (> 0).

    Raises:
        ValueError: not a positive duration.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text)
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"interval {text!r}: expected a positive duration such as 10s, 500ms, 2m")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


async def publish(
    config: StreamConfig,
    source: Source,
    *,
    interval: float,
    wait: Wait | None = None,
    count: int | None = None,
    on_sent: Callable[[int, list[NodeTelemetry]], None] | None = None,
) -> int:
    """Every `interval`: read `source`, send its samples, await the broker's acks.

    Args:
        config: the system's broker and topic prefix.
        source: what to read.
        interval: seconds between reads.
        wait: how to spend the time between reads (default: sleep).
        count: stop after this many reads (default: until cancelled).
        on_sent: called after each read's samples are acknowledged (round, samples).

    Returns:
        How many samples were sent.
    """
    from rackplane.streams.client import Client

    sent = 0
    rounds = 0
    async with Client(config) as client:
        while count is None or rounds < count:
            started = time.monotonic()
            samples = await asyncio.to_thread(source, datetime.now(UTC))
            futures = [await client.send_telemetry(s) for s in samples]
            await asyncio.gather(*futures)
            sent += len(samples)
            rounds += 1
            if on_sent is not None:
                on_sent(rounds, samples)
            if count is not None and rounds >= count:
                break
            left = interval - (time.monotonic() - started)
            if left > 0:
                if wait is None:
                    await asyncio.sleep(left)
                else:
                    await asyncio.to_thread(wait, left)
    return sent
