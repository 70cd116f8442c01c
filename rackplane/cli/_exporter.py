"""`rackplane exporter nvml | dcgm`: publish node telemetry, or print one sample (`--once`)."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rackplane._errtext import named
from rackplane.cli._render import checked, console, errors, fail, print_json
from rackplane.models import ClusterId, NodeId, NodeTelemetry

exporter_app = typer.Typer(
    help="Node exporters: GPU telemetry from NVML or a dcgm-exporter scrape.",
    no_args_is_help=True,
)

Broker = Annotated[str, typer.Option(help="kafka://host:port of the running system.")]
Cluster = Annotated[str, typer.Option(help="Cluster id the node belongs to.")]
Prefix = Annotated[str, typer.Option(help="Topic prefix.")]
Interval = Annotated[str, typer.Option(help="Time between samples: 10s, 500ms, 1m.")]
Once = Annotated[bool, typer.Option("--once", help="Read once and print instead of publishing.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON (with --once).")]
Count = Annotated[int | None, typer.Option(help="Stop after this many samples.")]


def _render(samples: list[NodeTelemetry], as_json: bool) -> None:
    from rackplane.exporters import UNITS, describe

    if as_json:
        print_json(describe(samples))
        return
    for s in samples:
        t = Table(title=f"{s.node} at {s.at.isoformat()}", title_justify="left")
        t.add_column("reading")
        t.add_column("unit")
        for g in s.gpus:
            t.add_column(f"GPU {g.index}", justify="right")
        t.add_row("uuid", "", *(g.uuid or "-" for g in s.gpus))
        t.add_row("model", "", *(escape(g.model or "-") for g in s.gpus))
        for name, unit in UNITS.items():
            values = [getattr(g, name) for g in s.gpus]
            t.add_row(name, unit, *("unsupported" if v is None else str(v) for v in values))
        console.print(t)


def _run(
    source: Callable[[datetime], list[NodeTelemetry]],
    *,
    broker: str,
    prefix: str,
    interval: str,
    count: int | None,
    wait: Callable[[float], None] | None = None,
) -> None:
    from rackplane.exporters import parse_interval, publish
    from rackplane.streams.config import StreamConfig

    try:
        seconds = parse_interval(interval)
        config = StreamConfig(broker=broker, prefix=prefix)
        config.bootstrap  # noqa: B018  (validates the URL)
    except ValueError as err:
        fail(str(err))

    def sent(rounds: int, samples: list[NodeTelemetry]) -> None:
        gpus = sum(len(s.gpus) for s in samples)
        errors.print(f"sample {rounds}: {len(samples)} node(s), {gpus} GPU(s) published")

    try:
        n = asyncio.run(
            publish(config, source, interval=seconds, wait=wait, count=count, on_sent=sent)
        )
    except KeyboardInterrupt:
        return
    except Exception as err:  # a broker that cannot be reached, said plainly
        fail(f"cannot publish to {broker}: {named(err)}")
    errors.print(f"[green]{n} samples published[/] to {config.topic('telemetry')}")


@exporter_app.command()
def nvml(
    node: Annotated[str, typer.Option(help="This node's id in the cluster.")],
    cluster: Cluster = "default",
    broker: Broker = "kafka://127.0.0.1:9092",
    prefix: Prefix = "rackplane",
    interval: Interval = "10s",
    once: Once = False,
    json_out: Json = False,
    count: Count = None,
) -> None:
    """Sample every GPU of this node through NVML (nvidia-ml-py) and publish telemetry."""
    checked(NodeId, node, "--node")
    checked(ClusterId, cluster, "--cluster")
    import pynvml

    from rackplane.exporters import NvmlSampler

    try:
        sampler = NvmlSampler(cluster, node, nvml=pynvml)
    except pynvml.NVMLError as err:
        fail(f"NVML is not available on this machine ({err}): is the NVIDIA driver loaded?")
    try:
        if once:
            sampler.wait_events(0)
            _render([sampler.sample(datetime.now(UTC))], json_out)
            return
        _run(
            lambda at: [sampler.sample(at)],
            broker=broker, prefix=prefix, interval=interval, count=count,
            wait=sampler.wait_events,
        )  # fmt: skip
    finally:
        sampler.close()


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
    return body.decode("utf-8", errors="replace")


@exporter_app.command()
def dcgm(
    scrape: Annotated[
        str | None, typer.Option(help="dcgm-exporter URL, e.g. http://HOST:9400/metrics.")
    ] = None,
    file: Annotated[Path | None, typer.Option(help="A saved scrape (Prometheus text).")] = None,
    node: Annotated[
        str | None, typer.Option(help="Node id (default: the Hostname/hostname label).")
    ] = None,
    cluster: Cluster = "default",
    broker: Broker = "kafka://127.0.0.1:9092",
    prefix: Prefix = "rackplane",
    interval: Interval = "10s",
    once: Once = False,
    json_out: Json = False,
    count: Count = None,
) -> None:
    """Convert a dcgm-exporter scrape into telemetry and publish it."""
    from rackplane.exporters import convert

    if (scrape is None) == (file is None):
        fail("give exactly one of --scrape URL or --file FILE")
    if node is not None:
        checked(NodeId, node, "--node")
    checked(ClusterId, cluster, "--cluster")
    where = scrape or str(file)

    def read(at: datetime) -> list[NodeTelemetry]:
        try:
            text = _fetch(scrape) if scrape else Path(str(file)).read_text("utf-8")
        except UnicodeDecodeError as err:
            why = f"expected UTF-8 text (byte {err.start} cannot be decoded)"
            raise _ReadError(f"cannot read {where}: {why}") from err
        except OSError as err:
            raise _ReadError(f"cannot read {where}: {err.strerror or err}") from err
        except (urllib.error.URLError, ValueError) as err:
            raise _ReadError(f"cannot read {where}: {err}") from err
        try:
            out = convert(text, cluster=cluster, at=at, node=node)
        except ValueError as err:
            raise _ReadError(f"{where}: {err}") from err
        for problem in out.problems:
            errors.print(f"[yellow]warning:[/] {escape(f'{where}: {problem}')}", highlight=False)
        if not out.samples:
            raise _ReadError(f"{where}: no GPU readings (no DCGM_FI_* family with a gpu label)")
        return out.samples

    try:
        if once:
            _render(read(datetime.now(UTC)), json_out)
            return
        _run(read, broker=broker, prefix=prefix, interval=interval, count=count)
    except _ReadError as err:
        fail(str(err))


class _ReadError(Exception):
    """A source that cannot be read or converted (said plainly, no traceback)."""


def register(app: typer.Typer) -> None:
    """Add `rackplane exporter ...`."""
    app.add_typer(exporter_app, name="exporter")
