"""Slurm's client commands, run for the adapter: read slurmctld, act on it, in batches.

Every client command forks and parses slurm.conf (10-25 ms on a 2-core machine), so the
adapter reads with three commands per cycle at most (`squeue`, `sinfo --json`, now and then
`scontrol show topology`) and acts in batches: one `scontrol hold|release|requeuehold` and
one `scancel` for all the jobs of a cycle, one `scontrol update NodeName=a,b,...` per drain
reason; only a placement (`ReqNodeList`) is one command per job. `calls` counts them.

The commands run with `TZ=UTC` (squeue's times are local) and a timeout; a command that
fails or times out raises `SlurmError` with its one-line stderr.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path

from rackplane.importers.hostlist import compress_hostlist
from rackplane.slurm.objects import (
    SQUEUE_FORMAT,
    SlurmJob,
    SlurmNode,
    parse_sinfo_json,
    parse_squeue,
)


class SlurmError(RuntimeError):
    """A Slurm client command failed, timed out or could not be started."""


class SlurmCommands:
    """The client commands of one Slurm cluster (`bin_dir`: where they are; None: PATH)."""

    def __init__(self, bin_dir: Path | None = None, *, timeout: float = 30.0) -> None:
        self.bin_dir, self.timeout = bin_dir, timeout
        self.calls = 0
        self.env = {**os.environ, "TZ": "UTC"}

    async def run(self, program: str, *args: str) -> str:
        """Run one command; its stdout.

        Raises:
            SlurmError: it could not start, failed or ran past the timeout.
        """
        path = str(self.bin_dir / program) if self.bin_dir else program
        self.calls += 1
        try:
            proc = await asyncio.create_subprocess_exec(
                path,
                *args,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
            )
        except OSError as failure:
            raise SlurmError(f"cannot run {path}: {failure.strerror or failure}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise SlurmError(f"{program} did not answer in {self.timeout:.0f} s") from None
        if proc.returncode != 0:
            why = " ".join(err.decode(errors="replace").split()) or f"exit {proc.returncode}"
            raise SlurmError(f"{program} {_short(args)}: {why}")
        return out.decode(errors="replace")

    # -- reading --------------------------------------------------------------------------------

    async def jobs(self, partition: str) -> tuple[list[SlurmJob], list[str]]:
        """The partition's jobs (those slurmctld still holds: MinJobAge), and what did not
        parse."""
        out = await self.run(
            "squeue", "-h", "-a", "--states=all", "-p", partition, "-o", SQUEUE_FORMAT
        )
        return parse_squeue(out)

    async def nodes(self, partition: str | None) -> dict[str, SlurmNode]:
        return parse_sinfo_json(await self.run("sinfo", "--json"), partition=partition)

    async def topology(self) -> str:
        return await self.run("scontrol", "show", "topology")

    # -- acting ---------------------------------------------------------------------------------

    async def place(
        self, job: str, nodes: Sequence[str], *, resize: bool, start: str | None
    ) -> None:
        args = [f"JobId={job}", f"ReqNodeList={compress_hostlist(nodes)}"]
        if resize:
            args.append(f"NumNodes={len(nodes)}")
        if start:
            args.append(f"StartTime={start}")
        await self.run("scontrol", "update", *args)

    async def release(self, jobs: Iterable[str]) -> None:
        await self._jobs("release", jobs)

    async def hold(self, jobs: Iterable[str]) -> None:
        await self._jobs("hold", jobs)

    async def requeue_hold(self, jobs: Iterable[str]) -> None:
        await self._jobs("requeuehold", jobs)

    async def cancel(self, jobs: Iterable[str]) -> None:
        ids = sorted(set(jobs))
        if ids:
            await self.run("scancel", *ids)

    async def drain(self, nodes: Iterable[str], reason: str) -> None:
        names = sorted(set(nodes))
        if names:
            await self.run(
                "scontrol",
                "update",
                f"NodeName={','.join(names)}",
                "State=DRAIN",
                f"Reason={reason}",
            )

    async def resume(self, nodes: Iterable[str]) -> None:
        names = sorted(set(nodes))
        if names:
            await self.run("scontrol", "update", f"NodeName={','.join(names)}", "State=RESUME")

    async def admin_comment(self, job: str, text: str) -> None:
        await self.run("scontrol", "update", f"JobId={job}", f"AdminComment={text}")

    async def _jobs(self, verb: str, jobs: Iterable[str]) -> None:
        ids = sorted(set(jobs))
        if ids:
            await self.run("scontrol", verb, ",".join(ids))


def _short(args: Sequence[str]) -> str:
    text = shlex.join(args)
    return text if len(text) <= 120 else text[:117] + "..."
