"""A broker URL is checked once, before any Kafka client sees it (aiokafka raised OverflowError
for a port above 65535 deep in its connect)."""

from __future__ import annotations

import re

import pytest

from rackplane.streams.config import StreamConfig, bootstrap_of


@pytest.mark.parametrize(
    ("url", "want"),
    [
        pytest.param("kafka://127.0.0.1:9092", "127.0.0.1:9092", id="one address"),
        pytest.param("kafka://a:1,b:65535/", "a:1,b:65535", id="two addresses, a slash"),
        pytest.param("kafka://[::1]:9092", "[::1]:9092", id="an IPv6 address in brackets"),
    ],
)
def test_a_kafka_url_gives_its_bootstrap_addresses(url: str, want: str) -> None:
    assert bootstrap_of(url) == want
    assert StreamConfig(broker=url).bootstrap == want


@pytest.mark.parametrize(
    ("url", "want"),
    [
        pytest.param("kafka://h:99999", "'kafka://h:99999': port '99999' is not a TCP port",
                     id="a port above 65535 (was OverflowError)"),
        pytest.param("kafka://h:0", "port '0' is not a TCP port (1-65535)", id="port 0"),
        pytest.param("kafka://h:-1", "port '-1' is not a TCP port", id="a negative port"),
        pytest.param("kafka://h:９０", "port '９０' is not a TCP port", id="non-ASCII digits"),
        pytest.param("kafka://h:", "port '' is not a TCP port", id="an empty port"),
        pytest.param("kafka://h", "'kafka://h': no port (expected host:port)", id="no port"),
        pytest.param("kafka://:9092", "'kafka://:9092': no host", id="an empty host"),
        pytest.param("kafka://[]:9092", "no host", id="empty brackets"),
        pytest.param("kafka://a b:1", "the host holds a space", id="a space in the host"),
        pytest.param("kafka://a:1,,b:2", "'kafka://a:1,,b:2': '': an empty address",
                     id="an empty address in a list"),
        pytest.param("kafka://a:1,b:x", "'b:x': port 'x' is not a TCP port",
                     id="a list names the address at fault"),
        pytest.param("http://h:1", "'http://h:1': expected kafka://host:port[,host:port]",
                     id="another scheme"),
        pytest.param("h:9092", "expected kafka://host:port", id="no scheme"),
        pytest.param("kafka:///", "expected kafka://host:port", id="no address"),
    ],
)  # fmt: skip
def test_a_bad_broker_url_is_refused_naming_what_is_wrong(url: str, want: str) -> None:
    with pytest.raises(ValueError, match=re.escape(want)):
        bootstrap_of(url)
    with pytest.raises(ValueError, match=re.escape(f"broker {url!r}: ")):
        StreamConfig(broker=url).bootstrap  # noqa: B018
