"""`rackplane topology show|import`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from rackplane.cli._defaults import POD_LABEL, SUPERPOD_LABEL
from rackplane.cli._render import console, errors, fail, print_json
from rackplane.models import Topology, TopologyIndex, printable

topology_app = typer.Typer(help="Inspect cluster files; import Slurm and Kubernetes topologies.")


def describe(t: Topology) -> dict[str, Any]:
    """The facts `topology show` reports, as plain data."""
    index = TopologyIndex(t)
    pods = []
    for pod, racks in index.pod_racks.items():
        rs = [index.rack(r) for r in racks]
        pods.append(
            {
                "pod": pod,
                "superpod": index.superpod_of[pod],
                "racks": len(rs),
                "nodes": sum(len(r.nodes) for r in rs),
                "gpus": sum(r.gpus for r in rs),
            }
        )
    domains = index.gpus_per_domain()
    hops = Counter(
        index.hops(t.racks[0].id, r.id) for r in t.racks[1:]
    )  # from the first rack: how the fabric looks from one rack
    return {
        "cluster": t.cluster,
        "racks": len(t.racks),
        "nodes": t.node_count,
        "gpus": t.gpu_count,
        "pods": len(index.pod_racks),
        "gpus_per_nvlink_domain": {str(k): v for k, v in sorted(domains.items())},
        "hops_from_first_rack": {str(k): v for k, v in sorted(hops.items())},
        "pod_list": pods,
    }


def _unreadable(path: Path, err: OSError) -> str:
    return f"{path}: cannot read it ({err.strerror or err})"


@topology_app.command("show")
def show(
    file: Annotated[Path, typer.Argument(help="A rackplane cluster file (YAML or JSON).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Summarise a cluster file: racks, nodes, GPUs, pods, GPUs per NVLink domain."""
    from rackplane.importers import TopologyFileError, load_cluster_file

    try:
        topo = load_cluster_file(file).topology
    except TopologyFileError as err:
        fail(str(err))
    except OSError as err:
        fail(_unreadable(file, err))
    facts = describe(topo)
    if json_out:
        print_json(facts)
        return
    t = Table(title=f"Cluster {topo.cluster}", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("racks (NVLink domains)", f"{facts['racks']:,}")
    t.add_row("nodes", f"{facts['nodes']:,}")
    t.add_row("GPUs", f"{facts['gpus']:,}")
    t.add_row("IB pods", f"{facts['pods']:,}")
    domains = ", ".join(
        f"{gpus} GPUs x {n} racks" for gpus, n in facts["gpus_per_nvlink_domain"].items()
    )
    t.add_row("GPUs per NVLink domain", domains)
    hops = ", ".join(f"{n} racks at {h} hops" for h, n in facts["hops_from_first_rack"].items())
    t.add_row("IB distance from the first rack", hops or "-")
    console.print(t)
    p = Table(title="Pods", title_justify="left", header_style="bold")
    for col in ("pod", "superpod", "racks", "nodes", "GPUs"):
        p.add_column(col, justify="left" if col in ("pod", "superpod") else "right")
    for pod in facts["pod_list"]:
        p.add_row(
            pod["pod"],
            pod["superpod"] or "-",
            str(pod["racks"]),
            f"{pod['nodes']:,}",
            f"{pod['gpus']:,}",
        )
    console.print(p)


@topology_app.command("import")
def import_(
    slurm: Annotated[
        Path | None,
        typer.Option(
            "--slurm",
            help="Slurm topology.yaml or topology.conf (topology/block or topology/tree), "
            "or `scontrol show topology` output (tree).",
        ),
    ] = None,
    k8s: Annotated[
        Path | None, typer.Option("--k8s", help="Output of `kubectl get nodes -o json`.")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Cluster file to write (default: stdout).")
    ] = None,
    cluster: Annotated[
        str | None, typer.Option(help="Cluster id (default: from the source, else its name).")
    ] = None,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node (Slurm has no count).")] = 4,
    name: Annotated[
        str | None, typer.Option(help="Which topology of a topology.yaml (default: the default).")
    ] = None,
    domain_nodes: Annotated[
        int,
        typer.Option(
            min=1, help="Nodes of one NVLink domain: a Slurm tree's leaf switch holds at most this."
        ),
    ] = 18,
    pod_label: Annotated[str, typer.Option(help="Node label naming the IB pod.")] = POD_LABEL,
    superpod_label: Annotated[
        str, typer.Option(help="Node label naming the superpod.")
    ] = SUPERPOD_LABEL,
) -> None:
    """Turn a Slurm block or tree topology or Kubernetes node list into a rackplane cluster file."""
    from rackplane.importers import (
        TopologyFileError,
        dump_cluster_file,
        load_k8s_nodes,
        load_slurm_topology_with_notes,
    )

    if (slurm is None) == (k8s is None):
        fail("give exactly one of --slurm FILE or --k8s FILE")
    skipped: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    try:
        if slurm is not None:
            topo, notes = load_slurm_topology_with_notes(
                slurm,
                cluster=cluster or slurm.stem.replace(".", "-"),
                gpus_per_node=gpus_per_node,
                name=name,
                domain_nodes=domain_nodes,
            )
        else:
            assert k8s is not None
            result = load_k8s_nodes(
                k8s, cluster=cluster, pod_label=pod_label, superpod_label=superpod_label
            )
            topo, skipped = result.topology, result.skipped
    except TopologyFileError as err:
        fail(str(err))
    except OSError as err:
        fail(_unreadable(Path(err.filename or slurm or k8s or ""), err))
    text = dump_cluster_file(topo)
    if output is None:
        typer.echo(text, nl=False)
    else:
        try:
            output.write_text(text)
        except OSError as err:
            fail(f"--output: cannot write {output}: {err.strerror or err}")
    facts = describe(topo)
    errors.print(
        f"[green]imported[/] cluster {topo.cluster}: {facts['racks']} racks, "
        f"{facts['nodes']:,} nodes, {facts['gpus']:,} GPUs, {facts['pods']} pods"
        + (f" -> {output}" if output else ""),
        highlight=False,
    )
    for note in notes:  # names from the file: data
        errors.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    if skipped:
        t = Table(title=f"Skipped {len(skipped)} nodes", title_justify="left")
        t.add_column("node")
        t.add_column("why")
        for node, why in skipped:
            t.add_row(escape(printable(node, 200)), escape(why))  # names from the file: data
        errors.print(t)
