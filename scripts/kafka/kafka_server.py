#!/usr/bin/env python3
"""A throwaway single-node Apache Kafka 4.1.1 broker (KRaft) for the test tiers (`make
test-kafka`, `make test-acl`, `make test-faults`, `make bench-kafka`).

The jars (fetched once by Maven into `~/.cache/rackplane/kafka-4.1.1`) and the broker itself
are `rackplane.streams.kafka_fetch` and `rackplane.streams.kafka_local`, which `rackplane up
--kafka` uses too: this script is their command line.

CLI::

    python scripts/kafka/kafka_server.py run -- .venv/bin/pytest tests/broker -q
    python scripts/kafka/kafka_server.py fetch          # only download the jars
    python scripts/kafka/kafka_server.py serve          # run until Ctrl-C

`run` puts `RACKPLANE_TEST_BROKER=kafka://127.0.0.1:PORT` into CMD's environment and exits
with CMD's status. The broker also listens with SASL_PLAINTEXT + SCRAM-SHA-512 (a user made
at format time): `RACKPLANE_TEST_SASL_BROKER=kafka://127.0.0.1:SASL_PORT`, with
`RACKPLANE_TEST_SASL_USERNAME` / `RACKPLANE_TEST_SASL_PASSWORD`, for the security tests.
`run --acl` starts it instead with an authorizer (`StandardAuthorizer`, nothing allowed
without an ACL) and SASL only: `RACKPLANE_TEST_ACL_BROKER=kafka://127.0.0.1:SASL_PORT`,
`RACKPLANE_TEST_ACL_USERS` (JSON: user -> password, for `admin`, a super user, and the
components' `worker`, `client` and `exporter`, all made at format time) and
`RACKPLANE_TEST_KAFKA_JARS` (the classpath directory: `org.apache.kafka.tools.AclCommand`,
i.e. kafka-acls.sh, is in it). When Kafka cannot be fetched or started it exits with status 3
and says why (with the tail of the Maven output or broker log): it never skips.

Run it with the project's virtualenv's Python (the Makefile does): it imports rackplane.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a checkout not installed

from rackplane.streams.kafka_fetch import KAFKA_VERSION, KafkaError, fetch_jars, say
from rackplane.streams.kafka_local import (
    ACL_USERS,
    SASL_PASSWORD,
    SASL_USERNAME,
    KafkaServer,
)

ENV_VAR = "RACKPLANE_TEST_BROKER"
SASL_ENV_VAR = "RACKPLANE_TEST_SASL_BROKER"
ACL_ENV_VAR = "RACKPLANE_TEST_ACL_BROKER"
EXIT_KAFKA_FAILED = 3


# -- CLI ------------------------------------------------------------------------------------


class _Terminated(Exception):
    """SIGTERM arrived: stop the broker on the way out."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def _run_command(command: list[str], env: dict[str, str]) -> int:
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as err:
        say(f"cannot run {command[0]!r}: {err}")
        return 127
    try:
        return child.wait()
    except (KeyboardInterrupt, _Terminated) as err:
        # Ctrl-C reached the child too (same process group); give it time to finish.
        if isinstance(err, _Terminated):
            child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return 130 if isinstance(err, KeyboardInterrupt) else 143


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="kafka_server.py",
        description=f"Run a throwaway single-node Apache Kafka {KAFKA_VERSION} (KRaft).",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where the jars live (default: $RACKPLANE_CACHE/kafka-4.1.1 or "
        "~/.cache/rackplane/kafka-4.1.1)",
    )
    parser.add_argument("--ready-timeout", type=float, default=120.0, help="seconds (120)")
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="start Kafka, run CMD with RACKPLANE_TEST_BROKER, stop")
    run.add_argument(
        "--acl", action="store_true", help="SASL only, with an authorizer (the ACL tier)"
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    sub.add_parser("fetch", help="only fetch the jars into the cache")
    sub.add_parser("serve", help="start Kafka and keep it running until Ctrl-C")
    args = parser.parse_args(argv)

    command: list[str] = list(getattr(args, "command", None) or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if args.action == "run" and not command:
        parser.error("run needs a command: run -- CMD ARGS...")

    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        jars = fetch_jars(args.cache_dir)
        if args.action == "fetch":
            say(f"jars ready in {jars}")
            return 0
        acl = bool(getattr(args, "acl", False))
        with KafkaServer(jars, ready_timeout=args.ready_timeout, acl=acl) as server:
            if args.action == "serve":
                say(f"serving {server.url}; Ctrl-C stops it")
                with contextlib.suppress(KeyboardInterrupt, _Terminated):
                    while server._process is not None and server._process.poll() is None:
                        time.sleep(0.5)
                return 0
            if acl:
                env = dict(
                    os.environ,
                    **{
                        ACL_ENV_VAR: server.sasl_url,
                        "RACKPLANE_TEST_ACL_USERS": json.dumps(ACL_USERS),
                        "RACKPLANE_TEST_KAFKA_JARS": str(jars),
                    },
                )
            else:
                env = dict(
                    os.environ,
                    **{
                        ENV_VAR: server.url,
                        SASL_ENV_VAR: server.sasl_url,
                        "RACKPLANE_TEST_SASL_USERNAME": SASL_USERNAME,
                        "RACKPLANE_TEST_SASL_PASSWORD": SASL_PASSWORD,
                    },
                )
            status = _run_command(command, env)
            say("stopping Kafka")
            return status
    except KafkaError as err:
        say(f"error: {err}")
        return EXIT_KAFKA_FAILED
    except (KeyboardInterrupt, _Terminated):
        say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
