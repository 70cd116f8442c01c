"""Time limits: a job that runs past its limit is ended (`JobFailed`, reason `time_limit`).

Two racks of 18 nodes, 2 spares each; jobs of one slice.
"""

from __future__ import annotations

from datetime import timedelta

from rackplane.engine import Engine
from rackplane.models import (
    CommandRejected,
    ExpireJob,
    JobFailed,
    JobPlaced,
    PolicySettings,
    RegisterTopology,
    StartJob,
    SubmitJob,
)
from rackplane.policies import preset
from rackplane.policies.tas import schedule
from tests.builders import CLUSTER, T0, Clock, cmd, job, rack, topology


def cluster() -> tuple[Engine, Clock]:
    clock = Clock()
    policies, settings = preset("tas+spares+defrag", PolicySettings(slice_size=8))
    engine = Engine(CLUSTER, clock=clock, policies=policies)
    engine.handle(cmd(RegisterTopology, topology=topology(rack("r01"), rack("r02")),
                      settings=settings))  # fmt: skip
    return engine, clock


def test_a_job_past_its_time_limit_is_ended_and_its_nodes_go_to_the_next() -> None:
    engine, clock = cluster()
    engine.handle(cmd(SubmitJob, job=job("short", 16, time_limit=timedelta(hours=2))))
    engine.handle(cmd(SubmitJob, job=job("next", 32)))  # waits for the nodes
    engine.handle(cmd(StartJob, job="short"))
    assert engine.next_due() == T0 + timedelta(hours=2)
    clock.now = T0 + timedelta(hours=1, minutes=59)
    assert engine.wake() == []  # not yet
    clock.now = T0 + timedelta(hours=2)
    events = engine.wake()
    (failed,) = [e for e in events if isinstance(e, JobFailed)]
    assert failed.job == "short" and failed.reason.startswith("time_limit: ran 2:00:00")
    assert engine.state.status_of("short").value == "failed"  # type: ignore[union-attr]
    assert engine.state.jobs["next"].status.value == "placed"
    assert engine.next_due() is None


def test_the_limit_counts_from_the_start_not_the_submission() -> None:
    engine, clock = cluster()
    engine.handle(cmd(SubmitJob, job=job("j", 8, time_limit=timedelta(minutes=30))))
    assert engine.next_due() is None  # placed, not started: no clock runs
    clock.now = T0 + timedelta(hours=5)
    engine.handle(cmd(StartJob, job="j"))
    assert engine.next_due() == T0 + timedelta(hours=5, minutes=30)


def test_the_controller_refuses_to_end_a_job_before_its_limit() -> None:
    engine, clock = cluster()
    engine.handle(cmd(SubmitJob, job=job("j", 8, time_limit=timedelta(minutes=30))))
    engine.handle(cmd(StartJob, job="j"))
    clock.now = T0 + timedelta(minutes=29)
    (rejected,) = engine.handle(cmd(ExpireJob, job="j", actor="policy:time_limits"))
    assert isinstance(rejected, CommandRejected) and rejected.code == "invalid_state"
    assert "time limit 0:30:00" in rejected.reason
    (rejected,) = engine.handle(cmd(ExpireJob, job="nope", actor="policy:time_limits"))
    assert isinstance(rejected, CommandRejected) and rejected.code == "unknown_job"


def test_a_short_job_backfills_the_racks_held_for_a_big_one_without_delaying_it() -> None:
    #   r01  [R R R R R R R R . . . . . . . . s s]   R: 8 nodes, limit 2 h, started at T0
    #   r02  [X X X X X X X X X X X X X X X X s s]   X: no limit
    # H needs a whole rack (16): it holds r01, which frees when R ends, at T0 + 2 h.
    engine, clock = cluster()
    engine.handle(cmd(SubmitJob, job=job("R", 8, time_limit=timedelta(hours=2))))
    engine.handle(cmd(StartJob, job="R"))
    engine.handle(cmd(SubmitJob, job=job("X", 16, slice_size=16)))
    engine.handle(cmd(SubmitJob, job=job("H", 16, slice_size=16)))
    assert engine.state.jobs["H"].blocked is not None
    clock.now = T0 + timedelta(minutes=5)
    events = engine.handle(cmd(SubmitJob, job=job("S", 8, time_limit=timedelta(hours=1))))
    (placed,) = [e for e in events if isinstance(e, JobPlaced)]
    assert placed.slices[0].racks == ("r01",) and "backfilled: ends by" in placed.explanation
    events = engine.handle(cmd(SubmitJob, job=job("long", 8, time_limit=timedelta(hours=3))))
    assert not [e for e in events if isinstance(e, JobPlaced)]  # it would delay H
    events = engine.handle(cmd(SubmitJob, job=job("nolimit", 8)))
    assert not [e for e in events if isinstance(e, JobPlaced)]
    engine.handle(cmd(StartJob, job="S"))
    clock.now = T0 + timedelta(hours=2)
    events = engine.wake()  # R and S are past their limits: H gets r01
    assert {e.job for e in events if isinstance(e, JobFailed)} == {"R", "S"}
    assert engine.state.jobs["H"].slices[0].racks == ("r01",)


def test_a_job_blocked_behind_one_of_its_size_still_backfills_when_a_new_head_allows_it() -> None:
    #   r01  [R R R R R R R R . . . . . . . . s s]   R: 8 nodes, limit 2 h
    #   r02  [X X X X X X X X X X X X X X X X s s]   X: 16 nodes, limit 10 h
    # H (16) holds r01 until R ends (2 h): N (8, no limit) and S (8, 3 h) wait behind it.
    # H2 (two racks of 16) then holds both racks until X ends (10 h): S now ends in time to
    # backfill r01, though N, of its size and ahead of it, met the cycle's verdict for 8
    # nodes first and S is blocked for that same reason already.
    engine, clock = cluster()
    walks: list[str] = []

    def same_walks(_: object) -> None:
        # A cycle that passes over the jobs it would offer for nothing proposes what the
        # cycle that offers every job proposes, after every event.
        fast, full = schedule(engine.state), schedule(engine.state, pass_over=False)
        assert fast == full
        walks.extend(type(c).__name__ for c in fast)

    engine.sinks.append(same_walks)
    engine.handle(cmd(SubmitJob, job=job("R", 8, time_limit=timedelta(hours=2))))
    engine.handle(cmd(StartJob, job="R"))
    engine.handle(cmd(SubmitJob, job=job("X", 16, slice_size=16, time_limit=timedelta(hours=10))))
    engine.handle(cmd(StartJob, job="X"))
    engine.handle(cmd(SubmitJob, job=job("H", 16, slice_size=16, priority=1)))
    engine.handle(cmd(SubmitJob, job=job("N", 8)))
    clock.now = T0 + timedelta(minutes=5)
    engine.handle(cmd(SubmitJob, job=job("S", 8, time_limit=timedelta(hours=3))))
    jobs = engine.state.jobs
    assert jobs["N"].blocked is not None and jobs["S"].blocked is not None
    assert jobs["S"].blocked.reason == jobs["N"].blocked.reason
    clock.now = T0 + timedelta(minutes=10)
    events = engine.handle(cmd(SubmitJob, job=job("H2", 32, slice_size=16, priority=2)))
    (placed,) = [e for e in events if isinstance(e, JobPlaced)]
    assert placed.job == "S" and "backfilled: ends by" in placed.explanation
    assert "PlaceJob" in walks
