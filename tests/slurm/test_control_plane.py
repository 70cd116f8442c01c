"""The test cluster itself (`scripts/slurm/slurm_cluster.py`): a real slurmctld 22.05 with a
slurmd per simulated node. What the Slurm adapter (issue 18) will rest on: the nodes with
their GPUs under their racks' switches; a held job placed node by node (ReqNodeList) and
released; one release for several jobs; cordon (DRAIN) and RESUME; a node downed under a
running job requeues it, to be placed again on a new set; requeuehold; and a node whose
slurmd dies stops responding, then comes back when it is restarted.

::

                      spine
         ┌──────────────┼──────────────┐
       rack01         rack02         rack03        topology/tree leaf switches
    r01n01..r01n18 r02n01..r02n18 r03n01..r03n18   a slurmd each, Gres=gpu:4

Runs in `make test-slurm` (the cluster started around pytest; `RACKPLANE_TEST_SLURM_*`).
"""

from __future__ import annotations

import re
import time

import pytest

from tests.slurm.conftest import NODES, RACKS, Slurm

pytestmark = pytest.mark.slurm

SLICE = "rackplane: slice=16"


def test_fifty_four_nodes_are_idle_with_four_gpus_each_under_three_leaf_switches(
    slurm: Slurm,
) -> None:
    lines = slurm.cmd("sinfo", "-h", "-N", "-o", "%N|%T|%G|%P").split()
    want = dict.fromkeys(NODES, ("idle", "gpu:4", "gpu*"))
    assert {n: tuple(rest) for n, *rest in (line.split("|") for line in lines)} == want
    switches = {}
    for line in slurm.cmd("scontrol", "show", "topology").splitlines():
        fields = dict(f.split("=", 1) for f in line.split())
        switches[fields["SwitchName"]] = fields
    assert sorted(switches) == ["rack01", "rack02", "rack03", "spine"]
    for rack, nodes in RACKS.items():
        assert switches[rack]["Level"] == "0"
        assert slurm.hostnames(switches[rack]["Nodes"]) == nodes
    assert switches["spine"]["Level"] == "1"
    assert switches["spine"]["Switches"] == "rack[01-03]"


def test_a_held_job_runs_on_exactly_the_nodes_it_is_given_once_released(slurm: Slurm) -> None:
    job = slurm.sbatch("--hold", "-N", "16", f"--comment={SLICE}", "--wrap", "sleep 300")
    held = slurm.job(job)
    assert (held.state, held.reason, held.nodes, held.required) == (
        "PENDING", "JobHeldUser", "", ""
    )  # fmt: skip
    chosen = "r01n[01-08],r03n[11-18]"  # not what Slurm would pick itself (r01n[01-16])
    slurm.cmd("scontrol", "update", f"JobId={job}", f"ReqNodeList={chosen}")
    assert slurm.job(job).state == "PENDING"  # still held
    time.sleep(1.0)
    assert slurm.job(job).state == "PENDING"
    slurm.cmd("scontrol", "release", str(job))
    running = slurm.until_state(job, "RUNNING", timeout=15.0)
    assert slurm.hostnames(running.nodes) == slurm.hostnames(chosen)
    assert running.node_count == 16
    assert f"Comment={SLICE}" in slurm.cmd("scontrol", "show", "job", str(job))


def test_one_release_command_releases_several_jobs(slurm: Slurm) -> None:
    placements = {"r02n[01-02]": 0, "r02n[03-04]": 0, "r02n[05-06]": 0}
    for hostlist in placements:
        job = slurm.sbatch(
            "--hold", "-N", "2", "--comment=rackplane: slice=2", "--wrap", "sleep 300"
        )
        slurm.cmd("scontrol", "update", f"JobId={job}", f"ReqNodeList={hostlist}")
        placements[hostlist] = job
    slurm.cmd("scontrol", "release", ",".join(map(str, placements.values())))
    for hostlist, job in placements.items():
        running = slurm.until_state(job, "RUNNING", timeout=15.0)
        assert slurm.hostnames(running.nodes) == slurm.hostnames(hostlist)


def test_a_drained_node_shows_its_reason_and_resume_undoes_it(slurm: Slurm) -> None:
    reason = "rackplane: cordoned by test"
    slurm.cmd("scontrol", "update", "NodeName=r01n05", "State=DRAIN", f"Reason={reason}")
    assert slurm.node("r01n05") == ("drained", reason)
    node = slurm.nodes_json()["r01n05"]
    assert (node["state"], node["state_flags"], node["reason"]) == ("idle", ["DRAIN"], reason)
    slurm.cmd("scontrol", "update", "NodeName=r01n05", "State=RESUME")
    # RESUME marks the node NOT_RESPONDING (idle*) until slurmctld has pinged it: ~0.5-1 s
    assert slurm.node("r01n05") in (("idle*", "none"), ("idle", "none"))
    slurm.until("r01n05 idle", lambda: slurm.node("r01n05"), lambda s: s[0] == "idle", 10.0)
    node = slurm.nodes_json()["r01n05"]
    assert (node["state"], node["state_flags"], node["reason"]) == ("idle", [], "")


def test_a_node_downed_under_a_running_job_requeues_it_and_it_runs_again_on_a_new_set(
    slurm: Slurm,
) -> None:
    job = slurm.sbatch("--hold", "-N", "4", "--comment=rackplane: slice=4", "--wrap", "sleep 300")
    slurm.cmd("scontrol", "update", f"JobId={job}", "ReqNodeList=r03n[01-04]")
    slurm.cmd("scontrol", "release", str(job))
    slurm.until_state(job, "RUNNING", timeout=15.0)
    slurm.cmd("scontrol", "update", "NodeName=r03n04", "State=DOWN", "Reason=rackplane: xid 79")
    requeued = slurm.until_state(job, "PENDING", timeout=15.0)
    assert (requeued.reason, requeued.nodes) == ("BeginTime", "")  # eligible again in ~120 s
    assert slurm.node("r03n04") == ("down", "rackplane: xid 79")
    assert "Restarts=1" in slurm.cmd("scontrol", "show", "job", str(job))
    spare = "r03n[01-03,05]"
    # `now+2`, as the adapter's RESTART_AT: with `now`, a restart in the same second as the kill
    # of the last run can fail ("Job credential revoked"); CI once saw this restart end FAILED,
    # NonZeroExitCode, within the 15 s
    slurm.cmd("scontrol", "update", f"JobId={job}", f"ReqNodeList={spare}", "StartTime=now+2")
    running = slurm.until_state(job, "RUNNING", timeout=15.0)
    assert slurm.hostnames(running.nodes) == ["r03n01", "r03n02", "r03n03", "r03n05"]


def test_requeuehold_leaves_a_running_job_pending_and_held(slurm: Slurm) -> None:
    job = slurm.sbatch("--hold", "-N", "2", "--comment=rackplane: slice=2", "--wrap", "sleep 300")
    slurm.cmd("scontrol", "update", f"JobId={job}", "ReqNodeList=r01n[10-11]")
    slurm.cmd("scontrol", "release", str(job))
    slurm.until_state(job, "RUNNING", timeout=15.0)
    slurm.cmd("scontrol", "requeuehold", str(job))
    pending = slurm.until_state(job, "PENDING", timeout=15.0)
    assert (pending.reason, pending.nodes, pending.required) == (
        "job requeued in held state", "", "r01n[10-11]"
    )  # fmt: skip
    shown = slurm.cmd("scontrol", "show", "job", str(job))
    assert re.search(r"\bPriority=0\b", shown), shown  # held: it never starts by itself
    time.sleep(2.5)  # a scheduling pass or two (sched_interval=2)
    assert slurm.job(job).state == "PENDING"


def test_a_killed_slurmd_makes_its_node_not_responding_and_a_restart_brings_it_back(
    slurm: Slurm,
) -> None:
    node = "r02n18"
    started = time.monotonic()
    killed = slurm.slurmd("kill-node", node)
    try:
        slurm.until(f"{node} down*", lambda: slurm.node(node), lambda s: s[0] == "down*", 45.0)
        took = time.monotonic() - started
        got = slurm.nodes_json()[node]
        assert (got["state"], got["state_flags"], got["reason"]) == (
            "down", ["NOT_RESPONDING"], "Not responding"
        ), f"after {took:.0f} s"  # fmt: skip
    finally:
        restarted = slurm.slurmd("start-node", node)
    assert restarted != killed
    slurm.until(f"{node} idle again", lambda: slurm.node(node), lambda s: s[0] == "idle", 20.0)
