"""Shared by `rackplane replay` and `rackplane history ...`: open a history, pick a cluster,
load its events with a progress spinner, parse times."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from rackplane.cli._render import errors, fail

if TYPE_CHECKING:
    from rackplane.history import HistoryReader

T = TypeVar("T")

Db = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="The DuckDB history file, or a Parquet export directory "
        "(default: the `history_db` setting, rackplane.duckdb).",
        show_default=False,
    ),
]
ClusterOpt = Annotated[
    str | None, typer.Option(help="Cluster to read (needed when the history holds several).")
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
DEFAULT_DB = None
"""No `--db`: the `history_db` setting (RACKPLANE_HISTORY_DB, the config file; docs/CONFIG.md)."""


def resolve_db(db: Path | None) -> Path:
    """`db`, or the configured history file."""
    if db is not None:
        return db
    from rackplane.cli._config import settings

    return settings(None).history_db


@contextmanager
def history(db: Path | None) -> Iterator[HistoryReader]:
    """Open `db` (or the configured history file) for reading, or exit with the reason."""
    from rackplane.history import HistoryError, open_history

    db = resolve_db(db)
    try:
        reader = open_history(db)
    except HistoryError as err:
        fail(str(err))
    if reader.note:
        errors.print(f"[yellow]note:[/] {reader.note}", highlight=False, soft_wrap=True)
    try:
        yield reader
    except HistoryError as err:
        fail(str(err))
    finally:
        reader.close()


def pick_cluster(reader: HistoryReader, cluster: str | None) -> str:
    """The cluster asked for, or the only one recorded."""
    known = reader.clusters()
    if cluster is not None:
        if cluster not in known:
            fail(f"{reader.path} has no events of cluster {cluster!r}; it has: "
                 f"{', '.join(known) or 'none'}")  # fmt: skip
        return cluster
    if len(known) != 1:
        fail(f"{reader.path} holds {len(known) or 'no'} clusters"
             + (f" ({', '.join(known)}): pass --cluster" if known else ""))  # fmt: skip
    return known[0]


def busy(label: str, work: Callable[[], T]) -> T:
    """Run `work` with a spinner on stderr (long reads and folds show progress)."""
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=errors, transient=True,
    ) as progress:  # fmt: skip
        progress.add_task(label, total=None)
        return work()


def parse_time(text: str) -> datetime:
    """An ISO 8601 time; without a zone it is UTC."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        fail(f"--at {text!r}: expected an ISO 8601 time such as 2026-11-30T08:00:00Z")
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def jsonable(obj: Any) -> Any:
    """Pydantic models and dataclass reports as plain JSON data."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "as_json"):
        return obj.as_json()
    return obj
