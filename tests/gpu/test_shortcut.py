"""The fold's shortcut (a quiet sample of a settled node skips the fold) changes nothing.

Generated stories of a few nodes in two racks, most samples quiet, some with conditions, XIDs
(fabric ones included), the controller's views of nodes and racks changing underneath, and
operator overrides: the manager with the shortcut and one without it give the same verdict for
every sample and end with the same node states and rack evidence.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rackplane.models import GpuSample, Health, NodeTelemetry, RackHealth, XidAction
from rackplane.policies import GpuHealthRules
from rackplane.policies._gpu_rules import gpu_findings, new_xids, quiet
from tests.gpu._samples import T0, maybe_bool, maybe_float, maybe_int

any_gpu = st.builds(
    GpuSample,
    index=st.integers(min_value=0, max_value=63),
    temperature_c=maybe_float,
    xid=st.none() | st.integers(min_value=0, max_value=300),
    xids=st.none() | st.lists(st.integers(min_value=0, max_value=300), max_size=3).map(tuple),
    ecc_uncorrected=maybe_int,
    nvlink_down=maybe_int,
    nvlink_up=maybe_int,
    fallen_off_bus=st.booleans(),
    clock_event_reasons=maybe_int,
    remap_pending=maybe_bool,
    remap_failure=maybe_bool,
    retired_pages_pending=maybe_bool,
)


@settings(max_examples=500, deadline=None)
@given(any_gpu, st.none() | st.integers(min_value=0, max_value=300))
def test_a_quiet_gpu_is_one_that_fires_no_rule_and_reports_no_xid(
    g: GpuSample, last: int | None
) -> None:
    if quiet(g, 90.0):
        assert gpu_findings(g, 90.0) == [] and new_xids(g, last) == ()
    else:
        assert gpu_findings(g, 90.0) or g.xid or g.xids


# What happens to one GPU in a sample: mostly nothing, sometimes a condition or an XID.
_QUIET: dict[str, Any] = {"temperature_c": 61.0, "ecc_uncorrected": 0, "nvlink_down": 0}
_EVENTS: list[dict[str, Any]] = [
    {"temperature_c": 95.0},
    {"nvlink_down": 2, "nvlink_up": 16},
    {"nvlink_down": 6, "nvlink_up": 12},
    {"clock_event_reasons": 0x4},
    {"clock_event_reasons": 0x40},
    {"ecc_uncorrected": 1},
    {"remap_pending": True},
    {"fallen_off_bus": True},
    {"xids": (149,)},
    {"xids": (145,)},
    {"xids": (13,)},
    {"xids": (79,)},
    {"xid": 31},
    {"xid": 43},
    {"xid": 43},
    {"xid": 149},
    {"xids": ()},
    {"xids": (43,)},
]
step = st.tuples(
    st.integers(min_value=0, max_value=2),  # node: n0 and n1 in rack r0, n2 in r1
    st.sampled_from([0, 5, 10, 60, 181, 301, 601, 3_601]),  # seconds since the last sample
    st.sampled_from([None] * 12 + _EVENTS),  # what one GPU reads (None: a quiet sample)
    st.integers(min_value=0, max_value=3),  # which GPU
    st.sampled_from([Health.HEALTHY] * 5 + [None, Health.DEGRADED, Health.FAILED]),
    st.sampled_from([RackHealth.HEALTHY] * 5 + [None, RackHealth.DEGRADED, RackHealth.FAILED]),
    st.sampled_from([None] * 4 + [{}, {13: XidAction.RESET_GPU}, {149: XidAction.NONE}]),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(step, min_size=5, max_size=100))
def test_the_shortcut_gives_the_verdicts_and_states_of_the_full_fold(
    story: list[tuple[int, int, dict[str, Any] | None, int, Any, Any, Any]],
) -> None:
    fast, full = GpuHealthRules(), GpuHealthRules(shortcut=False)
    at = T0
    for n, gap, event, sick, known, rack_view, overrides in story:
        at += timedelta(seconds=gap)
        gpus = [_QUIET | (event or {}) if i == sick else _QUIET for i in range(4)]
        sample = NodeTelemetry(
            cluster="c1",
            node=f"n{n}",
            at=at,
            gpus=tuple(GpuSample(index=i, **r) for i, r in enumerate(gpus)),
        )
        rack = None if rack_view is None else (f"r{n // 2}", rack_view)
        want = full.classify(sample, known=known, overrides=overrides, rack=rack)
        got = fast.classify(sample, known=known, overrides=overrides, rack=rack)
        assert got == want
        assert fast.states == full.states
        assert fast.racks == full.racks


def test_a_settled_node_takes_the_shortcut_and_a_sick_sample_does_not() -> None:
    rules = GpuHealthRules()
    quiet_gpus = tuple(GpuSample(index=i, **_QUIET) for i in range(4))

    def sample(seconds: int, gpus: tuple[GpuSample, ...] = quiet_gpus) -> NodeTelemetry:
        return NodeTelemetry(cluster="c1", node="n", at=T0 + timedelta(seconds=seconds), gpus=gpus)

    rules.classify(sample(0), known=Health.HEALTHY, rack=("r", RackHealth.HEALTHY))
    settled = rules.states[("c1", "n")]
    rules.classify(sample(5), known=Health.HEALTHY, rack=("r", RackHealth.HEALTHY))
    assert rules.states[("c1", "n")] is settled  # the shortcut wrote nothing
    hot = (GpuSample(index=0, temperature_c=95.0), *quiet_gpus[1:])
    rules.classify(sample(10, hot), known=Health.HEALTHY, rack=("r", RackHealth.HEALTHY))
    assert rules.states[("c1", "n")].suspect_degraded == (T0 + timedelta(seconds=10), 1)


def _story(name: str, seconds: int, **gpu0: Any) -> NodeTelemetry:
    gpus = tuple(GpuSample(index=i, **(_QUIET | gpu0 if i == 0 else _QUIET)) for i in range(4))
    return NodeTelemetry(cluster="c1", node=name, at=T0 + timedelta(seconds=seconds), gpus=gpus)


def test_a_sticky_xid_that_clears_is_forgotten_by_both() -> None:
    # DCGM's last XID (43: no action) read twice, the incident over in between: the node is
    # healthy with the XID remembered; the reading clears on the next sample.
    story = [
        _story("n", 0),
        _story("n", 5, xid=43),
        _story("n", 200, xid=43),
        _story("n", 205),
        _story("n", 210),
    ]
    _same_all_along(story)


def test_a_node_repaired_by_the_event_log_starts_over_in_both() -> None:
    fast, full = GpuHealthRules(), GpuHealthRules(shortcut=False)
    for rules in (fast, full):
        rules.classify(_story("n", 0))
        rules.classify(_story("n", 5))
        rules.forget("c1", "n")  # NodeRepaired: clean_since is gone
    assert fast.classify(_story("n", 10)) == full.classify(_story("n", 10))
    assert fast.states == full.states


def _same_all_along(story: list[NodeTelemetry]) -> None:
    fast, full = GpuHealthRules(), GpuHealthRules(shortcut=False)
    for sample in story:
        assert fast.classify(sample, known=Health.HEALTHY) == full.classify(
            sample, known=Health.HEALTHY
        )
        assert fast.states == full.states
