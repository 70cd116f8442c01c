"""Alerts on the sample story: blocked by topology, flapping, rejected; out of spares."""

from __future__ import annotations

from datetime import timedelta

from rackplane.models import Rejection
from rackplane.tui._alerts import AlertSettings, alerts
from rackplane.tui._timeline import Timeline
from tests.tui.conftest import NOW, story


def _timeline() -> Timeline:
    events = list(story())
    t = Timeline(events[0].cluster)
    t.append(events)
    return t


def test_the_story_raises_blocked_flapping_and_rejected_alerts() -> None:
    t = _timeline()
    kinds = {(a.kind, a.subject) for a in alerts(t.head, t.events)}
    assert ("blocked by topology", "wait-32") in kinds
    assert ("flapping node", "r015n17") in kinds
    assert any(k == "command rejected" for k, _ in kinds)


def test_a_blocked_job_alerts_only_past_the_threshold() -> None:
    t = _timeline()
    patient = AlertSettings(blocked_after=timedelta(hours=5))
    assert not [
        a for a in alerts(t.head, t.events, settings=patient) if a.kind.startswith("blocked")
    ]


def test_rejected_input_is_an_alert() -> None:
    t = _timeline()
    bad = Rejection(source_topic="rackplane.commands", partition=0, offset=7, reason="not JSON",
                    agent="controller", at=NOW, size=3, raw_base64="eHl6")  # fmt: skip
    found = [a for a in alerts(t.head, t.events, [bad]) if a.kind == "rejected input"]
    assert [(a.subject, a.message) for a in found] == [("rackplane.commands@7", "not JSON")]


def test_a_busy_rack_without_a_free_node_is_out_of_spares() -> None:
    from rackplane.engine import Engine
    from rackplane.models import JobSpec, PolicySettings, RegisterTopology, SubmitJob
    from rackplane.policies import default_policies
    from rackplane.tui.sample import sample_topology

    topo = sample_topology(2, nodes=4, cluster="tiny")
    engine = Engine("tiny", clock=lambda: NOW, policies=default_policies())
    settings = PolicySettings(spares_per_rack=0, slice_size=4)
    events = engine.handle(RegisterTopology(id="a", cluster="tiny", actor="op", topology=topo,
                                            settings=settings))  # fmt: skip
    events += engine.handle(
        SubmitJob(id="b", cluster="tiny", actor="op", job=JobSpec(id="j", nodes=4))
    )
    found = [a.subject for a in alerts(engine.state, events) if a.kind == "out of spares"]
    assert found == [engine.state.jobs["j"].slices[0].racks[0]]


def test_a_degraded_rack_is_a_warning_and_a_failed_rack_critical() -> None:
    from tests.builders import racks_healthy_degraded_failed

    h = racks_healthy_degraded_failed(cause="tray 4 lost")
    found = {a.subject: (a.kind, a.severity, a.message) for a in alerts(h.state, h.log)}
    assert found["r02"][:2] == ("rack degraded", "warning")
    assert found["r02"][2].startswith("tray 4 lost; its work stays")
    assert found["r03"][:2] == ("rack failed", "critical")
    assert "r01" not in found
