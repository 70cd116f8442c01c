"""`rackplane kube`: run the Kubernetes adapter for one cluster (see `rackplane.kube.adapter`).

Broker, prefix, actor and key file come from the settings like every client command's
(flags > RACKPLANE_* > config file). The actor defaults to `runtime:kube`; with a key file it
is the key's. The adapter's key needs the roles `runtime` (jobs) and `operator` (node health,
cordons); `admin` too for a `kubectl uncordon` or a new node to reach a cluster with keys.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from rackplane.cli._client import Broker, Cluster, Prefix, _key, _settings
from rackplane.cli._config import ConfigFile
from rackplane.cli._render import checked, errors, fail, log_to_stderr
from rackplane.models import Actor as ActorId
from rackplane.models import ClusterId

DEFAULT_ACTOR = "runtime:kube"

Actor = Annotated[
    str | None,
    typer.Option(help=f"Who the adapter sends as (default {DEFAULT_ACTOR}; a key file's actor)."),
]


def register(app: typer.Typer) -> None:
    """Add `rackplane kube` to the CLI."""
    app.command(name="kube")(kube)


def kube(
    cluster: Cluster,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="kubeconfig file (default: in-cluster, else ~/.kube/config)."),
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="Watch only this namespace's pods (default: all).")
    ] = None,
    node_selector: Annotated[
        str | None,
        typer.Option(help="Label selector of the cluster's nodes (default: every node)."),
    ] = None,
    pod_label: Annotated[
        str, typer.Option(help="Node label naming the IB pod (Topograph).")
    ] = "network.topology.nvidia.com/leaf",
    superpod_label: Annotated[
        str, typer.Option(help="Node label naming the superpod (Topograph).")
    ] = "network.topology.nvidia.com/spine",
    config_file: ConfigFile = None,
    broker: Broker = None,
    prefix: Prefix = None,
    actor: Actor = None,
    log_level: Annotated[
        str, typer.Option(help="Log level: warning (default), info (every action), debug.")
    ] = "warning",
) -> None:
    """Schedule the cluster's Kubernetes GPU gangs: bind, evict and report, until stopped."""
    from rackplane.kube._api import ApiError, KubeApi
    from rackplane.kube.adapter import KubeAdapter

    checked(ClusterId, cluster, "--cluster")
    if kubeconfig is not None:
        _check_kubeconfig(kubeconfig)
    s = _settings(config_file, broker, prefix, actor)
    key = _key(s)
    who = key.actor if key is not None else (s.actor or DEFAULT_ACTOR)
    checked(ActorId, who, "--actor")
    config = s.stream_config()
    # Only now: a refusal above leaves no handler behind on a stream its caller may close.
    log_to_stderr(log_level)

    async def go() -> None:
        try:
            api = await KubeApi.connect(kubeconfig)
        except Exception as err:  # the loader raises its own ConfigException and plain errors
            why = " ".join(str(err).split())  # YAML errors span lines: one line
            raise ApiError(0, f"cannot read the Kubernetes configuration: {why}") from None
        try:
            adapter = KubeAdapter(
                config,
                api,
                cluster,
                actor=who,
                key=key,
                namespace=namespace,
                node_selector=node_selector,
                pod_label=pod_label,
                superpod_label=superpod_label,
            )
            errors.print(f"kube: scheduling cluster {cluster} as {who}", highlight=False)
            await adapter.run()
        finally:
            await api.close()

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except ApiError as err:
        fail(str(err))
    except Exception as err:  # the broker gone for good, a gap in the log: one line, exit 2
        fail(f"kube: {type(err).__name__}: {' '.join(str(err).split())}")


def _check_kubeconfig(path: Path) -> None:
    """Refuse in one line a `--kubeconfig` the loader would choke on with a message of its own
    ("'utf-8' codec can't decode ...", "'NoneType' object does not support item assignment")."""
    import yaml

    if not path.is_file():
        fail(f"--kubeconfig: no file {path}")
    try:
        doc = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        fail(f"--kubeconfig: {path}: expected UTF-8 text (byte {err.start} cannot be decoded)")
    except OSError as err:
        fail(f"--kubeconfig: cannot read {path}: {err.strerror or err}")
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(err, "problem", None) or "cannot be parsed"
        fail(f"--kubeconfig: {where}: not valid YAML: {problem}")
    if not isinstance(doc, dict):
        fail(
            f"--kubeconfig: {path}: expected a kubeconfig (a mapping of clusters, contexts, users)"
        )
