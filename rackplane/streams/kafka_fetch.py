"""Apache Kafka 4.1.1's jars, fetched once by Maven into a cache keyed by version.

The broker classpath is `org.apache.kafka:kafka_2.13:4.1.1` and its runtime dependencies plus
an slf4j binding (`kafka_pom.xml` beside this file). Maven copies them into
`$RACKPLANE_CACHE/kafka-4.1.1`, else `~/.cache/rackplane/kafka-4.1.1`. The download goes to a
sibling temporary directory that is renamed into place only when complete, and it is skipped
when the cache holds `kafka_2.13-4.1.1.jar` with `kafka/Kafka.class` inside (and the tools jar
with `AclCommand`). Used by `rackplane up --kafka`, `scripts/kafka/kafka_server.py` (the test
tiers) and the benchmarks: one implementation. Standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
BROKER_JAR = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar"
TOOLS_JAR = f"kafka-tools-{KAFKA_VERSION}.jar"
POM = Path(__file__).resolve().with_name("kafka_pom.xml")
JAVA_MIN = 17
"""Kafka 4.x brokers need Java 17 or newer."""
FETCH_TIMEOUT_S = 900.0
TAIL_LINES = 40
_PROGRESS_EVERY_S = 5.0
_DOWNLOADED = re.compile(r"Downloaded from \S+: \S+ \(([\d.]+) (B|kB|KB|MB|GB)")
_UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}

Progress = Callable[[str], None]


class KafkaError(RuntimeError):
    """Kafka could not be fetched or started. The first line of the message says why."""


def say(message: str) -> None:
    """Print one progress line to stderr (a command's stdout stays its own)."""
    print(f"[kafka] {message}", file=sys.stderr, flush=True)


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """Return the last `lines` lines of a text file, or a note when it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(cannot read {path})"
    return "\n".join(text.strip().splitlines()[-lines:]) or f"({path} is empty)"


def default_cache_dir() -> Path:
    """`$RACKPLANE_CACHE/kafka-4.1.1`, else `~/.cache/rackplane/kafka-4.1.1`."""
    root = os.environ.get("RACKPLANE_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "rackplane"
    return base / f"kafka-{KAFKA_VERSION}"


def jars_are_complete(directory: Path) -> bool:
    """True when `directory` holds the broker jar with `kafka/Kafka.class` inside, and the
    tools jar with `AclCommand` (a cache from before the ACL tier lacks it: fetched again)."""
    wanted = (
        (BROKER_JAR, "kafka/Kafka.class"),
        (TOOLS_JAR, "org/apache/kafka/tools/AclCommand.class"),
    )
    try:
        for jar, entry in wanted:
            with zipfile.ZipFile(directory / jar) as archive:
                archive.getinfo(entry)
    except (OSError, KeyError, zipfile.BadZipFile):
        return False
    return True


def java_major(java: str = "java") -> int | None:
    """The major version of `java` (`java -version`), None when it does not run or says
    nothing recognisable."""
    try:
        done = subprocess.run(
            [java, "-version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if found is None:
        return None
    major = int(found.group(1))
    # Java 8 and older say "1.8.0_..."
    return int(found.group(2) or 0) if major == 1 else major


def require_java(java: str = "java") -> str:
    """The path of `java` when it is Java 17 or newer.

    Raises:
        KafkaError: `java` is not on PATH, or older than 17 (one line).
    """
    path = shutil.which(java)
    if path is None:
        raise KafkaError(
            f"`{java}` is not on PATH: Apache Kafka {KAFKA_VERSION} needs Java {JAVA_MIN}+ "
            f"(e.g. apt-get install openjdk-{JAVA_MIN}-jre-headless)"
        )
    major = java_major(path)
    if major is None or major < JAVA_MIN:
        seen = "an unknown version" if major is None else f"Java {major}"
        raise KafkaError(f"{path} is {seen}: Apache Kafka {KAFKA_VERSION} needs Java {JAVA_MIN}+")
    return path


def kafka_unavailable(cache_dir: Path | None = None, java: str = "java") -> str | None:
    """Why a local Kafka cannot be started here (one line), or None when it can: Java 17+ on
    PATH, and the jars in `cache_dir` (default: `default_cache_dir()`) or Maven to fetch them.
    What `rackplane up` asks before it chooses its broker; it fetches nothing."""
    try:
        require_java(java)
    except KafkaError as err:
        return str(err)
    target = (cache_dir or default_cache_dir()).expanduser()
    if jars_are_complete(target) or shutil.which("mvn") is not None:
        return None
    return (
        f"Maven (`mvn`) is not on PATH and {target} lacks the Apache Kafka {KAFKA_VERSION} "
        "jars (e.g. apt-get install maven)"
    )


def fetch_jars(
    cache_dir: Path | None = None, progress: Progress = say, timeout: float = FETCH_TIMEOUT_S
) -> Path:
    """Make sure the broker classpath is in `cache_dir`; download it with Maven if not.

    Args:
        cache_dir: Where the jars live (default: `default_cache_dir()`).
        progress: Told what happens, a line at a time: the start, what Maven downloaded so
            far (every few seconds) and the end.
        timeout: Seconds Maven may take; it is killed after them (an error).

    Returns:
        The directory holding the jars.

    Raises:
        KafkaError: Maven is missing or failed, or the result lacks the broker. The first line
            of the message says why; the lines after it are the tail of Maven's output.
    """
    target = (cache_dir or default_cache_dir()).expanduser().resolve()
    if jars_are_complete(target):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaError(
            f"Maven (`mvn`) is not on PATH: it fetches the Apache Kafka {KAFKA_VERSION} jars "
            f"once into {target} (e.g. apt-get install maven)"
        )
    progress(f"fetching Apache Kafka {KAFKA_VERSION} jars with Maven into {target} (once) ...")
    started = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        command = [mvn, "-B", "-f", str(POM), "dependency:copy-dependencies",
                   "-DincludeScope=runtime", f"-DoutputDirectory={staging}"]  # fmt: skip
        code, output, timed_out = _run_maven(command, started, progress, timeout)
        if timed_out:
            raise KafkaError(f"Maven did not fetch the Kafka jars within {timeout:.0f} s\n{output}")
        if code != 0:
            raise KafkaError(f"Maven failed to fetch the Kafka jars (exit {code})\n{output}")
        if not jars_are_complete(staging):
            raise KafkaError(f"Maven finished but {BROKER_JAR} or {TOOLS_JAR} is incomplete")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    count = len(list(target.glob("*.jar")))
    progress(f"fetched {count} jars in {time.monotonic() - started:.1f} s")
    return target


def _run_maven(
    command: list[str], started: float, progress: Progress, timeout: float = FETCH_TIMEOUT_S
) -> tuple[int, str, bool]:
    """Run Maven, telling `progress` what it downloaded every few seconds; return its exit
    status, the tail of its output and whether it was killed after `timeout` seconds."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    lines: list[str] = []
    files, size, told = 0, 0.0, time.monotonic()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip())
            del lines[:-TAIL_LINES]
            found = _DOWNLOADED.search(line)
            if found is not None:
                files += 1
                size += float(found.group(1)) * _UNITS[found.group(2)]
            if files and time.monotonic() - told >= _PROGRESS_EVERY_S:
                told = time.monotonic()
                progress(f"  downloaded {files} files, {size / 1e6:.1f} MB "
                         f"({told - started:.0f} s)")  # fmt: skip
        code = process.wait()
    except BaseException:  # Ctrl-C or SIGTERM: Maven goes too
        process.kill()
        process.wait()
        raise
    finally:
        timer.cancel()
    timed_out = code == -9 and time.monotonic() - started >= timeout
    if timed_out:
        lines.append(f"(killed after {timeout:.0f} s)")
    return code, "\n".join(lines), timed_out
