"""Slurm's client commands as the adapter runs them (`rackplane.slurm._commands`), on stand-in
programs: what they are given, what a failure or a hang becomes, and a cycle that cannot read
slurmctld. The real commands are run in tests/slurm."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from rackplane.slurm._commands import SlurmCommands, SlurmError
from rackplane.slurm.adapter import SlurmAdapter
from rackplane.slurm.objects import FIELD_SEP, RECORD_END
from rackplane.streams.config import StreamConfig

FIXTURES = Path(__file__).parents[1] / "slurm" / "fixtures"


def program(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    line = FIELD_SEP.join(
        ["7", "PENDING", "2", "JobHeldUser", "", "", "ann", "", "N/A", "rackplane: slice-size=2"]
    )
    (tmp_path / "squeue.out").write_text(line + RECORD_END + "\n")
    program(d, "squeue", f'echo "$TZ $*" > {tmp_path}/squeue.args; cat {tmp_path}/squeue.out')
    program(d, "sinfo", f"cat {FIXTURES / 'sinfo.json'}")
    program(d, "scontrol", f'echo "$@" >> {tmp_path}/scontrol.calls')
    program(d, "scancel", f'echo "$@" >> {tmp_path}/scancel.calls')
    return d


async def test_the_reads_parse_and_run_in_utc(bin_dir: Path) -> None:
    slurm = SlurmCommands(bin_dir)
    jobs, bad = await slurm.jobs("gpu")
    assert [(j.id, j.held, j.comment) for j in jobs] == [("7", True, "rackplane: slice-size=2")]
    assert bad == []
    args = (bin_dir.parent / "squeue.args").read_text()
    assert args.startswith("UTC -h -a --states=all -p gpu -o %i")
    assert len(await slurm.nodes("gpu")) == 54
    assert slurm.calls == 2


async def test_the_writes_are_batched_into_one_command_each(bin_dir: Path) -> None:
    slurm = SlurmCommands(bin_dir)
    await slurm.release(["12", "3", "12"])
    await slurm.requeue_hold([])  # nothing to do: no command
    await slurm.place("3", ["r01n01", "r01n02", "r01n03"], resize=True, start="now+2")
    await slurm.drain(["r01n02", "r01n01"], "rackplane: fan swap")
    await slurm.cancel(["9", "8"])
    calls = (bin_dir.parent / "scontrol.calls").read_text().splitlines()
    assert calls == [
        "release 12,3",
        "update JobId=3 ReqNodeList=r01n[01-03] NumNodes=3 StartTime=now+2",
        "update NodeName=r01n01,r01n02 State=DRAIN Reason=rackplane: fan swap",
    ]
    assert (bin_dir.parent / "scancel.calls").read_text().split() == ["8", "9"]
    assert slurm.calls == 4


async def test_a_failing_command_is_one_line_with_its_stderr(bin_dir: Path) -> None:
    program(
        bin_dir,
        "scontrol",
        'echo "slurm_load_jobs error: Unable to contact\n slurm controller" >&2; exit 1',
    )
    with pytest.raises(SlurmError, match=r"^scontrol release 4: slurm_load_jobs error: Unable"):
        await SlurmCommands(bin_dir).release(["4"])
    with pytest.raises(SlurmError, match="cannot run"):
        await SlurmCommands(bin_dir / "nope").release(["4"])


async def test_a_command_that_hangs_is_killed_at_the_timeout(bin_dir: Path) -> None:
    program(bin_dir, "squeue", "exec sleep 30")
    with pytest.raises(SlurmError, match="squeue did not answer in 0 s"):
        await SlurmCommands(bin_dir, timeout=0.3).jobs("gpu")


async def test_a_cycle_that_cannot_read_slurmctld_warns_once_and_sends_nothing(
    bin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    program(bin_dir, "scontrol", 'echo "Unable to contact slurm controller" >&2; exit 1')
    adapter = SlurmAdapter(
        StreamConfig(), SlurmCommands(bin_dir), "c1", actor="runtime:slurm", partition="gpu"
    )
    with caplog.at_level(logging.WARNING, logger="rackplane.slurm"):
        for _ in range(3):
            assert await adapter.cycle(client=None) is None  # type: ignore[arg-type]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "cannot read slurmctld" in warnings[0]
