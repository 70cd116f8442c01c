"""What signed commands cost: the controller's decision with and without a signature check,
and a sender's signing.

One decision = `decide` + `evolve` of a `CordonNode`/`UncordonNode` pair's half, sent by an
admin, on a registered cluster of 128 racks: once in a cluster without keys (nothing to
check), once in a cluster that trusts `keys` keys (the signing key last in the list, the
lookup's worst case), where each command is Ed25519-verified over its canonical payload. The
difference is the check's cost per command.

The signed log (`log_run`): what the controller pays to sign each event it appends, what a
reader pays to check one (the first reader of an event verifies it; the worker's other
agents find it in the verified-digest cache), and a rebuild's fold of a cluster's events
(`eventlog._Reading`, the events decoded from their wire form) with and without a
`LogTrust`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from rackplane import logtrust
from rackplane.keyfiles import KeyFile
from rackplane.logtrust import LogTrust
from rackplane.models import (
    Command,
    CordonNode,
    PolicySettings,
    Rack,
    RegisterTopology,
    Role,
    Topology,
    UncordonNode,
)
from rackplane.policies import decide
from rackplane.projections import ClusterState, evolve, initial_state

Progress = Callable[[str], None]
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _cluster(admin: KeyFile, keys: int) -> tuple[ClusterState, list[str]]:
    racks = tuple(
        Rack(id=f"r{r}", pod=f"p{r // 16}", nodes=tuple(f"r{r}-n{i}" for i in range(18)))
        for r in range(128)
    )
    trusted = None
    if keys:
        others = [KeyFile.new(f"user:u{i}").trusted(Role.OPERATOR) for i in range(keys - 1)]
        trusted = (*others, admin.trusted(Role.ADMIN))
    register = RegisterTopology(
        id="reg",
        cluster="bench",
        actor=admin.actor,
        topology=Topology(cluster="bench", racks=racks),
        settings=PolicySettings(keys=trusted),
    )
    state = initial_state("bench")
    for e in decide(state, admin.sign(register), now=T0):
        state = evolve(state, e)
    assert state.registered, "the registration was refused"
    return state, [n for r in racks for n in r.nodes]


def _commands(admin: KeyFile, nodes: list[str], n: int, signed: bool) -> list[Command]:
    out: list[Command] = []
    for i in range(n):
        kind = CordonNode if i % 2 == 0 else UncordonNode
        c = kind(id=f"c{i}", cluster="bench", actor=admin.actor, node=nodes[(i // 2) % len(nodes)])
        out.append(admin.sign(c) if signed else c)
    return out


def _decide_all(state: ClusterState, commands: list[Command]) -> float:
    """Microseconds per command to decide and apply each."""
    now = T0
    started = time.perf_counter()
    for c in commands:
        now += timedelta(seconds=1)
        events = decide(state, c, now=now)
        assert events and events[0].type != "CommandRejected", events
        for e in events:
            state = evolve(state, e)
    return (time.perf_counter() - started) / len(commands) * 1e6


def run(n: int, say: Progress) -> list[dict[str, Any]]:
    admin = KeyFile.new("operator:admin")
    rows: list[dict[str, Any]] = []
    say("signatures: an open cluster")
    state, nodes = _cluster(admin, 0)
    plain = _decide_all(state, _commands(admin, nodes, n, signed=False))
    started = time.perf_counter()
    signed_commands = _commands(admin, nodes, n, signed=True)
    build_and_sign = (time.perf_counter() - started) / n * 1e6
    started = time.perf_counter()
    _commands(admin, nodes, n, signed=False)
    build = (time.perf_counter() - started) / n * 1e6
    rows.append(
        {
            "cluster": "no keys",
            "trusted keys": 0,
            "decide us/command": round(plain, 1),
            "check us/command": 0.0,
            "commands/s (one core)": round(1e6 / plain),
            "sign us/command": round(build_and_sign - build, 1),
        }
    )
    for keys in (1, 100, 1_000):
        say(f"signatures: a cluster trusting {keys} keys")
        state, nodes = _cluster(admin, keys)
        t = _decide_all(state, signed_commands)
        rows.append(
            {
                "cluster": "signed",
                "trusted keys": keys,
                "decide us/command": round(t, 1),
                "check us/command": round(t - plain, 1),
                "commands/s (one core)": round(1e6 / t),
                "sign us/command": None,
            }
        )
    return rows


def _cluster_events(admin: KeyFile, n: int) -> list[Any]:
    """A registration of 128 racks, then `n` cordons and uncordons, as the controller decides
    them (the events, unsigned)."""
    racks = tuple(
        Rack(id=f"r{r}", pod=f"p{r // 16}", nodes=tuple(f"r{r}-n{i}" for i in range(18)))
        for r in range(128)
    )
    nodes = [n for r in racks for n in r.nodes]
    register = RegisterTopology(
        id="reg", cluster="bench", actor=admin.actor,
        topology=Topology(cluster="bench", racks=racks), settings=PolicySettings(),
    )  # fmt: skip
    state = initial_state("bench")
    events = list(decide(state, register, now=T0))
    for e in events:
        state = evolve(state, e)
    now = T0
    for c in _commands(admin, nodes, n, signed=False):
        now += timedelta(seconds=1)
        for e in decide(state, c, now=now):
            state = evolve(state, e)
            events.append(e)
    return events


def _fold(records: list[Any], trust: LogTrust | None) -> float:
    """Microseconds per event of a rebuild's reading of `records`."""
    from rackplane.streams.eventlog import _Reading

    logtrust._verified.clear()  # a rebuild after a restart: nothing verified yet
    started = time.perf_counter()
    reading = _Reading(0, "bench", {}, initial_state, trust)
    for i in range(0, len(records), 500):
        reading.take(records[i : i + 500])
    log = reading.finish(len(records))
    elapsed = time.perf_counter() - started
    assert not log.broken and log.forged == 0, (log.broken, log.forged)
    return elapsed / len(records) * 1e6


def log_run(n: int, say: Progress) -> list[dict[str, Any]]:
    from rackplane.streams.codec import encode_event

    worker = KeyFile.new("worker:bench")
    trust = LogTrust.of([worker.public_key])
    say("signed log: deciding the events")
    events = _cluster_events(KeyFile.new("operator:admin"), n)[1:]  # the cordons
    say("signed log: signing")
    started = time.perf_counter()
    signed = [worker.sign_event(e) for e in events]
    sign = (time.perf_counter() - started) / len(events) * 1e6
    say("signed log: checking")
    logtrust._verified.clear()
    started = time.perf_counter()
    assert all(trust.event_problem(e) is None for e in signed)
    cold = (time.perf_counter() - started) / len(events) * 1e6
    started = time.perf_counter()
    assert all(trust.event_problem(e) is None for e in signed)
    warm = (time.perf_counter() - started) / len(events) * 1e6
    say("signed log: rebuilding")
    head = [worker.sign_event(e) for e in _cluster_events(KeyFile.new("operator:a"), 0)]

    def records(of: list[Any]) -> list[Any]:
        return [
            SimpleNamespace(key=b"bench", value=encode_event(e), offset=i, headers=[])
            for i, e in enumerate(of)
        ]

    plain = records([*head, *events])
    sealed = records([*head, *signed])
    fold_plain = min(_fold(plain, None) for _ in range(3))
    fold_signed = min(_fold(sealed, trust) for _ in range(3))
    return [
        {"step": "controller signs an event", "us/event": round(sign, 1),
         "events/s (one core)": round(1e6 / sign)},
        {"step": "first reader checks it (verify)", "us/event": round(cold, 1),
         "events/s (one core)": round(1e6 / cold)},
        {"step": "another agent checks it (cached)", "us/event": round(warm, 1),
         "events/s (one core)": round(1e6 / warm)},
        {"step": "rebuild fold, unsigned log", "us/event": round(fold_plain, 1),
         "events/s (one core)": round(1e6 / fold_plain)},
        {"step": "rebuild fold, signed log checked", "us/event": round(fold_signed, 1),
         "events/s (one core)": round(1e6 / fold_signed)},
    ]  # fmt: skip
