"""What-if: the recorded inputs re-run under a policy; the same policy reproduces the record."""

from __future__ import annotations

import pytest

from rackplane.history.whatif import (
    WhatIf,
    parse_what_if,
    record_metrics,
    recorded_inputs,
    recorded_preset,
    run_inputs,
    what_if,
)
from rackplane.models import Event, JobSubmitted, NodeFailed, PolicySettings
from tests.history.conftest import POLICY, Recorded


def test_the_inputs_read_back_are_the_jobs_and_failures_of_the_run(recorded: Recorded) -> None:
    inputs = recorded_inputs(recorded.events)
    submitted = [e for e in recorded.events if isinstance(e, JobSubmitted)]
    failed = [e for e in recorded.events if isinstance(e, NodeFailed)]
    assert [(a.at, a.spec) for a in inputs.arrivals] == [(e.at, e.job) for e in submitted]
    assert [a.work for a in inputs.arrivals] == [e.job.expected_duration for e in submitted]
    assert sorted((f.at, f.node) for f in inputs.failures) == [(e.at, e.node) for e in failed]
    assert inputs.topology == recorded.scenario.topology
    assert recorded_preset(inputs.settings) == POLICY


def test_re_running_the_recorded_policy_reproduces_the_recorded_events(
    recorded: Recorded,
) -> None:
    inputs = recorded_inputs(recorded.events)
    rerun: list[Event] = []
    run_inputs(
        inputs, POLICY, inputs.settings, observer=lambda _state, events: rerun.extend(events)
    )
    want = [(e.seq, e.at, e.type, getattr(e, "job", None)) for e in recorded.events]
    assert [(e.seq, e.at, e.type, getattr(e, "job", None)) for e in rerun] == want
    assert len(want) > 50
    assert {e.type for e in recorded.events} >= {"NodeFailed", "NodeSwapped", "JobCompleted"}


def test_what_if_with_the_same_policy_reproduces_the_recorded_outcome(recorded: Recorded) -> None:
    report = what_if(recorded.events, WhatIf(None, {}))
    assert report.recorded_policy == POLICY
    rerun, alt = report.rerun.model_dump(), report.alternative.model_dump()
    assert rerun == alt
    for metric, value in record_metrics(recorded.events).items():
        if metric.startswith("jobs_") or metric == "gpu_hours_lost_preemptions":
            continue  # the record counts every job; the simulator's report only measured ones
        assert rerun[metric] == pytest.approx(value), metric


def test_another_policy_changes_the_outcome(recorded: Recorded) -> None:
    report = what_if(recorded.events, parse_what_if("policy=naive,spares=0"))
    assert report.alternative.slices_rack_local_fraction is not None
    assert report.alternative.slices_rack_local_fraction < 1.0
    assert report.rerun.slices_rack_local_fraction == 1.0
    assert report.alternative.usable_nodes_mean > report.rerun.usable_nodes_mean  # no spares
    rows = {r[0]: r[1:] for r in report.rows()}
    alt = report.alternative.slices_rack_local_fraction
    assert rows["slices_rack_local_fraction"] == (1.0, 1.0, alt)
    assert rows["swaps"] == (report.recorded["swaps"], report.rerun.swaps, report.alternative.swaps)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("policy=best", "unknown policy 'best'", id="unknown-preset"),
        pytest.param("colour=blue", "not a setting", id="unknown-key"),
        pytest.param("slice_size=zero", "slice_size", id="bad-value"),
        pytest.param("spares", "key=value", id="no-value"),
    ],
)
def test_a_bad_what_if_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_what_if(text)


def test_what_if_settings_apply_over_the_recorded_ones() -> None:
    change = parse_what_if("policy=tas+spares,slice_size=18,spares=1")
    assert change.policy == "tas+spares"
    merged = PolicySettings.model_validate(change.settings)
    assert (merged.slice_size, merged.spares_per_rack) == (18, 1)


def test_a_degraded_spell_is_replayed_as_the_rack_reports_and_a_failure_still_as_a_failure() -> (
    None
):
    from rackplane.models import Command, RackHealth, ReportRackHealth
    from tests import builders as b

    def health(rack: str, h: RackHealth) -> Command:
        return b.cmd(ReportRackHealth, rack=rack, health=h)

    harness = b.Harness().given(b.register(b.rack("r01", 4), b.rack("r02", 4)))
    harness.given(
        health("r01", RackHealth.DEGRADED),  # a tray lost ...
        health("r01", RackHealth.HEALTHY),  # ... and replaced
        health("r02", RackHealth.DEGRADED),
        health("r02", RackHealth.FAILED),  # then the whole domain
        health("r02", RackHealth.HEALTHY),
    )
    inputs = recorded_inputs(harness.log)
    reports = [(c.rack, c.health) for _, c in inputs.actions if isinstance(c, ReportRackHealth)]
    assert reports == [
        ("r01", RackHealth.DEGRADED),
        ("r01", RackHealth.HEALTHY),
        ("r02", RackHealth.DEGRADED),
    ]
    assert [(f.node, f.rack) for f in inputs.failures] == [(None, "r02")]
