"""`kafka_fetch`: whether a local Kafka can be started here (what `rackplane up` asks before it
chooses its broker), and a fetch that takes too long is stopped with the reason. Fake `java`
and `mvn` on a PATH of their own; nothing is downloaded."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rackplane.streams.kafka_fetch import (
    KAFKA_VERSION,
    POM,
    SCALA_VERSION,
    KafkaError,
    fetch_jars,
    kafka_unavailable,
)
from tests.fake_tools import fake_tool


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The only PATH: no java, no mvn until a test puts a fake one there."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    return path


JAVA_17 = "echo 'openjdk version \"17.0.15\" 2025-04-15' >&2"


def test_without_java_kafka_is_unavailable_and_says_why(bin_dir: Path, tmp_path: Path) -> None:
    why = kafka_unavailable(tmp_path / "cache")
    assert why is not None and "`java` is not on PATH" in why and "Java 17+" in why


def test_an_old_java_makes_kafka_unavailable(bin_dir: Path, tmp_path: Path) -> None:
    fake_tool(bin_dir, "java", "echo 'openjdk version \"11.0.22\" 2024-01-16' >&2")
    why = kafka_unavailable(tmp_path / "cache")
    assert why is not None and "is Java 11" in why


def test_java_without_jars_or_maven_makes_kafka_unavailable(bin_dir: Path, tmp_path: Path) -> None:
    fake_tool(bin_dir, "java", JAVA_17)
    why = kafka_unavailable(tmp_path / "cache")
    assert why is not None
    assert "Maven (`mvn`) is not on PATH" in why and str(tmp_path / "cache") in why


def test_java_and_maven_make_kafka_available_without_fetching(
    bin_dir: Path, tmp_path: Path
) -> None:
    fake_tool(bin_dir, "java", JAVA_17)
    fake_tool(bin_dir, "mvn", f"/usr/bin/touch {tmp_path / 'mvn-ran'}")
    assert kafka_unavailable(tmp_path / "cache") is None
    assert not (tmp_path / "mvn-ran").exists()  # asking fetches nothing


def test_a_fetch_past_its_timeout_is_stopped_with_the_reason(bin_dir: Path, tmp_path: Path) -> None:
    fake_tool(bin_dir, "mvn", "echo 'Downloading from central: ...'; exec /bin/sleep 60")
    started = time.monotonic()
    with pytest.raises(KafkaError) as caught:
        fetch_jars(tmp_path / "cache", progress=lambda _: None, timeout=1.0)
    assert time.monotonic() - started < 30
    first, _, rest = str(caught.value).partition("\n")
    assert first == "Maven did not fetch the Kafka jars within 1 s"
    assert "Downloading from central" in rest and "(killed after 1 s)" in rest
    assert not (tmp_path / "cache").exists()  # nothing half-fetched where a later run looks


def test_the_pom_maven_reads_is_well_formed_xml_and_names_the_broker_and_tools_jars() -> None:
    """The fake `mvn` above never reads the POM, and the test tiers skip Maven once the jars
    are cached: a POM Maven refuses (a double hyphen in a comment did) shows only on a cold
    cache. Maven's parser is a strict XML parser, as is this one."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(POM).getroot()
    assert root.findtext("m:properties/m:kafka.version", namespaces=ns) == KAFKA_VERSION
    wanted = {
        ("org.apache.kafka", f"kafka_{SCALA_VERSION}"),
        ("org.apache.kafka", "kafka-tools"),
        ("org.slf4j", "slf4j-simple"),
    }
    named = {
        (d.findtext("m:groupId", namespaces=ns), d.findtext("m:artifactId", namespaces=ns))
        for d in root.iterfind("m:dependencies/m:dependency", ns)
    }
    assert wanted <= named
