"""The local Apache Kafka of the fault suite and the ACL tier (`KafkaServer`, `fetch_jars`,
`ACL_USERS`, `KafkaError`, ...): `rackplane.streams.kafka_local` and `kafka_fetch`, the same
code as `scripts/kafka/kafka_server.py` and `rackplane up --kafka`."""

from __future__ import annotations

from types import SimpleNamespace

from rackplane.streams import kafka_fetch, kafka_local


def kafka_server() -> SimpleNamespace:
    """Both modules' public names in one namespace."""
    names = {**vars(kafka_fetch), **vars(kafka_local)}
    return SimpleNamespace(**{k: v for k, v in names.items() if not k.startswith("__")})
