"""`rackplane up`: broker, worker and a demo load, with live progress, until Ctrl-C.

The broker: `--broker` names one; otherwise `up` starts one. By default that is a local
Apache Kafka 4.1.1 (`rackplane.streams.kafka_local`) when Java 17+ is on PATH and its jars are
cached or Maven can fetch them (once), else the embedded Tansu, and `up` says why; `--kafka`
insists on Kafka (an error if it cannot), `--tansu` on Tansu. Why Kafka first: Tansu 0.6.0's
cost per fetch grows with its log, so a demo left running slows down (docs/BENCHMARKS.md, "Issue
21: the broker `up` starts"). Whatever `up` starts it stops, by PID, on the way out (Ctrl-C,
SIGTERM, the end of `--duration`, or an error).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from rackplane._errtext import named
from rackplane.cli._render import console, errors, fail, print_json

DEFAULT_CLUSTER = Path("examples/gb200-128.yaml")


def register(app: typer.Typer) -> None:
    """Add `up` to the CLI."""
    app.command()(up)


def up(
    broker: Annotated[
        str | None, typer.Option(help="kafka://host:port; default: start a broker (below).")
    ] = None,
    kafka: Annotated[
        bool | None,
        typer.Option(
            "--kafka/--tansu",
            help="The broker `up` starts: a local Apache Kafka 4.1.1 (KRaft, 127.0.0.1; Java "
            "17+ on PATH and, the first time, Maven (`mvn`), which fetches its jars (~56 MB) "
            "once into ~/.cache/rackplane/kafka-4.1.1), or the embedded Tansu (ready at once, "
            "but each fetch costs more as its log grows). Default: Kafka when it can be "
            "started, else Tansu (docs/BENCHMARKS.md, issue 21).",
            show_default=False,
        ),
    ] = None,
    cluster: Annotated[Path, typer.Option(help="Cluster file of the demo.")] = DEFAULT_CLUSTER,
    headless: Annotated[bool, typer.Option(help="No live view (for scripts and CI).")] = False,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    seed: Annotated[int, typer.Option(help="Seed of the demo load.")] = 7,
    jobs_per_minute: Annotated[float, typer.Option(help="Job arrival rate.")] = 240.0,
    prefix: Annotated[str, typer.Option(help="Topic prefix.")] = "rackplane",
    actor: Annotated[
        str | None, typer.Option(help="Who acts in the console (default operator:$USER).")
    ] = None,
    db: Annotated[
        Path | None, typer.Option(help="Record the demo's history into this DuckDB file.")
    ] = None,
) -> None:
    """Start a broker (unless --broker names one), a worker and the demo load; on a terminal,
    open the operator console on it (quitting the console stops everything)."""
    from rackplane.cli._config import quiet_library_logs
    from rackplane.importers import TopologyFileError, load_cluster_file
    from rackplane.streams import EmbeddedBroker, EmbeddedBrokerError
    from rackplane.streams.config import StreamConfig, bootstrap_of
    from rackplane.streams.demo_load import LoadSettings
    from rackplane.streams.kafka_fetch import kafka_unavailable
    from rackplane.streams.process import WorkerError, WorkerProcess

    if broker is not None and kafka is not None:
        flag = "--kafka" if kafka else "--tansu"
        fail(f"--broker and {flag}: pass one ({flag} starts a broker, --broker names one)")
    if broker is not None:
        try:
            bootstrap_of(broker)
        except ValueError as err:
            fail(f"--broker: {err}")
    quiet_library_logs()
    for flag, value in (("--duration", duration), ("--jobs-per-minute", jobs_per_minute)):
        if value is not None and not (math.isfinite(value) and value > 0):
            fail(f"{flag}: expected a positive number, got {value}")
    try:
        cf = load_cluster_file(cluster)
    except OSError as err:
        why = f"{cluster}: cannot read it ({err.strerror or err})"
        fail(f"{why} (run from the repository root, or pass --cluster FILE)")
    except TopologyFileError as err:
        fail(f"{err} (run from the repository root, or pass --cluster FILE)")
    if db is not None and broker is None and db.exists() and db.stat().st_size > 0:
        fail(
            f"{db} exists: the broker `up` starts is empty, so its cluster would restart at "
            "seq 1 on top of an older history; pass a new file"
        )
    # Until the load runs (it handles signals itself), SIGTERM unwinds like Ctrl-C: whatever
    # was started (brokers lead their own process groups, out of the terminal's reach) stops.
    signal.signal(signal.SIGTERM, _terminated)
    workdir = Path(tempfile.mkdtemp(prefix="rackplane-up-"))
    embedded = None
    local_kafka = None
    worker = None
    try:
        why_not_kafka = kafka_unavailable() if broker is None and kafka is None else None
        if broker is None and kafka is not False and why_not_kafka is None:
            local_kafka = _start_kafka(workdir, insist=kafka is True)
            if local_kafka is None:  # the default, and Kafka did not start: said why
                why_not_kafka = "Apache Kafka did not start (above)"
            else:
                broker = local_kafka.url
        if broker is None:
            try:
                embedded = EmbeddedBroker(log_path=workdir / "broker.log").start()
            except EmbeddedBrokerError as err:
                fail(str(err))
            broker = embedded.url
        config = StreamConfig(
            broker=broker,
            prefix=prefix,
            app_id=f"{prefix}-up",
            db=str(db.resolve()) if db is not None else None,
        )
        say = errors.print
        say(f"[green]broker[/] {broker}")
        if embedded is not None:
            say(embedded_note(why_not_kafka), highlight=False)
        from aiokafka.errors import KafkaError

        from rackplane.streams.topics import TopicsError, ensure_topics

        try:
            asyncio.run(ensure_topics(config))
        except KafkaError as err:  # nothing listens at --broker: said plainly
            fail(f"cannot reach {broker}: {err}")
        except TopicsError as err:
            fail(str(err))
        worker = WorkerProcess(config, data_dir=workdir)
        try:
            worker.start()
        except WorkerError as err:
            fail(str(err))
        say(f"[green]worker ready[/] (views and /metrics on http://127.0.0.1:{worker.web_port})")
        settings = LoadSettings(seed=seed, jobs_per_minute=jobs_per_minute)
        summary = asyncio.run(
            _drive(config, cf.topology, cf.policy, settings, duration, headless, actor, worker)
        )
        summary["broker"] = broker
        if db is not None:
            summary["history"] = str(db)
    except KeyboardInterrupt:
        errors.print(f"interrupted: stopping what `up` started (logs in {workdir})")
        raise SystemExit(130) from None
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopping already: see it through
        if worker is not None:
            worker.stop()
        if embedded is not None:
            embedded.stop()
        if local_kafka is not None:
            _stop_kafka(local_kafka)
    if json_out:
        print_json(summary)
    else:
        console.print(_table("rackplane up: summary", summary))
    errors.print(f"stopped; logs in {workdir}")


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def embedded_note(why_not_kafka: str | None) -> str:
    """Said once when `up` starts the embedded broker (`why_not_kafka`: why not Kafka, when
    `up` chose, None after `--tansu`): each fetch that brings records costs Tansu 0.6.0 time in
    proportion to the record batches of the partition (docs/BENCHMARKS.md, "a long-running
    up"), and nothing in the protocol (no DeleteRecords, no retention) lets `up` shorten the
    log."""
    cost = (
        "the embedded Tansu keeps the log in memory and its cost grows with it: under the "
        "default demo load it took half a core or more after 7-10 minutes and ~25 MB more "
        "memory a minute."
    )
    if why_not_kafka is None:
        return (
            f"[yellow]note[/] {cost} For a longer run: rackplane up --kafka (docs/BENCHMARKS.md)."
        )
    return (
        f"[yellow]note[/] {cost} `up` starts Apache Kafka instead when it can; not here: "
        f"{why_not_kafka}."
    )


CHOSEN_FETCH_TIMEOUT_S = 180.0
"""How long the first fetch of Kafka's jars may take when `up` chose Kafka itself (the Tansu
after it); with `--kafka`, `kafka_fetch.FETCH_TIMEOUT_S` (15 minutes). A first fetch took 49 s
on this project's machine (docs/OPERATIONS.md)."""


def _start_kafka(workdir: Path, insist: bool) -> Any:
    """Java checked, the jars fetched (once, with progress), Kafka started in `workdir`. On
    failure one line (the details in `workdir/kafka-error.log`) and, when `insist` (`--kafka`),
    exit status 2; else (`up` chose Kafka) None, for the embedded broker."""
    from rackplane.streams.kafka_fetch import (
        FETCH_TIMEOUT_S,
        KafkaError,
        fetch_jars,
        require_java,
    )
    from rackplane.streams.kafka_local import KafkaServer

    def progress(message: str) -> None:
        errors.print(f"[cyan]kafka[/] {message}", highlight=False)

    if not insist:
        progress("Java 17+ found: the broker is a local Apache Kafka (--tansu: the embedded one)")
    try:
        require_java()
        # Chosen by `up`, a fetch that hangs (no network) must not hold it for long.
        limit = FETCH_TIMEOUT_S if insist else CHOSEN_FETCH_TIMEOUT_S
        jars = fetch_jars(progress=progress, timeout=limit)
        progress("starting Apache Kafka 4.1.1 (KRaft, one node) ...")
        return KafkaServer(jars, sasl=False, parent=workdir, progress=progress).start()
    except KafkaError as err:
        first, _, rest = str(err).partition("\n")
        if rest:
            details = workdir / "kafka-error.log"
            details.write_text(f"{err}\n")
            first += f" (details: {details})"
        elif insist:  # a refusal (no java, no mvn): nothing to look at
            shutil.rmtree(workdir, ignore_errors=True)
        if insist:
            fail(first)
        errors.print(f"[yellow]kafka[/] {first}", highlight=False)
        return None


def _stop_kafka(server: Any) -> None:
    """Stop the Kafka `up` started (its process group, by PID); keep its log, drop its data."""
    work_dir = server.work_dir
    server.stop(keep_dir=True)
    if work_dir is not None:
        shutil.rmtree(work_dir / "data", ignore_errors=True)


async def _supervise(worker: Any, stop: asyncio.Event) -> None:
    """Restart the worker when it exits, as Kubernetes would: a worker stops itself (non-zero)
    when a loop cannot go on, and a restarted one rebuilds from the log."""
    while not stop.is_set():
        await asyncio.sleep(1.0)
        code = worker.process.poll() if worker.process is not None else None
        if code is None or stop.is_set():
            continue
        errors.print(f"[yellow]worker exited ({code}); restarting[/] (log: {worker.log_path})")
        worker.process = None
        try:
            await asyncio.to_thread(worker.start)
        except Exception as err:  # said, and tried again a second later
            errors.print(f"[red]worker did not come back:[/] {named(err)}")


async def _drive(
    config: Any,
    topology: Any,
    policy: Any,
    settings: Any,
    duration: float | None,
    headless: bool,
    actor: str | None = None,
    worker: Any = None,
) -> dict[str, Any]:
    from rackplane.streams.demo_load import DemoLoad

    load = DemoLoad(config, topology, policy, settings)
    stop = asyncio.Event()
    if worker is not None:
        asyncio.get_running_loop().create_task(_supervise(worker, stop))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if duration is not None:
        loop.call_later(duration, stop.set)
    runner = asyncio.create_task(load.run(stop))
    if headless or not console.is_terminal:
        await runner
    elif console_wanted():
        await _console(config, topology.cluster, actor, stop, runner)
    else:
        with Live(_table("rackplane up (Ctrl-C stops)", load.stats.live()), console=console,
                  refresh_per_second=4) as live:  # fmt: skip
            while not runner.done():
                live.update(_table("rackplane up (Ctrl-C stops)", load.stats.live()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(runner), 0.25)
        await runner
    return load.stats.summary()


def console_wanted() -> bool:
    """The console opens on a terminal unless RACKPLANE_UP_CONSOLE=0 (the Rich live table)."""
    import os

    return os.environ.get("RACKPLANE_UP_CONSOLE", "1") != "0"


async def _console(
    config: Any, cluster: str, actor: str | None, stop: asyncio.Event, runner: asyncio.Task[Any]
) -> None:
    """Run the operator console on the pipeline until it quits (or the load stops)."""
    from rackplane.cli._tui import operator
    from rackplane.tui import ConsoleApp, LiveSource

    source = LiveSource(config.broker, cluster=cluster, prefix=config.prefix, config=config)
    app = ConsoleApp(source, actor=operator(actor))
    ui = asyncio.create_task(app.run_async())
    await asyncio.wait({ui, runner}, return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    if not ui.done():
        app.exit()
        await ui
    await runner


def _table(title: str, data: dict[str, Any]) -> Table:
    t = Table(title=title, title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    for k, v in data.items():
        t.add_row(
            k.replace("_", " "), "-" if v is None else f"{v:,}" if isinstance(v, int) else str(v)
        )
    return t
