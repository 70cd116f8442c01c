"""`rackplane slurm`: the adapter between rackplane and a slurmctld. Holds no rules.

Theory of operation: two loops feed two pictures and one acts on them.
    - A mirror (`streams.mirror`) folds the cluster's events from the start of the log, and
      tallies beside the state what `plan` reads from the log: each node's cordon reason and
      the `ReportJobRuntime` commands already answered.
    - Every `interval` seconds, and as soon as the log grew, once the mirror has caught up:
      read slurmctld (`squeue` and `sinfo --json`; `scontrol show topology` at the start and
      every `topology_every` seconds), `plan`, send the plan's commands (`streams.mirror.Outbox`)
      and carry out its actions in batches (`_commands`): at most `max_places` placements per
      cycle, then one release of the placed jobs that were held.
    - An action carried out is not repeated for `settle_s` seconds (slurmctld takes a moment
      to show it: a released job starts 0.2-1.7 s later); after that, if the plan still asks
      for it, it is done again. After a crash nothing is needed: slurmctld shows what was
      done, and the controller deduplicates the plan's command ids.

Slurm unreachable (slurmctld down, a command timing out): the cycle logs one warning and
tries again next interval; nothing is sent to rackplane from a picture it could not read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from typing import Any

from rackplane.importers.errors import TopologyFileError
from rackplane.importers.slurm import parse_slurm_topology, parse_slurm_tree
from rackplane.keyfiles import KeyFile
from rackplane.models import (
    ClusterId,
    Event,
    JobRuntimeReported,
    NodeCordoned,
    NodeUncordoned,
    Topology,
)
from rackplane.projections import ClusterState
from rackplane.slurm._commands import SlurmCommands, SlurmError
from rackplane.slurm.objects import ParseError
from rackplane.slurm.plan import (
    Action,
    Cancel,
    Drain,
    Hold,
    Place,
    Plan,
    Problem,
    Requeue,
    Resume,
    View,
    plan,
)
from rackplane.streams.client import Client
from rackplane.streams.config import StreamConfig
from rackplane.streams.mirror import ClusterMirror, Outbox

log = logging.getLogger("rackplane.slurm")


class SlurmAdapter:
    """One cluster's adapter. `run()` until cancelled."""

    def __init__(
        self,
        config: StreamConfig,
        slurm: SlurmCommands,
        cluster: ClusterId,
        *,
        actor: str,
        partition: str,
        key: KeyFile | None = None,
        gpus_per_node: int = 4,
        domain_nodes: int = 18,
        topology_text: str | None = None,
        interval: float = 1.0,
        topology_every: float = 60.0,
        resend_after: float = 30.0,
        settle_s: float = 5.0,
        max_places: int = 64,
    ) -> None:
        self.config, self.slurm, self.cluster = config, slurm, cluster
        self.actor, self.partition = actor, partition
        self.gpus_per_node, self.domain_nodes = gpus_per_node, domain_nodes
        self.topology_text = topology_text
        """A topology file's text (`--topology`), read instead of `scontrol show topology`."""
        self.interval, self.topology_every = interval, topology_every
        self.settle_s, self.max_places = settle_s, max_places
        self.cordons: dict[str, str] = {}
        self.reported: set[str] = set()
        self.mirror = ClusterMirror(config, cluster, on_event=self._tally, log=log)
        self.outbox = Outbox(key=key, resend_after=resend_after, log=log)
        self.problems: dict[str, str] = {}
        self._topology: Topology | None = None
        self._topology_read = float("-inf")
        self._done: dict[Action, float] = {}
        self._failing = False
        self.cycles = 0

    @property
    def state(self) -> ClusterState:
        return self.mirror.state

    async def run(self) -> None:
        """Follow and reconcile until cancelled."""
        async with Client(self.config) as client:
            loops = [
                asyncio.create_task(self.mirror.follow(client), name="slurm-follow"),
                asyncio.create_task(self._reconcile(client), name="slurm-reconcile"),
            ]
            try:
                done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    task.result()  # a loop only ends by raising
            finally:
                for task in loops:
                    task.cancel()
                await asyncio.gather(*loops, return_exceptions=True)

    def _tally(self, event: Event) -> None:
        if isinstance(event, NodeCordoned):
            self.cordons[event.node] = event.reason
        elif isinstance(event, NodeUncordoned):
            self.cordons.pop(event.node, None)
        elif isinstance(event, JobRuntimeReported) and event.causation_id:
            self.reported.add(event.causation_id)

    async def _reconcile(self, client: Client) -> None:
        await self.mirror.caught_up.wait()
        log.info("slurm: reconciling cluster %s, partition %s", self.cluster, self.partition)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.mirror.changed.wait(), timeout=self.interval)
            self.mirror.changed.clear()
            await self.cycle(client)

    async def cycle(self, client: Client) -> Plan | None:
        """Read, plan, send and act once; the plan (None when slurmctld could not be read)."""
        self.cycles += 1
        try:
            view = await self.view()
        except (SlurmError, ParseError) as err:
            if not self._failing:
                log.warning("slurm: cannot read slurmctld (%s); trying again", err)
            self._failing = True
            return None
        if self._failing:
            log.warning("slurm: slurmctld answers again")
            self._failing = False
        p = plan(self.state, view, actor=self.actor)
        await self.outbox.send(client, p.orders)
        await self._act(p.actions)
        return p

    async def view(self) -> View:
        """slurmctld's side as `plan` reads it."""
        now = time.monotonic()
        if now - self._topology_read >= self.topology_every:
            self._topology = await self._read_topology()
            self._topology_read = now
        jobs, bad = await self.slurm.jobs(self.partition)
        for line in bad:
            log.warning("slurm: a squeue line cannot be read, its job is left alone: %s", line)
        nodes = await self.slurm.nodes(self.partition)
        return View(
            nodes=nodes,
            jobs=jobs,
            topology=self._topology,
            problems=dict(self.problems),
            reported=frozenset(self.reported),
            cordons=dict(self.cordons),
            complete=not bad,
            partition=self.partition,
        )

    async def _read_topology(self) -> Topology | None:
        text = self.topology_text
        source = "--topology"
        if text is None:
            text, source = await self.slurm.topology(), "scontrol show topology"
        try:
            if "SwitchName=" in text:
                tree = parse_slurm_tree(
                    text,
                    source,
                    cluster=self.cluster,
                    gpus_per_node=self.gpus_per_node,
                    domain_nodes=self.domain_nodes,
                )
                for note in tree.notes:
                    log.info("slurm: topology: %s", note)
                return tree.topology
            return parse_slurm_topology(
                text,
                source,
                cluster=self.cluster,
                gpus_per_node=self.gpus_per_node,
                domain_nodes=self.domain_nodes,
            )
        except TopologyFileError as err:
            log.warning("slurm: the topology cannot be read: %s", err)
            return self._topology

    # -- acting ---------------------------------------------------------------------------------

    async def _act(self, actions: tuple[Action, ...]) -> None:
        now = time.monotonic()
        for action, at in list(self._done.items()):
            if now - at >= self.settle_s:
                del self._done[action]
        todo = [a for a in actions if a not in self._done]
        by_kind: dict[type, list[Any]] = defaultdict(list)
        for a in todo:
            by_kind[type(a)].append(a)
        await self._batch(by_kind[Hold], lambda xs: self.slurm.hold(a.job for a in xs), "held")
        await self._batch(
            by_kind[Requeue], lambda xs: self.slurm.requeue_hold(a.job for a in xs), "requeued"
        )
        await self._batch(
            by_kind[Cancel], lambda xs: self.slurm.cancel(a.job for a in xs), "cancelled"
        )
        drains: dict[str, list[Drain]] = defaultdict(list)
        for d in by_kind[Drain]:
            drains[d.reason].append(d)
        for reason, group in drains.items():
            await self._batch(
                group, lambda xs, r=reason: self.slurm.drain((a.node for a in xs), r), "drained"
            )
        await self._batch(
            by_kind[Resume], lambda xs: self.slurm.resume(a.node for a in xs), "resumed"
        )
        for problem in by_kind[Problem][: self.max_places]:
            await self._one(problem)
        released: list[Place] = []
        for place in by_kind[Place][: self.max_places]:
            if await self._one(place) and place.release:
                released.append(place)
        await self._batch(released, lambda xs: self.slurm.release(a.job for a in xs), "released")

    async def _batch(self, actions: list[Any], call: Any, verb: str) -> None:
        if not actions:
            return
        try:
            await call(actions)
        except SlurmError as err:
            log.warning("slurm: %s failed: %s", verb, err)
            return
        now = time.monotonic()
        for a in actions:
            self._done[a] = now
        log.info("slurm: %s %s", verb, ", ".join(_subject(a) for a in actions))

    async def _one(self, action: Place | Problem) -> bool:
        try:
            if isinstance(action, Place):
                await self.slurm.place(
                    action.job, action.nodes, resize=action.resize, start=action.start
                )
                what = f"job {action.job} placed on {len(action.nodes)} nodes"
            else:
                await self.slurm.admin_comment(action.job, action.text)
                self.problems[action.job] = action.text
                what = f"job {action.job}: {action.text or 'problem cleared'}"
        except SlurmError as err:
            log.warning("slurm: %s failed: %s", type(action).__name__.lower(), err)
            return False
        self._done[action] = time.monotonic()
        log.info("slurm: %s", what)
        return True


def _subject(a: Any) -> str:
    return str(getattr(a, "job", None) or getattr(a, "node", ""))
