"""`rackplane capacity`, `rackplane reliability`, `rackplane simulate`: the planning commands.

An adapter: parse options, call `rackplane.sim`, render tables, JSON and PNG plots (matplotlib,
Agg backend). `register(app)` adds the three commands to a Typer app.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackplane.cli._defaults import DEFAULT_SLICE_SIZES, PRESETS
from rackplane.cli._render import console, fail, print_json

if TYPE_CHECKING:
    from rackplane.sim import CapacityReport, PolicyMetrics, QueueMetrics, SimReport

_stderr = Console(stderr=True)
_DEFAULT_SWEEP = "0:0.1:0.0025"


def register(app: typer.Typer) -> None:
    """Add `capacity`, `reliability` and `simulate` to `app`."""
    app.command("capacity")(capacity)
    app.command("reliability")(reliability_command)
    app.command("simulate")(simulate_command)


# -- capacity --------------------------------------------------------------------------------


def capacity(
    racks: Annotated[int, typer.Option(help="Racks (NVLink domains) in the cluster.")],
    nodes_per_rack: Annotated[int, typer.Option(help="Nodes per rack (18 for an NVL72).")] = 18,
    unavailability: Annotated[
        float | None, typer.Option(help="Probability that a node is unavailable (0..1).")
    ] = None,
    mtbi_days: Annotated[
        float | None,
        typer.Option(help="Node MTBI in days (with --mttr-days, instead of --unavailability)."),
    ] = None,
    mttr_days: Annotated[float | None, typer.Option(help="Node repair time in days.")] = None,
    slice_sizes: Annotated[
        str | None,
        typer.Option(
            help="Slice sizes to compare, comma-separated (default: those of "
            f"{','.join(map(str, DEFAULT_SLICE_SIZES))} that fit a rack beside its spares, "
            "and that room)."
        ),
    ] = None,
    spares: Annotated[int, typer.Option(help="Nodes per rack kept as hot spares.")] = 0,
    monte_carlo: Annotated[
        int | None, typer.Option(help="Also estimate by sampling this many trials.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the Monte Carlo estimate.")] = 0,
    sweep: Annotated[
        str | None, typer.Option(help="START:STOP:STEP: usable capacity over unavailability.")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of capacity vs P.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Expected usable nodes when every slice must fit inside one rack (exact, binomial).

    A rack with k healthy nodes hosts floor(min(k, N - spares) / s) slices of s nodes; usable
    nodes are R times the expectation of s * floor(min(k, N - spares) / s) over
    k ~ Binomial(N, 1 - P).
    """
    from rackplane.sim import CapacityError, capacity_report, parse_sweep
    from rackplane.sim.capacity import default_slice_sizes

    try:
        sizes = (
            default_slice_sizes(nodes_per_rack, spares)
            if slice_sizes is None
            else _int_list(slice_sizes)
        )
        p = _probability(unavailability, mtbi_days, mttr_days, required=sweep is None)
        points = parse_sweep(sweep) if sweep else []
        single = (
            capacity_report(
                racks, nodes_per_rack, p, sizes, spares=spares, trials=monte_carlo, seed=seed
            )
            if p is not None
            else None
        )
        reports = [
            capacity_report(
                racks, nodes_per_rack, q, sizes, spares=spares, trials=monte_carlo, seed=seed
            )
            for q in points
        ]
        if plot is not None:
            curve = reports or [
                capacity_report(racks, nodes_per_rack, q, sizes, spares=spares)
                for q in parse_sweep(_DEFAULT_SWEEP)
            ]
            _plot_capacity(curve, plot, mark=p)
    except CapacityError as err:
        fail(str(err))
    except OSError as err:  # only the plot writes a file
        fail(f"--plot: cannot write {plot}: {err.strerror or err}")
    if as_json:
        data: dict[str, Any] = _capacity_json(single) if single else {}
        if reports:
            data.update(racks=racks, nodes_per_rack=nodes_per_rack, spares=spares)
            data["sweep"] = [_capacity_json(r) for r in reports]
        print_json(data)
        return
    if single is not None:
        console.print(_capacity_table(single))
        console.print(_best_line(single))
    if reports:
        console.print(_sweep_table(reports))
    if plot is not None:
        console.print(f"plot written to {plot}")


def _int_list(text: str) -> list[int]:
    from rackplane.sim import CapacityError

    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CapacityError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise CapacityError("give at least one slice size")
    return values


def _probability(
    p: float | None, mtbi: float | None, mttr: float | None, *, required: bool
) -> float | None:
    from rackplane.sim import CapacityError, unavailability_from

    if p is not None and (mtbi is not None or mttr is not None):
        raise CapacityError("give --unavailability or --mtbi-days with --mttr-days, not both")
    if (mtbi is None) != (mttr is None):
        raise CapacityError("--mtbi-days and --mttr-days go together")
    if mtbi is not None and mttr is not None:
        return unavailability_from(mtbi, mttr)
    if p is None and required:
        raise CapacityError("give --unavailability P (or --mtbi-days D --mttr-days T, or --sweep)")
    return p


def _capacity_json(r: CapacityReport) -> dict[str, Any]:
    return {
        "racks": r.racks,
        "nodes_per_rack": r.nodes_per_rack,
        "unavailability": r.unavailability,
        "spares": r.spares,
        "results": [x.model_dump() for x in r.results],
        "best_slice_size": r.best_slice_size,
        "advantage": [a.model_dump() for a in r.advantage],
    }


def _capacity_table(r: CapacityReport) -> Table:
    total = r.racks * r.nodes_per_rack
    t = Table(
        title=f"Usable capacity: {r.racks} racks x {r.nodes_per_rack} nodes ({total:,}), "
        f"P = {r.unavailability:.4g}" + (f", {r.spares} spares per rack" if r.spares else ""),
        title_justify="left",
        header_style="bold",
    )
    for name in ("slice size", "usable nodes", "usable", "Monte Carlo", "best gives"):
        t.add_column(name, justify="right")
    gains = {a.slice_size: a for a in r.advantage}
    for x in r.results:
        a = gains.get(x.slice_size)
        gain = "best" if a is None else _gain(a.extra_nodes, a.extra_fraction)
        mc = "-" if x.monte_carlo is None else f"{x.monte_carlo:,.1f}"
        t.add_row(str(x.slice_size), f"{x.usable_nodes:,.1f}", f"{x.usable_fraction:.2%}", mc, gain)
    return t


def _gain(nodes: float, fraction: float | None) -> str:
    pct = "all" if fraction is None else f"{fraction:+.1%}"
    return f"+{nodes:,.1f} nodes ({pct})"


def _best_line(r: CapacityReport) -> str:
    others = ", ".join(
        f"{_gain(a.extra_nodes, a.extra_fraction)} over {a.slice_size}" for a in r.advantage
    )
    return f"best at P = {r.unavailability:.4g}: slices of {r.best_slice_size}" + (
        f" ({others})" if others else ""
    )


def _sweep_table(reports: Sequence[CapacityReport]) -> Table:
    t = Table(title="Usable fraction by unavailability", title_justify="left", header_style="bold")
    t.add_column("P", justify="right")
    for x in reports[0].results:
        t.add_column(f"s = {x.slice_size}", justify="right")
    t.add_column("best", justify="right")
    for r in reports:
        t.add_row(
            f"{r.unavailability:.4g}",
            *(f"{x.usable_fraction:.2%}" for x in r.results),
            str(r.best_slice_size),
        )
    return t


def _plot_capacity(reports: Sequence[CapacityReport], path: Path, mark: float | None) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    ps = [r.unavailability for r in reports]
    for i, x in enumerate(reports[0].results):
        ys = [100 * r.results[i].usable_fraction for r in reports]
        ax.plot(ps, ys, marker=".", label=f"slices of {x.slice_size}")
    if mark is not None:
        ax.axvline(mark, color="grey", linestyle="--", linewidth=1, label=f"P = {mark:.3g}")
    r0 = reports[0]
    ax.set_title(f"Usable capacity, {r0.racks} racks x {r0.nodes_per_rack} nodes")
    ax.set_xlabel("node unavailability P")
    ax.set_ylabel("usable nodes (% of all nodes)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# -- reliability -----------------------------------------------------------------------------


def reliability_command(
    mtbi_days: Annotated[float, typer.Option(help="Mean days between interruptions of a node.")],
    nodes_per_rack: Annotated[int, typer.Option(help="Nodes per rack (18 for an NVL72).")] = 18,
    racks: Annotated[int, typer.Option(help="Racks in the cluster.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """How often a rack, and some rack of the cluster, is interrupted."""
    from rackplane.sim import reliability

    try:
        r = reliability(mtbi_days, nodes_per_rack, racks)
    except ValueError as err:
        fail(str(err))
    if as_json:
        print_json(r.model_dump())
        return
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("node MTBI", f"{r.node_mtbi_days:,.1f} days")
    t.add_row("rack MTBI", f"{r.rack_mtbi_days:,.1f} days ({r.nodes_per_rack} nodes per rack)")
    t.add_row(
        "between rack interruptions, cluster-wide",
        f"{r.cluster_hours_between_rack_interruptions:,.1f} hours ({r.racks} racks)",
    )
    t.add_row("rack interruptions per day", f"{r.rack_interruptions_per_day:,.2f}")
    console.print(t)


# -- simulate --------------------------------------------------------------------------------


def simulate_command(
    scenario: Annotated[Path, typer.Argument(help="Scenario file (YAML).")],
    policy: Annotated[str | None, typer.Option(help=f"One of: {', '.join(PRESETS)}.")] = None,
    compare_policies: Annotated[
        str | None,
        typer.Option("--compare", help="Several policies, comma-separated, on the same seed."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Overrides the scenario's seed.")] = None,
    days: Annotated[float | None, typer.Option(help="Overrides the scenario's days.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG comparing the policies.")] = None,
) -> None:
    """Run the real controller and policies on a simulated cluster, in virtual time."""
    from rackplane.sim import ScenarioError, check_days, compare, load_scenario

    if policy is not None and compare_policies is not None:
        fail("give --policy or --compare, not both")
    try:
        loaded = load_scenario(scenario)
    except ScenarioError as err:
        fail(str(err))
    names = (
        [policy]
        if policy is not None
        else [p.strip() for p in compare_policies.split(",") if p.strip()]
        if compare_policies is not None
        else list(loaded.policies)
    )
    unknown = [n for n in names if n not in PRESETS]
    if unknown or not names:
        wrong = repr(unknown[0]) if unknown else "(none)"
        fail(f"unknown policy {wrong}; choose from {', '.join(PRESETS)}")
    if days is not None:
        try:
            check_days(days, start=loaded.start, warmup_days=loaded.runtime.warmup_days)
        except ScenarioError as err:
            fail(f"--days: {err}")
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=_stderr,
        transient=True,
        disable=not _stderr.is_terminal,
    ) as bar:
        tasks = {n: bar.add_task(f"{loaded.name}: {n}", total=1.0) for n in names}

        def tick(name: str, done: float) -> None:
            bar.update(tasks[name], completed=done)

        report = compare(loaded, names, seed=seed, days=days, progress=tick)
    if plot is not None:
        try:
            _plot_policies(report, plot)
        except OSError as err:
            fail(f"--plot: cannot write {plot}: {err.strerror or err}")
    if as_json:
        print_json(report.to_json())
        return
    console.print(
        f"[bold]{report.scenario}[/]: {report.racks} racks, {report.nodes:,} nodes, "
        f"{report.days:g} days, seed {report.seed}; expected node unavailability "
        f"{report.expected_node_unavailability:.2%}",
        highlight=False,
    )
    console.print(_policies_table(report))
    console.print(_waits_table(report))
    for m in report.policies:
        if m.queues:
            console.print(queues_table(m))
    if plot is not None:
        console.print(f"plot written to {plot}")


def _side_by_side(
    title: str, first: str, columns: Sequence[str], *, caption: str | None = None
) -> Table:
    """A table with a label column `first` and one right-aligned column per name."""
    t = Table(
        title=title,
        caption=caption,
        title_justify="left",
        caption_justify="left",
        header_style="bold",
    )
    t.add_column(first)
    for name in columns:
        t.add_column(name, justify="right", overflow="fold")
    return t


def _policies_table(report: SimReport) -> Table:
    from rackplane.sim import COLUMNS, format_value

    t = _side_by_side("Policies side by side", "metric", [m.policy for m in report.policies])
    for key, label, kind in COLUMNS:
        t.add_row(label, *(format_value(getattr(m, key), kind) for m in report.policies))
    return t


def _waits_table(report: SimReport) -> Table:
    t = _side_by_side(
        "Queueing delay (hours): p50 / p99 per job class",
        "class",
        [m.policy for m in report.policies],
    )
    classes = sorted({c for m in report.policies for c in m.queue_wait_hours})
    for c in classes:
        cells = []
        for m in report.policies:
            w = m.queue_wait_hours.get(c)
            cells.append("-" if w is None else f"{w.p50_hours:,.1f} / {w.p99_hours:,.1f}")
        t.add_row(c, *cells)
    return t


def queues_table(m: PolicyMetrics, label: str | None = None) -> Table:
    """Queues side by side (columns), their figures as rows; Jain's index in the title,
    with `label` (default: the run's policy) saying which run it is."""
    jain = "-" if m.jain_index is None else f"{m.jain_index:.3f}"
    t = _side_by_side(
        f"Queues ({label or m.policy}): Jain's fairness index {jain}",
        "queue",
        [q.queue for q in m.queues],
        caption=(
            "Jain's index over x = held / nominal: J = (sum x)^2 / (n sum x^2); "
            "1: every queue used the same share of its quota, 1/n: one queue used it all"
        ),
    )

    def pct(x: float | None, digits: int = 0) -> str:
        return "-" if x is None else f"{100 * x:.{digits}f}%"

    def hours(x: float | None) -> str:
        return "-" if x is None else f"{x:,.1f}"

    rows: tuple[tuple[str, Callable[[QueueMetrics], str]], ...] = (
        ("parent", lambda q: q.parent or "-"),
        ("nominal nodes", lambda q: f"{q.nominal_nodes:,}"),
        ("held nodes (mean)", lambda q: f"{q.held_nodes_mean:,.1f}"),
        ("held / nominal", lambda q: pct(q.quota_utilisation)),
        ("held / cluster", lambda q: pct(q.cluster_share, 1)),
        ("time borrowing", lambda q: pct(q.borrowing_fraction)),
        ("jobs submitted", lambda q: f"{q.jobs_submitted:,}"),
        ("jobs placed", lambda q: f"{q.jobs_placed:,}"),
        ("jobs finished", lambda q: f"{q.jobs_finished:,}"),
        ("wait, mean (h)", lambda q: hours(q.wait_hours_mean)),
        ("wait, p95 (h)", lambda q: hours(q.wait_hours_p95)),
        *(
            (f"preempted: {cause}", lambda q, c=cause: f"{q.preemptions.get(c, 0):,}")
            for cause in ("reclaim", "priority", "defrag")
        ),
    )
    for label, cell in rows:
        t.add_row(label, *(cell(q) for q in m.queues))
    return t


def _plot_policies(report: SimReport, path: Path) -> None:
    plt = _pyplot()
    names = [m.policy for m in report.policies]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    panels = (
        (
            "slices rack-local (%)",
            [100 * (m.slices_rack_local_fraction or 0) for m in report.policies],
        ),
        ("goodput (%)", [100 * (m.goodput or 0) for m in report.policies]),
        ("hero wait, mean (h)", [m.hero_wait_hours_mean or 0 for m in report.policies]),
    )
    for ax, (title, values) in zip(axes.flat, panels, strict=False):
        ax.bar(names, values, color="tab:blue")
        ax.set_title(title)
        ax.set_ylim(bottom=0, top=max(1.0, *values) * 1.05)
    ax = axes.flat[3]
    bottom = [0.0] * len(names)
    for label, key in (
        ("failures, re-queued", "gpu_hours_lost_failures"),
        ("swaps", "gpu_hours_lost_swaps"),
        ("degrades", "gpu_hours_lost_degrades"),
        ("migrations", "gpu_hours_lost_migrations"),
        ("preemptions", "gpu_hours_lost_preemptions"),
        ("cross-rack steps", "gpu_hours_lost_cross_rack"),
    ):
        values = [float(getattr(m, key)) for m in report.policies]
        ax.bar(names, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_title("GPU-hours lost")
    ax.legend(fontsize=8)
    for ax in axes.flat:
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.suptitle(
        f"{report.scenario}: {report.racks} racks, {report.days:g} days, seed {report.seed}"
    )
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
