#!/usr/bin/env python3
"""A throwaway Slurm 22.05 cluster on 127.0.0.1: a private munged, slurmctld and one slurmd
per simulated node (Debian's multiple-slurmd build), run from Debian's packages unpacked into
a cache, for the Slurm adapter's tests (issue 18).

Theory of operation
-------------------
1. Fetch. `apt-get download` (in a scratch directory of the cache) fetches exactly
   slurmctld, slurmd, slurm-client, slurm-wlm-basic-plugins, munge, libmunge2, libhwloc15 and
   liblua5.1-0 (3.5 MB): what `apt-get install --simulate --no-install-recommends slurmctld
   slurmd slurm-client munge` installs on a bookworm machine that has none of them. Nothing is
   installed: `dpkg-deb -x` unpacks each into `$RACKPLANE_CACHE/slurm-<version>/root` (else
   `~/.cache/rackplane/...`), the version being slurmctld's Debian version (22.05.8-4+deb12u3),
   asked of `apt-cache show` beforehand and read from the .deb after. A stamp file (the
   packages and their versions) makes a later fetch reuse the copy (~0.8 s; cold: ~2 s);
   `apt-get update` runs only when the download fails (root only). Without apt, a cached copy
   still serves; with neither, it exits 3 and says why.

   The unpacked tree runs as it is, so there is no fallback to a system-wide install: the
   binaries' RUNPATH (`/usr/lib/<triplet>/slurm-wlm`) is outranked by `LD_LIBRARY_PATH` (the
   tree's `usr/lib/<triplet>` for libmunge, libhwloc and liblua, and its `slurm-wlm` for
   libslurmfull and the plugins), `PluginDir=` points slurmctld, slurmd and the clients at the
   tree's plugins, `slurmd -d` at its slurmstepd, and munged takes every path as an option.
   Debian ships the daemons as `slurmctld-wlm` etc. and names them with alternatives, which
   `dpkg-deb -x` does not make; the fetch links `usr/sbin/slurmctld` -> `slurmctld-wlm` (and
   slurmd, slurmstepd) itself, as Slurm looks at its own name (run as `slurmctld-wlm`, it drops
   every node's `Gres=`). A user other than the cache's owner can run the wrappers only when
   the cache is readable to them (root's `~/.cache` is not: set `RACKPLANE_CACHE`).
2. Configure. A fresh temporary directory (mode 0755: munged wants every directory above its
   socket executable by all) gets a munge key (128 random bytes, mode 0400), `slurm.conf`
   (cluster `rackplane-test`, slurmctld on a free loopback port, one `NodeName` line per node
   with `NodeAddr=127.0.0.1` and its own `Port=`, 2 CPUs, `Gres=gpu:4`; cons_tres,
   `SlurmdParameters=config_overrides`, `ReturnToService=1`, `JobRequeue=1`, no accounting,
   `CommunicationParameters=NoInAddrAny`, `SlurmdTimeout=20`, `MinJobAge=600`, scheduling every
   2 s; `AuthInfo=socket=` our munged's socket, for the daemons and the clients alike;
   `SelectTypeParameters=CR_Core`, so a job of one task per node leaves its nodes `mixed`, one
   with `--exclusive` makes them `allocated`),
   `topology.conf` (topology/tree: a leaf switch `rackNN` per rack, one `spine` above them),
   `gres.conf` (`Name=gpu File=<dir>/dev/nvidia[0-3]`, symlinks to /dev/null: a count alone
   leaves the nodes INVAL), an empty `plugstack.conf`, and wrappers: `<dir>/bin/<client>`
   (scontrol, squeue, sbatch, sinfo, scancel, ...) and `<dir>/sbin/<daemon>`, small shell
   scripts that set `LD_LIBRARY_PATH` and `SLURM_CONF` and exec the real binary, so anything can
   call `<dir>/bin/scontrol` with no environment of its own. Nodes are `r01n01` .. `rRRnNN`.
3. Start, each in its own process group, output in `<dir>/log/`: munged (`--foreground`, its
   own socket, key, pid and seed files), slurmctld (`-D`), then one `slurmd -D -N <node>` per
   node. `<dir>/nodes.json` maps each node to `{pid, port, argv, log, pid_file}`; slurmd also
   writes `<dir>/slurmd-<node>.pid`.
4. Ready when `scontrol ping` says UP and `sinfo` shows every node `idle` (else the logs'
   tails: a slurmd that exited, or the state each late node is in): ~1.1 s for 54 nodes.
5. Stop: `scancel` every job still active (a job's slurmstepd and tasks outlive slurmd by
   design), then SIGTERM to each slurmd's process group (the pids in nodes.json, checked
   against `/proc/<pid>/cmdline`: a restarted slurmd is no child of ours), slurmctld's and
   munged's, SIGKILL after a timeout; then SIGKILL to what is left of this cluster's job steps
   (a slurmstepd with this slurm.conf in its environment, and its session: those of a node whose
   slurmd was killed, which no scancel reaches). Only what this script (or `start-node`)
   started, and its jobs, by PID. The directory is removed (kept, and named, when something
   failed).

Hurting one node (the tests' "node stops responding")::

    python scripts/slurm/slurm_cluster.py kill-node r02n05   # SIGKILL its slurmd, by PID
    python scripts/slurm/slurm_cluster.py start-node r02n05  # the same argv again

Both read `$RACKPLANE_TEST_SLURM_DIR` (or `--dir`). `kill-node` kills only the slurmd (its
jobs' slurmstepds live on, as on a real node whose slurmd crashed): slurmctld marks the node
`idle*` after ~14 s and `down*` (NOT_RESPONDING, `Reason=Not responding`) after ~26 s.
`start-node` runs the node's recorded `argv` (`<dir>/sbin/slurmd -D -N <node> -f <conf> -d
<slurmstepd>`) in a new session, appends to its log and writes the new pid into nodes.json,
where the stop finds it; the node registers again and, with `ReturnToService=1`, is idle again
within a second. Anyone may do the same by hand from nodes.json.

CLI::

    python scripts/slurm/slurm_cluster.py fetch                # only fetch (or find) Slurm
    python scripts/slurm/slurm_cluster.py run -- CMD ARGS      # start, run CMD, stop
    python scripts/slurm/slurm_cluster.py run --racks 2 --nodes-per-rack 4 -- CMD
    python scripts/slurm/slurm_cluster.py serve                # start, print the env, Ctrl-C

`run` gives CMD `RACKPLANE_TEST_SLURM_CONF` and `SLURM_CONF` (slurm.conf's path),
`RACKPLANE_TEST_SLURM_BIN` (the wrappers' directory) and `RACKPLANE_TEST_SLURM_DIR` (the
cluster's directory), and exits with CMD's status. `--job-submit-lua FILE` installs FILE as
`job_submit.lua` with `JobSubmitPlugins=lua`. When Slurm cannot be fetched or started it exits
with status 3 and says why (with the tail of apt's output or the daemon's log): it never skips.

Standard library only; no rackplane imports (this must run before anything is installed).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGES = (
    "slurmctld", "slurmd", "slurm-client", "slurm-wlm-basic-plugins",
    "munge", "libmunge2", "libhwloc15", "liblua5.1-0",
)  # fmt: skip
"""What `apt-get install --simulate --no-install-recommends slurmctld slurmd slurm-client
munge` installs on bookworm; downloaded and unpacked, never installed."""
SLURM_SERIES = "22.05"
HOST = "127.0.0.1"
CLUSTER_NAME = "rackplane-test"
GPUS_PER_NODE = 4
CPUS_PER_NODE = 2
REAL_MEMORY_MB = 1024
SLURMD_TIMEOUT_S = 20
ENV_CONF = "RACKPLANE_TEST_SLURM_CONF"
ENV_BIN = "RACKPLANE_TEST_SLURM_BIN"
ENV_DIR = "RACKPLANE_TEST_SLURM_DIR"
EXIT_FAILED = 3
DAEMONS = {
    "slurmctld": "usr/sbin/slurmctld",
    "slurmd": "usr/sbin/slurmd",
    "slurmstepd": "usr/sbin/slurmstepd",
    "munged": "usr/sbin/munged",
}
"""Wrapper name -> the binary in the tree. Debian ships the Slurm daemons as `*-wlm` and names
them with alternatives (`/usr/sbin/slurmctld` -> `slurmctld-wlm`), which `dpkg -x` does not
make: the fetch makes those links itself. The name matters: Slurm asks its own program name
(`run_in_daemon("slurmctld,slurmd")`) before it keeps a node's `Gres=` from slurm.conf, so
`slurmctld-wlm` run by that name sees every node with no GPUs."""
_TAIL_LINES = 40


class PlaneError(RuntimeError):
    """Slurm could not be fetched or started."""


def say(message: str) -> None:
    """One progress line, to stderr (CMD's stdout stays its own)."""
    print(f"[slurm] {message}", file=sys.stderr, flush=True)


def tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def tail_file(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        return tail(path.read_text(errors="replace"), lines) or f"({path} is empty)"
    except OSError:
        return f"(cannot read {path})"


# -- 1. fetch -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    """Slurm and munge unpacked under `root`, and where their pieces are."""

    root: Path
    version: str

    @property
    def lib_dirs(self) -> list[Path]:
        """`usr/lib/<triplet>` (libmunge, libhwloc, liblua) and its `slurm-wlm` (libslurmfull
        and the plugins)."""
        plugins = self.plugin_dir
        return [plugins.parent, plugins]

    @property
    def plugin_dir(self) -> Path:
        found = sorted(self.root.glob("usr/lib/*/slurm-wlm/libslurmfull.so"))
        if not found:
            raise PlaneError(f"no usr/lib/*/slurm-wlm/libslurmfull.so under {self.root}")
        return found[0].parent

    @property
    def client_dir(self) -> Path:
        return self.root / "usr" / "bin"

    def daemon(self, name: str) -> Path:
        return self.root / DAEMONS[name]

    def env(self) -> dict[str, str]:
        return dict(os.environ, LD_LIBRARY_PATH=":".join(map(str, self.lib_dirs)))


def default_cache_base() -> Path:
    """`$RACKPLANE_CACHE`, else `~/.cache/rackplane`."""
    root = os.environ.get("RACKPLANE_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "rackplane"


def _apt(args: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    if os.geteuid() == 0 and args[0] == "apt-get":
        # root in a directory `_apt` cannot write: download unsandboxed, without the warning
        args = [args[0], "-o", "APT::Sandbox::User=root", *args[1:]]
    try:
        done = subprocess.run(
            args, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=timeout, check=False, env=dict(os.environ, LC_ALL="C"),
        )  # fmt: skip
    except FileNotFoundError as err:
        raise PlaneError(f"{args[0]} is not on PATH: Slurm comes from Debian's packages") from err
    except subprocess.TimeoutExpired as err:
        raise PlaneError(f"`{' '.join(args)}` did not finish in {timeout:.0f} s") from err
    if done.returncode != 0:
        output = tail(done.stdout + done.stderr)
        raise PlaneError(f"`{' '.join(args)}` failed (exit {done.returncode}):\n{output}")
    return done.stdout


def _apt_get_update() -> None:
    if os.geteuid() != 0:
        raise PlaneError("apt does not know Slurm's packages and only root can `apt-get update`")
    say("apt-get update")
    _apt(["apt-get", "update"])


def candidate_version() -> str | None:
    """slurmctld's version as apt would download it, or None when apt does not know it."""
    try:
        shown = _apt(["apt-cache", "show", "--no-all-versions", "slurmctld"], timeout=60)
    except PlaneError:
        return None
    found = re.search(r"^Version: (\S+)$", shown, re.M)
    return found.group(1) if found else None


def _stamp(versions: dict[str, str]) -> str:
    return json.dumps({"packages": versions}, sort_keys=True, indent=1)


def _is_complete(cache: Path) -> bool:
    stamp = cache / "STAMP"
    try:
        packages = json.loads(stamp.read_text())["packages"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    root = cache / "root"
    return set(packages) == set(PACKAGES) and all((root / p).exists() for p in DAEMONS.values())


def _deb_field(deb: Path, field: str) -> str:
    return _apt(["dpkg-deb", "-f", str(deb), field]).strip()


def fetch(base: Path | None = None) -> Tree:
    """The unpacked Slurm tree, fetched and unpacked when the cache lacks it.

    Raises:
        PlaneError: apt or dpkg is missing, a download failed, or the unpacked daemons do not
            run (the output's tail in the message).
    """
    base = (base or default_cache_base()).expanduser().resolve()
    version = candidate_version()
    if version is not None and _is_complete(base / f"slurm-{version}"):
        return _checked(Tree(base / f"slurm-{version}" / "root", version))
    if version is None:  # apt knows nothing (no lists, no apt): a cached copy still serves
        cached = sorted(
            (c for c in base.glob(f"slurm-{SLURM_SERIES}*") if _is_complete(c)),
            key=lambda c: c.stat().st_mtime,
        )
        if cached:
            return _checked(Tree(cached[-1] / "root", cached[-1].name.removeprefix("slurm-")))
    started = time.monotonic()
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=base, prefix="slurm-download-"))
    try:
        tree = _download_and_unpack(base, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # what is left after a failure
    say(f"Slurm {tree.version} unpacked into {tree.root} in {time.monotonic() - started:.1f} s")
    return tree


def _download_and_unpack(base: Path, scratch: Path) -> Tree:
    """`apt-get download` into `scratch`, then `dpkg-deb -x` into `slurm-<version>/root`."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise PlaneError("apt-get or dpkg-deb is not on PATH: Slurm comes from Debian's packages")
    say(f"apt-get download {' '.join(PACKAGES)} (into {scratch})")
    try:
        _apt(["apt-get", "download", *PACKAGES], cwd=scratch)
    except PlaneError as first:
        try:
            _apt_get_update()
        except PlaneError as err:
            raise PlaneError(f"{first}\n... and then: {err}") from err
        _apt(["apt-get", "download", *PACKAGES], cwd=scratch)
    debs = {_deb_field(d, "Package"): d for d in scratch.glob("*.deb")}
    missing = sorted(set(PACKAGES) - set(debs))
    if missing:
        raise PlaneError(f"apt-get download left out {', '.join(missing)}")
    versions = {p: _deb_field(d, "Version") for p, d in debs.items()}
    version = versions["slurmctld"]
    if not version.startswith(SLURM_SERIES):
        raise PlaneError(f"apt offers slurmctld {version}; this script knows Slurm {SLURM_SERIES}")
    cache = base / f"slurm-{version}"
    (cache / "STAMP").unlink(missing_ok=True)
    cache.mkdir(exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=scratch, prefix="root-"))
    for package in PACKAGES:
        _apt(["dpkg-deb", "-x", str(debs[package]), str(partial)])
    partial.chmod(0o755)  # mkdtemp made it 0700
    for name in ("slurmctld", "slurmd", "slurmstepd"):  # Debian's alternatives, see DAEMONS
        (partial / DAEMONS[name]).symlink_to(f"{name}-wlm")
    _checked(Tree(partial, version))
    shutil.rmtree(cache / "root", ignore_errors=True)
    partial.replace(cache / "root")
    shutil.rmtree(cache / "debs", ignore_errors=True)
    (cache / "debs").mkdir()
    for deb in debs.values():
        deb.replace(cache / "debs" / deb.name)
    (cache / "STAMP").write_text(_stamp(versions))
    return Tree(cache / "root", version)


def _checked(tree: Tree) -> Tree:
    """`tree`, once its slurmctld runs (`-V`) with the tree's libraries."""
    binary = tree.daemon("slurmctld")
    try:
        done = subprocess.run(
            [str(binary), "-V"], env=tree.env(), capture_output=True, text=True, timeout=30,
            check=False,
        )  # fmt: skip
    except OSError as err:
        raise PlaneError(f"cannot run {binary}: {err}") from err
    if done.returncode != 0 or f"slurm-wlm {SLURM_SERIES}" not in done.stdout:
        raise PlaneError(
            f"{binary} -V does not run from the unpacked tree (exit {done.returncode}):\n"
            f"{tail(done.stdout + done.stderr)}"
        )
    return tree


# -- 2. configure ---------------------------------------------------------------------------


def node_names(racks: int, per_rack: int) -> dict[str, list[str]]:
    """Leaf switch -> its nodes: `rack01` -> `r01n01` .. `r01nNN`."""
    return {
        f"rack{r:02d}": [f"r{r:02d}n{n:02d}" for n in range(1, per_rack + 1)]
        for r in range(1, racks + 1)
    }


def _hostlist(prefix: str, count: int) -> str:
    """`prefix01`, or `prefix[01-NN]` (22.05 folds only a trailing number)."""
    return f"{prefix}01" if count == 1 else f"{prefix}[01-{count:02d}]"


def topology_conf(racks: int, per_rack: int) -> str:
    lines = [f"SwitchName=rack{r:02d} Nodes={_hostlist(f'r{r:02d}n', per_rack)}"
             for r in range(1, racks + 1)]  # fmt: skip
    lines.append(f"SwitchName=spine Switches={_hostlist('rack', racks)}")
    return "\n".join(lines) + "\n"


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (held open together while they are picked)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def slurm_conf(
    d: Path, tree: Tree, ctld_port: int, ports: dict[str, int], partition: str, lua: bool
) -> str:
    lines = [
        f"# {CLUSTER_NAME}: written by scripts/slurm/slurm_cluster.py; removed with {d}",
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost=localhost({HOST})",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={d / 'munge.sock'}",
        "CommunicationParameters=NoInAddrAny",
        f"PluginDir={tree.plugin_dir}",
        f"PlugStackConfig={d / 'plugstack.conf'}",
        f"StateSaveLocation={d / 'state'}",
        f"SlurmdSpoolDir={d / 'spool'}/%n",
        f"SlurmctldPidFile={d / 'slurmctld.pid'}",
        f"SlurmdPidFile={d}/slurmd-%n.pid",
        f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={d / 'log'}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "ReturnToService=1",
        "JobRequeue=1",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "MailProg=/bin/true",  # none is installed; 22.05 logs an error at each start without
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        f"SlurmdTimeout={SLURMD_TIMEOUT_S}",
        "MinJobAge=600",
        "KillWait=5",
        "SchedulerType=sched/backfill",
        # the main and the backfill scheduler every 2 s (60 s and 30 s by default); a submit,
        # release or update triggers the main one at once anyway
        "SchedulerParameters=sched_interval=2,bf_interval=2",
        "TopologyPlugin=topology/tree",
        "GresTypes=gpu",
    ]
    if lua:
        lines.append("JobSubmitPlugins=lua")
    for node, port in ports.items():
        lines.append(
            f"NodeName={node} NodeAddr={HOST} Port={port} CPUs={CPUS_PER_NODE} "
            f"RealMemory={REAL_MEMORY_MB} Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
        )
    lines.append(f"PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def wrapper(real: Path, tree: Tree, conf: Path) -> str:
    libs = ":".join(map(str, tree.lib_dirs))
    return (
        "#!/bin/sh\n"
        f"# {real.name} of the test cluster's Slurm (scripts/slurm/slurm_cluster.py)\n"
        f"export LD_LIBRARY_PATH={shlex.quote(libs)}\n"
        f"export SLURM_CONF={shlex.quote(str(conf))}\n"
        f'exec {shlex.quote(str(real))} "$@"\n'
    )


def _write_wrappers(d: Path, tree: Tree, conf: Path) -> None:
    for directory, pairs in (
        ("bin", [(p.name, p) for p in sorted(tree.client_dir.iterdir())
                 if p.name not in ("munge", "unmunge", "remunge")]),
        ("sbin", [(name, tree.daemon(name)) for name in DAEMONS]),
    ):  # fmt: skip
        (d / directory).mkdir()
        for name, real in pairs:
            path = d / directory / name
            path.write_text(wrapper(real, tree, conf))
            path.chmod(0o755)


# -- 3-5. start, ready, stop ----------------------------------------------------------------


def _proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1]


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def is_slurmd_of(pid: int, node: str) -> bool:
    """True when `pid` is a running slurmd for `node` (not a recycled pid)."""
    argv = _proc_cmdline(pid)
    return (
        _alive(pid) and bool(argv) and Path(argv[0]).name.startswith("slurmd")
        and any(a == "-N" and b == node for a, b in itertools.pairwise(argv))
    )  # fmt: skip


def leftover_steps(conf: Path) -> list[int]:
    """The processes of this cluster's job steps still alive: every slurmstepd started for
    `conf` (`SLURM_CONF=<conf>` in its environment, from the slurmd wrapper) and each process
    in its session (slurmd starts each slurmstepd in a session of its own; the job's tasks stay
    in it). They outlive a killed slurmd, and scancel cannot reach them through it."""
    sessions: set[int] = set()
    session_of: dict[int, int] = {}
    mine = f"SLURM_CONF={conf}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            session_of[int(entry.name)] = int(fields[3])
            stepd = (entry / "comm").read_text().startswith("slurmstepd")
            if stepd and mine in (entry / "environ").read_bytes().split(b"\0"):
                sessions.add(int(fields[3]))
        except (OSError, IndexError, ValueError):
            continue
    sessions.discard(os.getsid(0))
    return [pid for pid, session in session_of.items() if session in sessions]


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def read_nodes(d: Path) -> dict[str, dict[str, Any]]:
    return dict(json.loads((d / "nodes.json").read_text()))


def write_nodes(d: Path, nodes: dict[str, dict[str, Any]]) -> None:
    partial = d / "nodes.json.partial"
    partial.write_text(json.dumps(nodes, indent=1) + "\n")
    partial.replace(d / "nodes.json")


def start_slurmd(d: Path, node: str) -> int:
    """Start `node`'s slurmd again with its recorded argv, in a session of its own, and record
    its new pid in nodes.json. Returns the pid.

    Raises:
        PlaneError: the node is unknown, or its slurmd still runs.
    """
    nodes = read_nodes(d)
    if node not in nodes:
        raise PlaneError(f"{node} is not a node of the cluster in {d}")
    entry = nodes[node]
    if is_slurmd_of(entry["pid"], node):
        raise PlaneError(f"{node}'s slurmd (pid {entry['pid']}) still runs")
    with Path(entry["log"]).open("ab") as log:
        process = subprocess.Popen(
            entry["argv"], stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, cwd=d, start_new_session=True,
        )  # fmt: skip
    entry["pid"] = process.pid
    write_nodes(d, nodes)
    return process.pid


def kill_slurmd(d: Path, node: str, sig: signal.Signals = signal.SIGKILL) -> int:
    """Send `sig` to `node`'s slurmd (its pid from nodes.json, checked) and wait until it is
    gone. Returns the pid.

    Raises:
        PlaneError: the node is unknown, its slurmd is not running, or it outlived 10 s.
    """
    nodes = read_nodes(d)
    if node not in nodes:
        raise PlaneError(f"{node} is not a node of the cluster in {d}")
    pid = int(nodes[node]["pid"])
    if not is_slurmd_of(pid, node):
        raise PlaneError(f"{node}'s slurmd (pid {pid}) is not running")
    os.kill(pid, sig)
    if not _wait_gone(pid, 10.0):
        raise PlaneError(f"{node}'s slurmd (pid {pid}) outlived {sig.name} by 10 s")
    return pid


class SlurmCluster:
    """munged, slurmctld and a slurmd per node from `tree`, in a fresh temporary directory."""

    def __init__(
        self,
        tree: Tree,
        *,
        racks: int = 3,
        nodes_per_rack: int = 18,
        partition: str = "gpu",
        job_submit_lua: Path | None = None,
        ready_timeout: float = 120.0,
        stop_timeout: float = 20.0,
    ) -> None:
        self.tree = tree
        self.switches = node_names(racks, nodes_per_rack)
        self.nodes = [n for names in self.switches.values() for n in names]
        self.racks, self.nodes_per_rack = racks, nodes_per_rack
        self.partition = partition
        self.job_submit_lua = job_submit_lua
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.work_dir: Path | None = None
        self.conf: Path | None = None
        self._processes: list[tuple[str, subprocess.Popen[bytes]]] = []

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def bin_dir(self) -> Path:
        assert self.work_dir is not None
        return self.work_dir / "bin"

    def env(self) -> dict[str, str]:
        """What CMD gets (and `serve` prints)."""
        assert self.work_dir is not None and self.conf is not None
        return {
            ENV_CONF: str(self.conf), "SLURM_CONF": str(self.conf),
            ENV_BIN: str(self.bin_dir), ENV_DIR: str(self.work_dir),
        }  # fmt: skip

    def start(self) -> SlurmCluster:
        """Configure, start munged, slurmctld and the slurmds, and wait for every node idle.

        Raises:
            PlaneError: a daemon exited or the cluster was not ready in time (the logs' tails in
                the message; the directory is kept).
        """
        started = time.monotonic()
        self.work_dir = d = Path(tempfile.mkdtemp(prefix="rackplane-slurm-"))
        try:
            self._configure(d)
            self._launch("munged", [
                str(d / "sbin" / "munged"), "--foreground", f"--socket={d / 'munge.sock'}",
                f"--key-file={d / 'munge.key'}", f"--pid-file={d / 'munged.pid'}",
                f"--log-file={d / 'log' / 'munged.log'}", f"--seed-file={d / 'munged.seed'}",
            ])  # fmt: skip
            self._until("munged's socket", lambda: (d / "munge.sock").exists(), 20.0)
            self._launch("slurmctld", [str(d / "sbin" / "slurmctld"), "-D", "-f", str(self.conf)])
            self._until("slurmctld", self._ctld_up, 60.0)
            nodes: dict[str, dict[str, Any]] = {}
            for node, port in self._ports.items():
                argv = [
                    str(d / "sbin" / "slurmd"), "-D", "-N", node, "-f", str(self.conf),
                    "-d", str(self.tree.daemon("slurmstepd")),
                ]  # fmt: skip
                log = d / "log" / f"slurmd-{node}.out"
                process = self._launch(f"slurmd {node}", argv, log=log)
                nodes[node] = {
                    "pid": process.pid, "port": port, "argv": argv, "log": str(log),
                    "pid_file": str(d / f"slurmd-{node}.pid"),
                }  # fmt: skip
            write_nodes(d, nodes)
            self._until(f"{len(self.nodes)} nodes idle", self._all_idle, self.ready_timeout)
        except BaseException as err:
            kept = self.work_dir
            self.stop(keep_dir=True)
            if isinstance(err, PlaneError):
                raise PlaneError(f"{err}\n(kept for a post-mortem: {kept})") from err
            raise
        say(f"{len(self.nodes)} nodes idle in {time.monotonic() - started:.1f} s ({d})")
        return self

    def _configure(self, d: Path) -> None:
        d.chmod(0o755)  # munged: every directory above its socket executable by all
        for sub in ("state", "spool", "log", "dev", "jobs"):
            (d / sub).mkdir()
        key = d / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        for node in self.nodes:  # slurmd would log that its spool directory is missing
            (d / "spool" / node).mkdir()
        for i in range(GPUS_PER_NODE):
            (d / "dev" / f"nvidia{i}").symlink_to("/dev/null")
        ctld_port, *node_ports = free_ports(1 + len(self.nodes))
        self._ports = dict(zip(self.nodes, node_ports, strict=True))
        self.conf = d / "slurm.conf"
        lua = self.job_submit_lua is not None
        if self.job_submit_lua is not None:
            shutil.copyfile(self.job_submit_lua, d / "job_submit.lua")
        self.conf.write_text(slurm_conf(d, self.tree, ctld_port, self._ports, self.partition, lua))
        (d / "topology.conf").write_text(topology_conf(self.racks, self.nodes_per_rack))
        (d / "gres.conf").write_text(f"Name=gpu File={d / 'dev'}/nvidia[0-{GPUS_PER_NODE - 1}]\n")
        (d / "plugstack.conf").write_text("")
        _write_wrappers(d, self.tree, self.conf)

    def client(
        self, name: str, *args: str, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / name), *args], capture_output=True, text=True,
            timeout=timeout, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def _ctld_up(self) -> bool:
        return "is UP" in self.client("scontrol", "ping").stdout

    def _node_states(self) -> dict[str, str]:
        done = self.client("sinfo", "-h", "-N", "-o", "%N %T")
        return dict(line.split(None, 1) for line in done.stdout.splitlines() if " " in line)

    def _all_idle(self) -> bool:
        states = self._node_states()
        return all(states.get(n) == "idle" for n in self.nodes)

    def _until(self, what: str, ok: Callable[[], bool], timeout: float) -> None:
        """Poll `ok()` until true; fail when a daemon exits or after `timeout` seconds."""
        assert self.work_dir is not None
        deadline = time.monotonic() + timeout
        while True:
            for name, process in self._processes:
                if process.poll() is not None:
                    raise PlaneError(
                        f"{name} exited with status {process.returncode} before {what}:\n"
                        f"{self._log_tails(name)}"
                    )
            with contextlib.suppress(subprocess.TimeoutExpired):
                if ok():
                    return
            if time.monotonic() > deadline:
                late = ""
                if self.conf is not None and (self.work_dir / "nodes.json").exists():
                    states: dict[str, str] = {}
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        states = self._node_states()
                    late = ", ".join(
                        f"{n}: {states.get(n, '?')}" for n in self.nodes if states.get(n) != "idle"
                    )[:2000]
                raise PlaneError(
                    f"not {what} within {timeout:.0f} s{f' (late: {late})' if late else ''}:\n"
                    f"{self._log_tails('slurmctld')}"
                )
            time.sleep(0.25)

    def _log_tails(self, name: str) -> str:
        assert self.work_dir is not None
        logs = self.work_dir / "log"
        paths = {"munged": [logs / "munged.out"], "slurmctld": [logs / "slurmctld.out",
                 logs / "slurmctld.log"]}.get(name)  # fmt: skip
        if paths is None:  # "slurmd NODE"
            node = name.split()[-1]
            paths = [logs / f"slurmd-{node}.out", logs / f"slurmd-{node}.log"]
        return "\n".join(f"--- {p}:\n{tail_file(p)}" for p in paths if p.exists())

    def _launch(
        self, name: str, argv: list[str], log: Path | None = None
    ) -> subprocess.Popen[bytes]:
        assert self.work_dir is not None
        log = log or self.work_dir / "log" / f"{name}.out"
        with log.open("ab") as out:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.work_dir, start_new_session=True,
            )  # fmt: skip
        self._processes.append((name, process))
        return process

    def alive(self) -> bool:
        """True while slurmctld and munged run."""
        return all(p.poll() is None for n, p in self._processes if n in ("munged", "slurmctld"))

    def cancel_jobs(self) -> None:
        """`scancel` every active job and wait (up to 15 s) for none to run: a job's
        slurmstepd and tasks would outlive the slurmds."""
        if self.work_dir is None or not self.alive():
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            jobs = self.client("squeue", "-h", "-o", "%A").stdout.split()
            if not jobs:
                return
            self.client("scancel", *jobs)
            deadline = time.monotonic() + 15.0
            while time.monotonic() < deadline:
                if not self.client("squeue", "-h", "-t", "R,CG,S,CF", "-o", "%A").stdout.strip():
                    return
                time.sleep(0.25)
            say("some jobs were still running 15 s after scancel")

    def stop(self, *, keep_dir: bool = False) -> None:
        """Cancel the jobs; SIGTERM each slurmd's, slurmctld's and munged's process group;
        SIGKILL after the timeout."""
        self.cancel_jobs()
        d = self.work_dir
        recorded: dict[str, dict[str, Any]] = {}
        if d is not None:
            with contextlib.suppress(OSError, ValueError):
                recorded = read_nodes(d)
        # a slurmd restarted by `start-node` is no child of ours: its pid is in nodes.json
        ours = {p.pid for _, p in self._processes}
        strays = [
            e["pid"] for n, e in recorded.items()
            if e["pid"] not in ours and is_slurmd_of(e["pid"], n)
        ]  # fmt: skip
        for pid in strays:
            _signal_pid_group(pid, signal.SIGTERM)
        phases = [[p for p in self._processes if p[0].startswith("slurmd ")]]
        phases += [[p for p in self._processes if p[0] == n] for n in ("slurmctld", "munged")]
        for group in phases:
            for _, process in group:
                _signal_group(process, signal.SIGTERM)
            deadline = time.monotonic() + self.stop_timeout
            for name, process in group:
                try:
                    process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    say(f"{name} did not stop in {self.stop_timeout:.0f} s after SIGTERM: killing")
                    _signal_group(process, signal.SIGKILL)
                    process.wait()
        for pid in strays:
            if not _wait_gone(pid, self.stop_timeout):
                _signal_pid_group(pid, signal.SIGKILL)
        if self.conf is not None:
            steps = leftover_steps(self.conf)
            if steps:
                say(f"killing {len(steps)} processes of job steps left behind (pids {steps})")
            for pid in steps:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        self._processes = []
        if d is not None and not keep_dir:
            shutil.rmtree(d, ignore_errors=True)
            self.work_dir = None


def _signal_pid_group(pid: int, sig: signal.Signals) -> None:
    """`sig` to `pid`'s process group when it leads one (start-node's slurmd does), else to
    `pid` alone (one restarted by hand, in no session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


# -- CLI ------------------------------------------------------------------------------------


class _Terminated(Exception):
    """SIGTERM arrived: stop the cluster on the way out."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def _run_command(command: list[str], env: dict[str, str]) -> int:
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as err:
        say(f"cannot run {command[0]!r}: {err}")
        return 127
    try:
        return child.wait()
    except (KeyboardInterrupt, _Terminated) as err:
        # Ctrl-C reached the child too (same process group); give it time to finish.
        if isinstance(err, _Terminated):
            child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return 130 if isinstance(err, KeyboardInterrupt) else 143


def _positive(limit: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not 1 <= value <= limit:
            raise argparse.ArgumentTypeError(f"must be 1..{limit}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="slurm_cluster.py",
        description=f"A throwaway Slurm {SLURM_SERIES} cluster (munged, slurmctld, a slurmd "
        "per node) on 127.0.0.1, from Debian's packages unpacked into a cache.",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=None,
        help="holds slurm-<version>/ (default: $RACKPLANE_CACHE or ~/.cache/rackplane)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("fetch", help="only fetch (or find) and unpack the packages")
    for name, text in (("run", f"start, run CMD with {ENV_CONF} etc., stop"),
                       ("serve", "start, print the environment, run until Ctrl-C")):  # fmt: skip
        action = sub.add_parser(name, help=text)
        action.add_argument("--racks", type=_positive(99), default=3)
        action.add_argument("--nodes-per-rack", type=_positive(99), default=18)
        action.add_argument("--partition", default="gpu")
        action.add_argument(
            "--job-submit-lua",
            type=Path,
            default=None,
            help="install FILE as job_submit.lua, with JobSubmitPlugins=lua",
        )
        action.add_argument("--ready-timeout", type=float, default=120.0, help="seconds (120)")
        if name == "run":
            action.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    for name, text in (
        ("kill-node", "SIGKILL one node's slurmd, by its pid in nodes.json"),
        ("start-node", "start one node's slurmd again, its argv from nodes.json"),
    ):
        action = sub.add_parser(name, help=text)
        action.add_argument("node")
        action.add_argument(
            "--dir",
            type=Path,
            default=os.environ.get(ENV_DIR),
            help=f"the cluster's directory (default: ${ENV_DIR})",
        )
    args = parser.parse_args(argv)
    command: list[str] = list(getattr(args, "command", None) or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if args.action == "run" and not command:
        parser.error("run needs a command: run -- CMD ARGS...")
    try:
        if args.action in ("kill-node", "start-node"):
            if args.dir is None:
                parser.error(f"{args.action} needs --dir or ${ENV_DIR}")
            hurt = kill_slurmd if args.action == "kill-node" else start_slurmd
            print(hurt(args.dir, args.node))
            return 0
        signal.signal(signal.SIGTERM, _on_sigterm)
        tree = fetch(args.cache_dir)
        if args.action == "fetch":
            say(f"Slurm {tree.version} ready in {tree.root}")
            return 0
        cluster = SlurmCluster(
            tree, racks=args.racks, nodes_per_rack=args.nodes_per_rack,
            partition=args.partition, job_submit_lua=args.job_submit_lua,
            ready_timeout=args.ready_timeout,
        )  # fmt: skip
        with cluster:
            env = cluster.env()
            if args.action == "serve":
                for key, value in env.items():
                    print(f"export {key}={shlex.quote(value)}", flush=True)
                say("serving; Ctrl-C stops it")
                with contextlib.suppress(KeyboardInterrupt, _Terminated):
                    while cluster.alive():
                        time.sleep(0.5)
                return 0
            status = _run_command(command, dict(os.environ, **env))
            say("stopping the cluster")
            return status
    except PlaneError as err:
        say(f"error: {err}")
        return EXIT_FAILED
    except (KeyboardInterrupt, _Terminated):
        say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
