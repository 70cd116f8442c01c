"""Ask a Kafka-protocol broker on 127.0.0.1 which brokers its cluster lists (Metadata v1 over a
plain socket, standard library only): `kafka_local` is ready when its own broker is listed,
that is after KRaft elected the controller and unfenced the broker."""

from __future__ import annotations

import socket
import struct

HOST = "127.0.0.1"


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
