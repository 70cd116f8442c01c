"""Streaming shell: the embedded broker, wire codecs (and, later, the Faust app and agents)."""

from rackplane.streams import _fetch_wait
from rackplane.streams.codec import (
    command_key,
    decode_command,
    decode_event,
    encode_command,
    encode_event,
    event_key,
)
from rackplane.streams.embedded import EmbeddedBroker, EmbeddedBrokerError, free_port

# Every aiokafka consumer of the process, Faust's included: a fetch answered empty while data
# waits (Tansu, long partitions) is asked again with a longer wait (see `_fetch_wait`).
_fetch_wait.apply()

__all__ = [
    "EmbeddedBroker",
    "EmbeddedBrokerError",
    "command_key",
    "decode_command",
    "decode_event",
    "encode_command",
    "encode_event",
    "event_key",
    "free_port",
]
