"""Streaming shell: the embedded broker, wire codecs (and, later, the Faust app and agents)."""

from rackplane.streams.codec import (
    command_key,
    decode_command,
    decode_event,
    encode_command,
    encode_event,
    event_key,
)
from rackplane.streams.embedded import EmbeddedBroker, EmbeddedBrokerError, free_port

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
