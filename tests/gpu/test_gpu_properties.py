"""Properties of the GPU Manager: it never crashes, and a flapping node causes no swap storm."""

from __future__ import annotations

import itertools
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from rackplane.models import GpuSample, Health, NodeTelemetry
from rackplane.policies import GpuHealthRules
from tests.gpu._samples import T0, maybe_bool, maybe_float, maybe_int, node, sick

gpus = st.builds(
    GpuSample,
    index=st.integers(min_value=0, max_value=63),
    temperature_c=maybe_float,
    power_w=maybe_float,
    xid=st.none() | st.integers(min_value=0, max_value=300),
    xids=st.none() | st.lists(st.integers(min_value=0, max_value=10_000), max_size=5).map(tuple),
    ecc_uncorrected=maybe_int,
    nvlink_down=maybe_int,
    fallen_off_bus=st.booleans(),
    clock_event_reasons=maybe_int,
    remap_pending=maybe_bool,
    remap_failure=maybe_bool,
    retired_pages_pending=maybe_bool,
)
samples = st.lists(
    st.tuples(st.integers(min_value=-(10**6), max_value=10**7), st.lists(gpus, max_size=8)),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(samples)
def test_arbitrary_telemetry_never_crashes_the_classifier(
    seq: list[tuple[int, list[GpuSample]]],
) -> None:
    rules = GpuHealthRules()
    for seconds, g in seq:
        sample = NodeTelemetry(
            cluster="c1", node="n", at=T0 + timedelta(seconds=seconds), gpus=tuple(g)
        )
        verdict = rules.classify(sample)
        assert verdict.health in set(Health)
        assert len(verdict.cause) <= 2_000  # fits a ReportNodeHealth


def _transitions(verdicts: list[Health]) -> int:
    return sum(1 for a, b in itertools.pairwise(verdicts) if a is not b)


def test_a_node_flapping_degraded_every_second_for_an_hour_changes_state_once() -> None:
    rules = GpuHealthRules()
    hour = [sick(s, nvlink_down=1) if s % 2 else node(s) for s in range(3_600)]
    verdicts = [rules.classify(s).health for s in hour]
    assert _transitions(verdicts) == 1 and verdicts[-1] is Health.DEGRADED


def test_a_node_flapping_failed_every_second_for_an_hour_fails_once_and_stays_failed() -> None:
    rules = GpuHealthRules()
    hour = [sick(s, fallen_off_bus=True) if s % 2 else node(s) for s in range(3_600)]
    verdicts = [rules.classify(s).health for s in hour]
    assert _transitions(verdicts) == 1 and verdicts[-1] is Health.FAILED


def test_a_node_flapping_every_eleven_minutes_recovers_between_bouts_only() -> None:
    # Hot for a minute, then clean for ten: at most one degrade and one recovery per bout.
    rules = GpuHealthRules()
    hour = [sick(s, temperature_c=95.0) if s % 660 < 60 else node(s) for s in range(0, 3_600, 5)]
    verdicts = [rules.classify(s).health for s in hour]
    assert _transitions(verdicts) <= 2 * 6
