"""The jobs view's goodput: work a restart would lose is not counted as useful, except for
interactive sessions and inference services, whose output was delivered as they ran."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rackplane.engine import Engine
from rackplane.models import JobKind, JobSpec, RegisterTopology, StartJob, SubmitJob
from rackplane.policies import preset
from rackplane.tui._jobs import COLUMNS, job_rows
from rackplane.tui.sample import sample_topology

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def _cells_after_an_hour(kind: JobKind, checkpoint: timedelta | None) -> dict[str, str]:
    now = [T0]
    topology = sample_topology(2, cluster="c")
    engine = Engine("c", clock=lambda: now[0], policies=preset("tas")[0])
    common = {"cluster": "c", "actor": "operator"}
    engine.handle(RegisterTopology(id="reg", topology=topology, **common))
    spec = JobSpec(id="j", nodes=4, slice_size=4, kind=kind, checkpoint_interval=checkpoint)
    engine.handle(SubmitJob(id="sub", job=spec, **common))
    engine.handle(StartJob(id="start", job="j", **common))
    now[0] = T0 + timedelta(minutes=70)
    engine.handle(SubmitJob(id="tick", job=spec.model_copy(update={"id": "k"}), **common))
    (row,) = [r for r in job_rows(engine.state, {}) if r.job == "j"]
    return dict(zip(COLUMNS, row.cells, strict=True))


def test_a_managed_job_counts_only_work_up_to_its_last_checkpoint() -> None:
    cells = _cells_after_an_hour(JobKind.MANAGED, timedelta(minutes=30))
    assert cells["since ckpt"] == "10m"
    assert cells["goodput"] == "86%"  # 60 of 70 minutes are behind a checkpoint


def test_a_managed_job_without_checkpoints_has_nothing_safe_yet() -> None:
    assert _cells_after_an_hour(JobKind.MANAGED, None)["goodput"] == "0%"


def test_an_interactive_session_keeps_what_it_delivered() -> None:
    cells = _cells_after_an_hour(JobKind.INTERACTIVE, None)
    assert cells["goodput"] == "100%"
    assert cells["since ckpt"] == "-"
