"""Time travel: the state replayed from the history at seq N is the live state after event N."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackplane.engine import Engine
from rackplane.history import DuckDBAuditSink, open_history, state_at
from rackplane.models import (
    CancelJob,
    Command,
    CompleteJob,
    CordonNode,
    Health,
    JobKind,
    RepairNode,
    ReportNodeHealth,
    StartJob,
    SubmitJob,
)
from rackplane.policies import default_policies
from rackplane.projections import ClusterState, state_digest
from tests.builders import CLUSTER, T0, job, rack, register
from tests.history.conftest import Recorded

RACKS = [rack("r01", 6), rack("r02", 6, pod="p2"), rack("r03", 6, pod="p2")]
NODES = [n for r in RACKS for n in r.nodes]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(1, 12), st.sampled_from(list(JobKind))),
        st.tuples(st.sampled_from(["start", "complete", "cancel"]), st.integers(0, 20)),
        st.tuples(st.sampled_from(["fail", "repair", "cordon"]), st.sampled_from(NODES)),
    ),
    min_size=1,
    max_size=40,
)


def command(op: tuple[object, ...], n: int, state: ClusterState) -> Command:
    common = {"id": f"op-{n}", "cluster": CLUSTER, "actor": "test"}
    jobs = sorted(state.jobs) or ["none"]
    match op:
        case ("submit", nodes, kind):
            return SubmitJob(**common, job=job(f"j{n}", nodes, slice_size=4, kind=kind))
        case ("start" | "complete" | "cancel" as verb, i):
            make = {"start": StartJob, "complete": CompleteJob, "cancel": CancelJob}[verb]
            return make(**common, job=jobs[i % len(jobs)])  # type: ignore[arg-type,no-any-return]
        case ("fail", node):
            return ReportNodeHealth(**common, node=node, health=Health.FAILED, cause="xid")
        case ("repair", node):
            return RepairNode(**common, node=node)
        case (_, node):
            return CordonNode(**common, node=node)
    raise AssertionError(op)


@settings(max_examples=25, deadline=None)
@given(ops, st.data())
def test_replay_at_seq_n_equals_the_engine_state_after_n_events(
    steps: list[tuple[object, ...]], data: st.DataObject
) -> None:
    clock = [T0]
    engine = Engine(CLUSTER, clock=lambda: clock[0], policies=default_policies())
    live: dict[int, tuple[str, object, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.duckdb"
        with DuckDBAuditSink(path, buffer=7) as sink:

            def observe(e: object) -> None:
                s = engine.state
                live[s.seq] = (state_digest(s), s.at, len(s.seen))

            engine.sinks += [sink.add_event, observe]
            engine.handle(register(*RACKS, spares_per_rack=1))
            for n, op in enumerate(steps):
                clock[0] += timedelta(minutes=7)
                engine.handle(command(op, n, engine.state))
        last = engine.state.seq
        picks = data.draw(st.lists(st.integers(1, last), min_size=1, max_size=5), label="seqs")
        with open_history(path) as reader:
            for seq in [*picks, last]:
                events = reader.events(CLUSTER, upto_seq=seq)
                state = state_at(events, seq=seq)
                assert (state_digest(state), state.at, len(state.seen)) == live[seq]
                assert state_at(reader.events(CLUSTER), seq=seq).seq == seq


def test_replay_by_time_stops_at_the_last_event_at_or_before_it(recorded: Recorded) -> None:
    events = recorded.events
    middle = events[len(events) // 2]
    state = state_at(events, at=middle.at)
    want = max(e.seq for e in events if e.at <= middle.at)
    assert state.seq == want
    with open_history(recorded.path) as reader:
        assert reader.events(middle.cluster, upto_at=middle.at)[-1].seq == want


def test_replaying_nothing_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no events"):
        state_at([])
