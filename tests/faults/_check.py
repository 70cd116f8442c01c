"""The one checker every fault case ends with: the log, the decisions, the views, the history.

Theory of operation (after the load stopped and the log went quiet):
1. Read. The whole events, commands and rejected topics, every partition from offset 0 until
   the end offsets are reached and nothing new came for a moment (on Tansu ListOffsets can
   be low after multi-record batches: reading on until quiet covers that).
2. The log. Marker records (empty value + `rackplane-marker` header) are skipped, and so are
   the records the case itself injected (hostile input, by offset). Every other record must
   be an event keyed by its cluster, of a cluster the case registered (else: a phantom
   cluster), all of a cluster's events in one partition. Per cluster the seqs must be 1..N
   without a gap; a seq with two different events is a fork (both offsets named); a second
   identical record is a duplicate, counted and reported (readers skip it by seq).
3. Decisions. The canonical log (the first record of each seq) maps each `causation_id` to its
   seqs: a command is decided once when they form one contiguous run. Each record the case
   sent is held to its `expect`: `decide` (acknowledged, or not acknowledged but found in the
   commands topic: decided exactly once), `reject` (a record of `rejected` names its topic,
   partition and offset, with a reason, and nothing decided it), `either` (exactly one of
   those). Every other record of the commands topic (the policies', the GPU Manager's) must
   be decided or rejected too, and no command anywhere may be decided twice.
4. Views. The state folded from the canonical log equals each worker's controller view
   (`/clusters/{c}/controller/`: seq and `state_digest`) and projections view
   (`/clusters/{c}/racks/` = `rack_occupancy`); `/clusters/` and `/metrics` name no cluster
   the case did not register.
5. History. With `--db`, once the workers stopped: the history holds exactly the canonical
   log's events, per cluster, and no other cluster.
6. Report. The counts go to `<report_dir>/<case>.json` whether the case passes or not; the
   case then asserts that no problem was found.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from rackplane.logtrust import LogTrust
from rackplane.models import COMMANDS, REJECTIONS, Event
from rackplane.projections import (
    ClusterState,
    EventGap,
    WrongCluster,
    evolve,
    initial_state,
    rack_occupancy,
    state_digest,
)
from rackplane.streams.codec import decode_event
from rackplane.streams.config import StreamConfig
from rackplane.streams.eventlog import is_marker
from tests.faults._load import MAX_REQUEST, Sent
from tests.faults._topics import partition_counts
from tests.faults._worker import Supervisor, get_json, get_text, metric_clusters

VIEW_WAIT_S = 20.0
REPORTED = (
    "sent_commands",
    "acked_commands",
    "decided",
    "events",
    "faults_injected",
    "worker_restarts",
    "bad_inputs_tried",
    "lost",
    "decided_twice",
    "forked",
    "gaps",
    "duplicates",
    "history_missing",
)
"""Counts every report carries, 0 when nothing happened."""
MAX_PROBLEMS = 40


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


async def read_topic(config: StreamConfig, name: str, *, timeout: float = 120.0) -> list[Record]:
    """Every record of one of the case's topics, in (partition, offset) order."""
    topic = config.topic(name)
    consumer = AIOKafkaConsumer(
        **config.kafka_options(),
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        max_partition_fetch_bytes=MAX_REQUEST,
        fetch_max_bytes=4 * MAX_REQUEST,
    )
    await consumer.start()
    out: list[Record] = []
    try:
        partitions = (await partition_counts(config)).get(name, 0)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        if not tps:
            return out
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    out.append(
                        Record(r.partition, r.offset, r.key, r.value, tuple(r.headers or ()))
                    )
                    last = time.monotonic()
            reached = all([await consumer.position(tp) >= end[tp] for tp in tps])
            if reached and time.monotonic() - last > 1.5:
                break
    finally:
        await consumer.stop()
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


@dataclass
class Verdict:
    """The counts of one case and the problems found (empty: the case passed)."""

    case: str
    counts: Counter[str] = field(default_factory=Counter)
    facts: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def describe(self) -> str:
        shown = self.problems[:MAX_PROBLEMS]
        more = len(self.problems) - len(shown)
        lines = [f"{self.case}: {len(self.problems)} problem(s)", *(f"  - {p}" for p in shown)]
        if more:
            lines.append(f"  ... and {more} more")
        lines.append(f"  counts: {dict(sorted(self.counts.items()))}")
        return "\n".join(lines)

    def write(self, directory: Path) -> Path:
        path = directory / f"{self.case}.json"
        counts = dict.fromkeys(REPORTED, 0) | dict(self.counts)
        body = {
            "case": self.case,
            "passed": not self.problems,
            "counts": dict(sorted(counts.items())),
            **self.facts,
            "problems": self.problems[:MAX_PROBLEMS],
            "problems_total": len(self.problems),
        }
        path.write_text(json.dumps(body, indent=2, sort_keys=False, default=str) + "\n")
        return path


@dataclass
class Log:
    """The events topic, analysed (step 2 of the module docstring)."""

    canonical: dict[str, list[Event]]
    """Per registered cluster, the first record of each seq, in seq order."""
    caused: dict[tuple[str, str], list[int]]
    """(cluster, causation_id) -> seqs over the canonical log (command ids are unique per
    cluster: the policies' are `tas:<seq>:<n>`)."""


def analyse_log(
    records: Sequence[Record], clusters: set[str], injected: set[tuple[int, int]], v: Verdict
) -> Log:
    """Step 2: gaps, forks, duplicates, phantom clusters, misfiled records."""
    copies: dict[str, dict[int, list[tuple[Record, Event]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    partitions: dict[str, set[int]] = defaultdict(set)
    phantoms: Counter[str] = Counter()
    for r in records:
        if is_marker(r.headers):
            v.counts["log_markers"] += 1
            continue
        if (r.partition, r.offset) in injected:
            v.counts["log_injected_records"] += 1
            continue
        try:
            event = decode_event(r.value or b"")
        except ValidationError:
            v.counts["log_undecodable"] += 1
            v.problem(f"events[{r.partition}]@{r.offset}: a record that is not an event")
            continue
        if r.key != event.cluster.encode():
            v.counts["log_misfiled"] += 1
            v.problem(
                f"events[{r.partition}]@{r.offset}: {event.cluster} seq {event.seq} keyed {r.key!r}"
            )
        if event.cluster not in clusters:
            phantoms[event.cluster] += 1
            continue
        copies[event.cluster][event.seq].append((r, event))
        partitions[event.cluster].add(r.partition)
    if phantoms:
        v.counts["phantom_clusters_in_log"] = len(phantoms)
        v.counts["phantom_events_in_log"] = sum(phantoms.values())
        v.problem(
            f"{len(phantoms)} cluster(s) never registered have {sum(phantoms.values())} events "
            f"in the log (e.g. {sorted(phantoms)[:3]})"
        )
    canonical: dict[str, list[Event]] = {}
    caused: dict[tuple[str, str], list[int]] = defaultdict(list)
    for cluster in sorted(clusters):
        by_seq = copies.get(cluster, {})
        if len(partitions[cluster]) > 1:
            v.problem(f"{cluster}: events in partitions {sorted(partitions[cluster])}")
        top = max(by_seq, default=0)
        gaps = [s for s in range(1, top + 1) if s not in by_seq]
        if gaps:
            v.counts["gaps"] += len(gaps)
            v.problem(f"{cluster}: {len(gaps)} seq(s) missing of 1..{top}, first {gaps[:5]}")
        events: list[Event] = []
        for seq in sorted(by_seq):
            found = by_seq[seq]
            first_record, first = found[0]
            distinct = [first]
            for record, e in found[1:]:
                if e == first or e in distinct:
                    v.counts["duplicates"] += 1
                    continue
                distinct.append(e)
                v.counts["forked"] += 1
                v.problem(
                    f"{cluster} seq {seq} forked: {first.type} ({first.causation_id}) at "
                    f"events[{first_record.partition}]@{first_record.offset} vs {e.type} "
                    f"({e.causation_id}) at events[{record.partition}]@{record.offset}"
                )
            events.append(first)
            if first.causation_id is not None:
                caused[(cluster, first.causation_id)].append(seq)
        canonical[cluster] = events
        v.counts["events"] += len(events)
        _in_command_order(cluster, events, v)
    return Log(canonical, caused)


def _in_command_order(cluster: str, events: Sequence[Event], v: Verdict) -> None:
    """Commands are decided in the order of their partition: along a cluster's log the
    command offset never goes back (a command decided after a later one is taken for decided
    by position and dropped)."""
    last: dict[int, tuple[int, int]] = {}  # command partition -> (offset, seq)
    for e in events:
        p, o = e.command_partition, e.command_offset
        if p is None or o is None:
            continue
        before = last.get(p)
        if before is not None and o < before[0]:
            v.counts["decided_out_of_order"] += 1
            v.problem(
                f"{cluster} seq {e.seq}: decided commands[{p}]@{o} after commands[{p}]@"
                f"{before[0]} (seq {before[1]})"
            )
        last[p] = (o, e.seq) if before is None or o >= before[0] else before


def fold_log(log: Log, cluster: str, v: Verdict) -> ClusterState:
    """The state the canonical log folds to (up to the first event that does not apply)."""
    state = initial_state(cluster)
    for e in log.canonical.get(cluster, []):
        try:
            state = evolve(state, e)
        except (EventGap, WrongCluster) as err:
            v.problem(f"{cluster}: the log folds only to seq {state.seq}: {err}")
            break
    return state


def _run(seqs: list[int]) -> bool:
    """True for one contiguous run of seqs."""
    numbers = sorted(seqs)
    return numbers == list(range(numbers[0], numbers[-1] + 1))


def check_decisions(
    log: Log,
    commands: Sequence[Record],
    rejections: Sequence[Record],
    sent: Sequence[Sent],
    prefix: str,
    v: Verdict,
) -> None:
    """Step 3: every record held to its expectation; every command decided at most once."""
    rejected: dict[tuple[str, int, int], list[str]] = defaultdict(list)
    for r in rejections:
        try:
            rej = REJECTIONS.validate_json(r.value or b"")
        except ValidationError:
            continue  # the case's own garbage on the rejected topic
        if rej.partition is not None and rej.offset is not None:
            short = rej.source_topic.removeprefix(f"{prefix}.")
            rejected[(short, rej.partition, rej.offset)].append(rej.reason)
    ids_at: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for r in commands:
        try:
            c = COMMANDS.validate_json(r.value or b"")
        except ValidationError:
            continue
        ids_at[(c.cluster, c.id)].append((r.partition, r.offset))

    for (cluster, cause), seqs in log.caused.items():
        if not _run(seqs):
            v.counts["decided_twice"] += 1
            v.problem(f"{cluster}: command {cause} decided more than once: seqs {sorted(seqs)[:8]}")

    in_topic = {(r.partition, r.offset) for r in commands}
    ours: set[tuple[str, int, int]] = set()
    for s in sent:
        v.counts[f"sent_{s.topic}"] += 1
        where: list[tuple[int, int]] = []
        if s.acked and s.partition is not None and s.offset is not None:
            v.counts[f"acked_{s.topic}"] += 1
            where = [(s.partition, s.offset)]
        elif s.acked is False:
            v.counts[f"not_acked_{s.topic}"] += 1
            if s.topic == "commands" and (s.cluster, s.command_id) in ids_at:
                where = ids_at[(s.cluster or "", s.command_id or "")]  # durable all the same
                v.counts["not_acked_but_in_log"] += 1
        else:
            v.counts[f"unanswered_{s.topic}"] += 1
        ours.update((s.topic, p, o) for p, o in where)
        if not where or s.expect == "none":
            continue
        decided = log.caused.get((s.cluster or "", s.command_id or ""), [])
        reasons = [reason for p, o in where for reason in rejected.get((s.topic, p, o), [])]
        if s.topic == "commands" and not any(w in in_topic for w in where):
            # the broker acknowledged a record it does not hold: a broker's loss, not the
            # worker's (still counted lost)
            v.counts["acked_not_in_topic"] += 1
            v.problem(f"{s.kind} {s.command_id}: acknowledged at {where}, not in the topic")
        _hold(s, decided, reasons, v)

    for r in commands:  # the policies' and the GPU Manager's commands, and any other
        if ("commands", r.partition, r.offset) in ours:
            continue
        v.counts["commands_by_agents"] += 1
        try:
            command = COMMANDS.validate_json(r.value or b"")
        except ValidationError:
            command = None
        if command is not None and (command.cluster, command.id) in log.caused:
            continue
        if rejected.get(("commands", r.partition, r.offset)):
            continue
        v.counts["lost"] += 1
        what = f"{command.type} {command.id}" if command else "an undecodable record"
        v.problem(f"commands[{r.partition}]@{r.offset} ({what}) neither decided nor rejected")


def _hold(s: Sent, decided: list[int], reasons: list[str], v: Verdict) -> None:
    label = f"{s.kind} {s.command_id or ''} ({s.topic}[{s.partition}]@{s.offset})".strip()
    once = bool(decided) and _run(decided)
    if s.expect == "decide":
        if not decided:
            v.counts["lost"] += 1
            v.problem(f"{label}: acknowledged, never decided")
        elif not once:
            v.counts["doubled"] += 1
        else:
            v.counts["decided"] += 1
        if reasons:
            v.problem(f"{label}: decided and also rejected ({reasons[0]})")
        return
    v.counts["bad_inputs_tried"] += 1
    if s.expect == "reject":
        if decided:
            v.counts["bad_inputs_decided"] += 1
            v.problem(f"{label}: bad input decided at seqs {sorted(decided)[:3]}")
        if not reasons:
            v.counts["bad_inputs_not_rejected"] += 1
            v.problem(f"{label}: bad input not in rejected")
        elif not all(r.strip() for r in reasons):
            v.problem(f"{label}: rejected without a reason")
        else:
            v.counts["bad_inputs_rejected"] += 1
        return
    # either: decided once or rejected, not both, not neither
    if decided and reasons:
        v.problem(f"{label}: decided and rejected")
    elif decided and not once:
        v.counts["doubled"] += 1
    elif not decided and not reasons:
        v.counts["lost"] += 1
        v.problem(f"{label}: neither decided nor rejected")
    else:
        v.counts["bad_inputs_rejected" if reasons else "bad_inputs_decided_once"] += 1


async def check_views(
    log: Log, workers: Sequence[Supervisor], clusters: set[str], v: Verdict
) -> None:
    """Step 4: each worker's views against the folded log; no phantom cluster."""
    await asyncio.gather(*(_cluster_views(log, workers, c, v) for c in sorted(clusters)))
    for w in workers:
        status, listed = await asyncio.to_thread(get_json, f"{w.web}/clusters/")
        names = {c.get("cluster") for c in listed} if status == 200 and listed else set()
        phantom = names - clusters
        metrics = await asyncio.to_thread(get_text, f"{w.web}/metrics")
        phantom_metrics = metric_clusters(metrics or "") - clusters
        v.counts["phantom_clusters_in_views"] = max(
            v.counts["phantom_clusters_in_views"], len(phantom | phantom_metrics)
        )
        if phantom:
            v.problem(
                f"{w.name}: /clusters/ lists {len(phantom)} unregistered: {sorted(phantom)[:3]}"
            )
        if phantom_metrics:
            v.problem(
                f"{w.name}: /metrics has {len(phantom_metrics)} unregistered clusters: "
                f"{sorted(phantom_metrics)[:3]}"
            )


async def _cluster_views(log: Log, workers: Sequence[Supervisor], cluster: str, v: Verdict) -> None:
    folded = fold_log(log, cluster, v)
    want = {"cluster": cluster, "seq": folded.seq, "digest": state_digest(folded), "broken": None}
    want_racks = [r.model_dump(mode="json") for r in rack_occupancy(folded)]
    held = 0
    for w in workers:
        live = await _poll(f"{w.web}/clusters/{cluster}/controller/", lambda b: b == want)
        if live[0] == 404:
            continue
        held += 1
        if live != (200, want):
            v.counts["views_differ"] += 1
            v.problem(f"{cluster}: {w.name}'s controller says {live[1]}, the log folds to {want}")
        racks = await _poll(f"{w.web}/clusters/{cluster}/racks/", lambda b: b == want_racks)
        if racks != (200, want_racks):
            v.counts["views_differ"] += 1
            v.problem(f"{cluster}: {w.name}'s /racks/ differs from the folded log's occupancy")
    if not held:
        v.problem(f"{cluster}: no worker holds its state (controller view 404 everywhere)")


async def _poll(url: str, good: Any) -> tuple[int, Any]:
    deadline = time.monotonic() + VIEW_WAIT_S
    while True:
        status, body = await asyncio.to_thread(get_json, url)
        if status == 404 or (status == 200 and good(body)) or time.monotonic() > deadline:
            return status, body
        await asyncio.sleep(0.3)


def check_signed(log: Log, trust: LogTrust, v: Verdict) -> None:
    """Every event of the canonical log is signed by the worker's key and verifies."""
    for cluster, events in sorted(log.canonical.items()):
        for e in events:
            why = trust.event_problem(e)
            if why is None:
                v.counts["events_signed"] += 1
            else:
                v.counts["events_not_signed"] += 1
                v.problem(f"{cluster} seq {e.seq} ({e.type}): {why}")


def check_history(dbs: Sequence[Path], log: Log, clusters: set[str], v: Verdict) -> None:
    """Step 5: the history holds exactly the canonical log (workers stopped). With two
    workers each recorded into its own file what it was assigned: their union, by seq."""
    from rackplane.history import HistoryError, open_history

    stored: dict[str, dict[int, Event]] = defaultdict(dict)
    for db in dbs:
        try:
            history = open_history(db)
        except HistoryError as err:
            v.problem(f"history: {err}")
            return
        with history:
            for cluster in history.clusters():
                for e in history.events(cluster):
                    held = stored[cluster].setdefault(e.seq, e)
                    if held != e:
                        v.problem(f"{cluster} seq {e.seq}: two histories hold different events")
    phantom = set(stored) - clusters
    if phantom:
        v.counts["phantom_clusters_in_history"] = len(phantom)
        v.problem(f"history has {len(phantom)} unregistered clusters: {sorted(phantom)[:3]}")
    for cluster in sorted(clusters):
        got = [stored[cluster][s] for s in sorted(stored.get(cluster, {}))]
        want = log.canonical.get(cluster, [])
        v.counts["history_events"] += len(got)
        if got == want:
            continue
        by_seq = {e.seq: e for e in want}
        missing = set(by_seq) - {e.seq for e in got}
        extra = {e.seq for e in got} - set(by_seq)
        differ = [e.seq for e in got if e.seq in by_seq and e != by_seq[e.seq]]
        v.counts["history_missing"] += len(missing)
        v.problem(
            f"{cluster}: history holds {len(got)} events, the log {len(want)}: "
            f"{len(missing)} missing (first {sorted(missing)[:3]}), {len(extra)} extra, "
            f"{len(differ)} different"
        )


async def check_all(
    case: str,
    config: StreamConfig,
    *,
    sent: Sequence[Sent],
    clusters: set[str],
    workers: Sequence[Supervisor],
    stop_workers: Any,
    dbs: Sequence[Path] = (),
    v: Verdict | None = None,
    trust: LogTrust | None = None,
) -> Verdict:
    """Steps 1-5; `stop_workers` (an async callable) runs between the views and the history.
    `trust`: the worker's key signs the log; every canonical event must carry its signature
    (the history holds the same events, signatures included: step 5)."""
    v = v or Verdict(case)
    injected = {
        (s.partition, s.offset)
        for s in sent
        if s.topic == "events" and s.partition is not None and s.offset is not None
    }
    records = await read_topic(config, "events")
    commands = await read_topic(config, "commands")
    rejections = await read_topic(config, "rejected")
    v.counts["rejections"] = len(rejections)
    log = analyse_log(records, clusters, injected, v)
    if trust is not None:
        check_signed(log, trust, v)
    check_decisions(log, commands, rejections, sent, config.prefix, v)
    await check_views(log, workers, clusters, v)
    await stop_workers()
    for w in workers:
        v.counts["worker_restarts"] += w.seen.restarts
        v.counts["worker_exits"] += len(w.seen.exits)
        v.counts["worker_kills"] += w.seen.kills
        v.facts.setdefault("worker_exit_statuses", {})[w.name] = w.seen.exits[:20]
    if dbs:
        check_history(dbs, log, clusters, v)
    return v
