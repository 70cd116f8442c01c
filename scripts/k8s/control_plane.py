#!/usr/bin/env python3
"""A throwaway Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager (a few controllers) and kwok (fake kubelets), built from the Go module
proxy, for the Kubernetes adapter's tests (issue 17).

Theory of operation
-------------------
1. Build. `k8s.io/kubernetes` cannot be `go install`ed (it requires its staging modules as
   v0.0.0 and replaces them with `./staging/src/...`), so a small wrapper module of our own
   requires `k8s.io/kubernetes vK8S`, replaces each staging module with its published
   `v0.<minor>.<patch>` (the list read from kubernetes' own go.mod, fetched from the proxy),
   copies its `godebug` lines, and blank-imports the apiserver's, the scheduler's, the
   controller manager's and etcd's library packages so `go mod tidy` keeps them. `go build`
   then makes `kube-apiserver`, `kube-scheduler`, `kube-controller-manager` and `etcd`
   (etcd's server module is in the same graph); `go install
   sigs.k8s.io/kwok/cmd/kwok@vKWOK` makes kwok. Everything (binaries, GOCACHE, GOMODCACHE)
   lives in one cache directory keyed by the versions: `$RACKPLANE_CACHE/k8s-<k8s>-kwok-<kwok>`,
   else `~/.cache/rackplane/...`. A cold build takes about 9 minutes on 2 quiet cores (17 on
   busy ones); a cached one is skipped (a stamp file names the versions), and a cache that
   lacks a binary (kube-scheduler and kube-controller-manager came later: about a minute
   each once the others are built) builds only that one. kwok's "fast" stages
   (node-initialize, pod-ready, pod-complete, pod-delete) are copied from its module, at that
   version.
2. Configure. A fresh temporary directory: a CA and a serving certificate for 127.0.0.1
   (openssl), a service-account key pair, a static token file whose one user is in
   `system:masters`, a kubeconfig, and kwok's configuration (the stages, with the parallelism
   fields set: kwok refuses zero).
3. Start, each in its own process group, output in `<name>.log`: etcd on two loopback ports
   (`--unsafe-no-fsync`); kube-apiserver on a loopback port (RBAC; without the admission
   plugins that need kube-controller-manager: ServiceAccount, TaintNodesByCondition,
   PodGroupProtection (its finalizer's remover runs there); `--endpoint-reconciler-type
   none`; the Workload API on: `GenericWorkload` and `scheduling.k8s.io/v1beta1`, so gangs
   may be PodGroups); kube-scheduler (the default scheduler, with the admin kubeconfig,
   `--leader-elect=false`, serving on a loopback port with the apiserver's certificate, the
   same gate: a gated scheduler facing an ungated server schedules nothing);
   kube-controller-manager with only the controllers a workload of the tests needs
   (`CONTROLLERS`: ReplicaSets and Jobs make their pods, the disruption controller computes
   each PodDisruptionBudget's status; not the node lifecycle controller, which would evict
   the pods of every kwok node, none of which posts a heartbeat); kwok, managing
   only nodes annotated `kwok.x-k8s.io/node: fake`, without node leases (a lease per node
   costs most of a core at 2,304 nodes).
4. Ready: etcd's /health, kube-apiserver's /readyz (with the token), kube-scheduler's,
   kube-controller-manager's and kwok's /healthz.
5. Stop: SIGTERM to each process group (kwok, kube-controller-manager, kube-scheduler,
   kube-apiserver, etcd), SIGKILL
   after a timeout; only what this script started, by PID; the directory is removed (kept,
   and named, when something failed).

CLI::

    python scripts/k8s/control_plane.py build            # only build (or find) the binaries
    python scripts/k8s/control_plane.py run -- CMD ARGS  # start, run CMD, stop
    python scripts/k8s/control_plane.py serve            # start and keep running until Ctrl-C

`run` gives CMD `RACKPLANE_TEST_KUBECONFIG` (a kubeconfig for the admin user) and exits with
CMD's status. When the plane cannot be built or started it exits with status 3 and says why
(with the tail of the build output or the component's log): it never skips.

Standard library only; no rackplane imports (this must run before anything is installed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

K8S_VERSION = "1.37.2"
KWOK_VERSION = "0.8.0"
HOST = "127.0.0.1"
WORKLOAD_GATE = "GenericWorkload=true"
WORKLOAD_API = "scheduling.k8s.io/v1beta1=true"
"""The Workload API (beta in 1.37, off by default): PodGroups and `spec.schedulingGroup`."""
ENV_VAR = "RACKPLANE_TEST_KUBECONFIG"
EXIT_FAILED = 3
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")
STAGES = (
    "node/fast/node-initialize.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
"""kwok's "fast" stages (kustomize/stage/ in its module), without the node heartbeat: nothing
here marks a silent node NotReady (kube-controller-manager runs without its node lifecycle
controller), and a heartbeat would undo a test's own NotReady."""
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node=fake"
CONTROLLERS = "replicaset,job,disruption"
"""kube-controller-manager's controllers here: workloads whose controller owns their pods,
and PodDisruptionBudgets with a computed status (without it the API server refuses every
eviction under a budget)."""
_TAIL_LINES = 40


class PlaneError(RuntimeError):
    """The control plane could not be built or started."""


def say(message: str) -> None:
    """One progress line, to stderr (CMD's stdout stays its own)."""
    print(f"[k8s] {message}", file=sys.stderr, flush=True)


def tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def tail_file(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        return tail(path.read_text(errors="replace"), lines) or f"({path} is empty)"
    except OSError:
        return f"(cannot read {path})"


# -- 1. build -------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """`$RACKPLANE_CACHE/k8s-<k8s>-kwok-<kwok>`, else under `~/.cache/rackplane`."""
    root = os.environ.get("RACKPLANE_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "rackplane"
    return base / f"k8s-{K8S_VERSION}-kwok-{KWOK_VERSION}"


def find_go() -> str:
    found = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if found is None:
        raise PlaneError(
            "Go is not on PATH (nor in /usr/local/go/bin): it builds the control plane"
        )
    return found


def go_env(cache: Path) -> dict[str, str]:
    return dict(
        os.environ,
        GOCACHE=str(cache / "gocache"),
        GOMODCACHE=str(cache / "gomod"),
        GOPATH=str(cache / "gopath"),
        GOFLAGS="-mod=mod",
        GOTOOLCHAIN="local",
        CGO_ENABLED="0",
    )


def _go(
    go: str, args: list[str], cache: Path, cwd: Path, timeout: float = 3600, module: bool = True
) -> str:
    """Run `go ARGS` in `cwd` with the cache's environment (`module`: in the wrapper module,
    `-mod=mod`; else a `go install pkg@version`, which takes no -mod)."""
    env = go_env(cache)
    if not module:
        env["GOFLAGS"] = ""
    try:
        done = subprocess.run(
            [go, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as err:
        raise PlaneError(f"`go {' '.join(args)}` did not finish in {timeout:.0f} s") from err
    if done.returncode != 0:
        raise PlaneError(
            f"`go {' '.join(args)}` failed (exit {done.returncode}):\n"
            f"{tail(done.stdout + done.stderr)}"
        )
    return done.stdout


def staging_replaces(go_mod: str) -> tuple[list[str], list[str], str]:
    """From kubernetes' go.mod: the staging modules it replaces with `./staging/src/...`, its
    `godebug` lines, and its `go` directive."""
    staging = re.findall(r"^\s*(k8s\.io/[\w.\-/]+)\s+=>\s+\./staging/src/", go_mod, re.M)
    godebug: list[str] = []
    block = re.search(r"^godebug \(\n(.*?)^\)", go_mod, re.M | re.S)
    if block:
        godebug = [
            f"godebug {line.strip()}" for line in block.group(1).splitlines() if line.strip()
        ]
    godebug += re.findall(r"^godebug [^(].*$", go_mod, re.M)
    directive = re.search(r"^go (\S+)$", go_mod, re.M)
    if not staging or directive is None:
        raise PlaneError("kubernetes' go.mod lists no staging modules: its layout changed")
    return staging, godebug, directive.group(1)


def wrapper_go_mod(staging: list[str], godebug: list[str], go_directive: str) -> str:
    minor = K8S_VERSION.split(".", 1)[1]  # 1.37.2 -> staging v0.37.2
    lines = ["module rackplane.test/controlplane", "", f"go {go_directive}", ""]
    lines += [*godebug, ""] if godebug else []
    lines += [f"require k8s.io/kubernetes v{K8S_VERSION}", "", "replace ("]
    lines += [f"\t{m} => {m} v0.{minor}" for m in staging]
    lines += [")", ""]
    return "\n".join(lines)


TOOLS_GO = """//go:build tools

// Package tools keeps the control plane's and etcd's packages in the module graph.
package tools

import (
\t_ "go.etcd.io/etcd/server/v3/etcdmain"
\t_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
\t_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
\t_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)
"""

_K8S_VERSION_LDFLAGS = f"-s -w -X k8s.io/component-base/version.gitVersion=v{K8S_VERSION}"
GO_BUILDS = (
    ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", _K8S_VERSION_LDFLAGS),
    ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler", _K8S_VERSION_LDFLAGS),
    (
        "kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        _K8S_VERSION_LDFLAGS,
    ),
    ("etcd", "go.etcd.io/etcd/server/v3", "-s -w"),
)
"""What `go build` makes in the wrapper module: (binary, package, ldflags)."""


def stamp() -> str:
    return json.dumps({"kubernetes": K8S_VERSION, "kwok": KWOK_VERSION})


def build(cache_dir: Path | None = None) -> Path:
    """The directory holding `etcd`, `kube-apiserver`, `kube-scheduler`,
    `kube-controller-manager`, `kwok` and
    `stages.yaml`, built if they are not there yet. When the stamp names these versions, the
    binaries already there are kept and only the missing ones are built (each written under a
    temporary name, then renamed into place).

    Raises:
        PlaneError: Go is missing, or a step failed (its output's tail in the message).
    """
    cache = (cache_dir or default_cache_dir()).expanduser().resolve()
    out = cache / "bin"
    done = out / "STAMP"
    current = done.exists() and done.read_text() == stamp()
    if current and all((out / b).exists() for b in (*BINARIES, "stages.yaml")):
        return out
    missing = [b for b in BINARIES if not (current and (out / b).exists())]
    go = find_go()
    started = time.monotonic()
    say(f"building {', '.join(missing) or 'stages.yaml'} (Kubernetes {K8S_VERSION}, "
        f"kwok {KWOK_VERSION}) into {cache}: ~9-17 min cold on 2 cores ...")  # fmt: skip
    src = cache / "src"
    src.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    builds = [b for b in GO_BUILDS if b[0] in missing]
    if builds:
        info = json.loads(
            _go(go, ["mod", "download", "-json", f"k8s.io/kubernetes@v{K8S_VERSION}"], cache, src)
        )
        staging, godebug, directive = staging_replaces(Path(info["GoMod"]).read_text())
        (src / "go.mod").write_text(wrapper_go_mod(staging, godebug, directive))
        (src / "go.sum").unlink(missing_ok=True)
        (src / "tools.go").write_text(TOOLS_GO)
        _go(go, ["mod", "tidy"], cache, src)
    for name, package, ldflags in builds:
        say(f"go build {package}")
        partial = out / f".{name}.partial"
        _go(
            go,
            ["build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), package],
            cache,
            src,
        )
        partial.replace(out / name)
    if "kwok" in missing:
        say(f"go install sigs.k8s.io/kwok/cmd/kwok@v{KWOK_VERSION}")
        env_bin = cache / "gopath" / "bin"
        _go(
            go,
            ["install", "-trimpath", "-ldflags", "-s -w",
             f"sigs.k8s.io/kwok/cmd/kwok@v{KWOK_VERSION}"],
            cache,
            cache,
        )  # fmt: skip
        shutil.copy2(env_bin / "kwok", out / ".kwok.partial")
        (out / ".kwok.partial").replace(out / "kwok")
    if not current or not (out / "stages.yaml").exists():
        download = ["mod", "download", "-json", f"sigs.k8s.io/kwok@v{KWOK_VERSION}"]
        kwok_module = Path(json.loads(_go(go, download, cache, cache))["Dir"])
        docs = [(kwok_module / "kustomize" / "stage" / s).read_text().strip() for s in STAGES]
        (out / "stages.yaml").write_text("\n---\n".join(docs) + "\n")
    done.write_text(stamp())
    say(f"built in {time.monotonic() - started:.0f} s")
    return out


# -- 2. configure ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PlaneError(f"openssl {args[0]} failed:\n{tail(done.stderr)}")


def make_certs(d: Path) -> None:
    """A CA, the apiserver's serving certificate for 127.0.0.1, a service-account key pair."""
    if shutil.which("openssl") is None:
        raise PlaneError("openssl is not on PATH: it makes the control plane's certificates")
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "30",
        "-subj",
        "/CN=rackplane-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        cwd=d,
    )
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=kube-apiserver",
        "-keyout",
        "apiserver.key",
        "-out",
        "apiserver.csr",
        cwd=d,
    )
    (d / "apiserver.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "apiserver.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "30",
        "-extfile",
        "apiserver.ext",
        "-out",
        "apiserver.crt",
        cwd=d,
    )
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)  # fmt: skip


def kubeconfig(server: str, ca: Path, token: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "rackplane-test",
        "clusters": [{"name": "rackplane-test",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "rackplane-test",
                      "context": {"cluster": "rackplane-test", "user": "admin"}}],
    }, indent=2)  # fmt: skip


def kwok_config(stages: Path, server_port: int) -> str:
    """kwok's configuration (JSON is YAML): options, then the stages."""
    options = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "manageNodesWithAnnotationSelector": FAKE_NODE_ANNOTATION,
            "serverAddress": f"{HOST}:{server_port}",
            "nodeLeaseDurationSeconds": 0,
            "podPlayStageParallelism": 4,
            "nodePlayStageParallelism": 4,
            "nodeLeaseParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
            "enablePodsOnNodeSyncListPager": True,
            "enablePodsOnNodeSyncStreamWatch": False,
        },
    }
    return json.dumps(options) + "\n---\n" + stages.read_text()


# -- 3-5. start, ready, stop --------------------------------------------------------------


class ControlPlane:
    """etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok from
    `binaries`, in a fresh temporary directory."""

    def __init__(
        self, binaries: Path, *, ready_timeout: float = 120.0, stop_timeout: float = 20.0
    ) -> None:
        self.binaries = binaries
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.work_dir: Path | None = None
        self.token = secrets.token_hex(16)
        self.server: str | None = None
        self.kubeconfig: Path | None = None
        self._processes: list[tuple[str, subprocess.Popen[bytes]]] = []

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Configure, start and wait for each component.

        Raises:
            PlaneError: a component exited or was not ready in time (its log's tail in the
                message; the directory is kept).
        """
        started = time.monotonic()
        self.work_dir = d = Path(tempfile.mkdtemp(prefix="rackplane-k8s-"))
        try:
            make_certs(d)
            (d / "tokens.csv").write_text(f"{self.token},admin,admin,system:masters\n")
            etcd_port, peer_port, api_port, kwok_port, scheduler_port, kcm_port = (
                free_port() for _ in range(6)
            )
            etcd = f"http://{HOST}:{etcd_port}"
            self._launch("etcd", [
                str(self.binaries / "etcd"), "--data-dir", str(d / "etcd"),
                "--listen-client-urls", etcd, "--advertise-client-urls", etcd,
                "--listen-peer-urls", f"http://{HOST}:{peer_port}",
                "--initial-advertise-peer-urls", f"http://{HOST}:{peer_port}",
                "--initial-cluster", f"default=http://{HOST}:{peer_port}",
                "--unsafe-no-fsync", "--log-level", "warn",
            ])  # fmt: skip
            self._wait("etcd", f"{etcd}/health", lambda body: b'"true"' in body)
            self.server = f"https://{HOST}:{api_port}"
            self._launch("kube-apiserver", [
                str(self.binaries / "kube-apiserver"), "--etcd-servers", etcd,
                "--bind-address", HOST, "--advertise-address", HOST,
                "--secure-port", str(api_port), "--cert-dir", str(d / "certs"),
                "--tls-cert-file", str(d / "apiserver.crt"),
                "--tls-private-key-file", str(d / "apiserver.key"),
                "--token-auth-file", str(d / "tokens.csv"), "--authorization-mode", "RBAC",
                "--service-account-issuer", "https://kubernetes.default.svc",
                "--service-account-key-file", str(d / "sa.pub"),
                "--service-account-signing-key-file", str(d / "sa.key"),
                "--service-cluster-ip-range", "10.96.0.0/16",
                "--disable-admission-plugins",
                "ServiceAccount,TaintNodesByCondition,PodGroupProtection",
                "--endpoint-reconciler-type", "none",
                "--feature-gates", WORKLOAD_GATE, "--runtime-config", WORKLOAD_API,
            ])  # fmt: skip
            self._wait(
                "kube-apiserver", f"{self.server}/readyz", lambda body: body.strip() == b"ok"
            )
            self.kubeconfig = d / "kubeconfig"
            self.kubeconfig.write_text(kubeconfig(self.server, d / "ca.crt", self.token))
            (d / "kwok.yaml").write_text(kwok_config(self.binaries / "stages.yaml", kwok_port))
            # It serves with the apiserver's certificate (127.0.0.1, from our CA), so its
            # /healthz is verified like the others'; anonymously (always allowed there): no
            # delegated authentication, which would look for a client CA nobody publishes.
            self._launch("kube-scheduler", [
                str(self.binaries / "kube-scheduler"), "--kubeconfig", str(self.kubeconfig),
                "--leader-elect=false", "--bind-address", HOST,
                "--secure-port", str(scheduler_port),
                "--tls-cert-file", str(d / "apiserver.crt"),
                "--tls-private-key-file", str(d / "apiserver.key"),
                "--feature-gates", WORKLOAD_GATE,
            ])  # fmt: skip
            self._launch("kube-controller-manager", [
                str(self.binaries / "kube-controller-manager"),
                "--kubeconfig", str(self.kubeconfig), "--leader-elect=false",
                "--controllers", CONTROLLERS, "--bind-address", HOST,
                "--secure-port", str(kcm_port),
                "--tls-cert-file", str(d / "apiserver.crt"),
                "--tls-private-key-file", str(d / "apiserver.key"),
                "--feature-gates", WORKLOAD_GATE,
            ])  # fmt: skip
            self._launch("kwok", [
                str(self.binaries / "kwok"), "--kubeconfig", str(self.kubeconfig),
                "--config", str(d / "kwok.yaml"),
            ])  # fmt: skip
            self._wait(
                "kube-scheduler", f"https://{HOST}:{scheduler_port}/healthz",
                lambda body: body.strip() == b"ok", token=False,
            )  # fmt: skip
            self._wait(
                "kube-controller-manager", f"https://{HOST}:{kcm_port}/healthz",
                lambda body: body.strip() == b"ok", token=False,
            )  # fmt: skip
            self._wait(
                "kwok", f"http://{HOST}:{kwok_port}/healthz", lambda body: body.strip() == b"ok"
            )
        except BaseException as err:
            kept = self.work_dir
            self.stop(keep_dir=True)
            if isinstance(err, PlaneError):
                raise PlaneError(f"{err}\n(kept for a post-mortem: {kept})") from err
            raise
        say(f"control plane ready on {self.server} in {time.monotonic() - started:.1f} s")
        return self

    def stop(self, *, keep_dir: bool = False) -> None:
        """SIGTERM each component's process group, newest first; SIGKILL after the timeout."""
        for name, process in reversed(self._processes):
            if process.poll() is not None:
                continue
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                say(f"{name} did not stop in {self.stop_timeout:.0f} s after SIGTERM: killing it")
                _signal_group(process, signal.SIGKILL)
                process.wait()
        self._processes = []
        if self.work_dir is not None and not keep_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def pids(self) -> dict[str, int]:
        """Each running component's process id (it leads its own process group)."""
        return {n: p.pid for n, p in self._processes if p.poll() is None}

    def _launch(self, name: str, argv: list[str]) -> None:
        assert self.work_dir is not None
        with (self.work_dir / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.work_dir, start_new_session=True,
            )  # fmt: skip
        self._processes.append((name, process))

    def _wait(self, name: str, url: str, ok: object, *, token: bool = True) -> None:
        """Poll `url` (https: verified against our CA) until `ok(body)`; `token`: as admin."""
        assert self.work_dir is not None
        process = dict(self._processes)[name]
        context = ssl.create_default_context(cafile=str(self.work_dir / "ca.crt"))
        headers = {"Authorization": f"Bearer {self.token}"} if token else {}
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if process.poll() is not None:
                raise PlaneError(
                    f"{name} exited with status {process.returncode} before it was ready:\n"
                    f"{tail_file(self.work_dir / f'{name}.log')}"
                )
            with contextlib.suppress(OSError, urllib.error.URLError):
                request = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(request, timeout=2, context=context) as response:
                    if callable(ok) and ok(response.read()):
                        return
            if time.monotonic() > deadline:
                raise PlaneError(
                    f"{name} was not ready at {url} within {self.ready_timeout:.0f} s:\n"
                    f"{tail_file(self.work_dir / f'{name}.log')}"
                )
            time.sleep(0.25)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


# -- CLI ------------------------------------------------------------------------------------


class _Terminated(Exception):
    """SIGTERM arrived: stop the plane on the way out."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="control_plane.py",
        description=f"A throwaway Kubernetes {K8S_VERSION} control plane "
        "(etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok).",
    )
    parser.add_argument("--cache-dir", type=Path, default=None, help="where the build lives")
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help=f"start the plane, run CMD with {ENV_VAR}, stop")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    sub.add_parser("build", help="only build (or find) the binaries")
    sub.add_parser("serve", help="start the plane and keep it running until Ctrl-C")
    args = parser.parse_args(argv)
    command: list[str] = list(getattr(args, "command", None) or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if args.action == "run" and not command:
        parser.error("run needs a command: run -- CMD ARGS...")
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        binaries = build(args.cache_dir)
        if args.action == "build":
            say(f"binaries ready in {binaries}")
            return 0
        with ControlPlane(binaries) as plane:
            assert plane.kubeconfig is not None
            if args.action == "serve":
                say(f"serving; kubeconfig: {plane.kubeconfig}; Ctrl-C stops it")
                with contextlib.suppress(KeyboardInterrupt, _Terminated):
                    while plane.pids():
                        time.sleep(0.5)
                return 0
            env = dict(os.environ, **{ENV_VAR: str(plane.kubeconfig)})
            try:
                status = subprocess.call(command, env=env)
            except OSError as err:
                say(f"cannot run {command[0]!r}: {err}")
                return 127
            say("stopping the control plane")
            return status
    except PlaneError as err:
        say(f"error: {err}")
        return EXIT_FAILED
    except (KeyboardInterrupt, _Terminated):
        say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
