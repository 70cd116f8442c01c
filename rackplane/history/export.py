"""`export_parquet(reader, directory)`: the history as Parquet files, partitioned by day.

Layout: `DIR/events/day=YYYY-MM-DD/*.parquet`, the same for `commands` (the day of the first
event a command caused, or of its `issued_at`) and `rejections`, and `DIR/chain_heads/`.
Every column is kept, hashes included, so `open_history(DIR)` reads, replays and verifies
the export exactly like the DuckDB file. Days are UTC.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from rackplane.history.errors import HistoryError
from rackplane.history.reader import HistoryReader

_DAY = "CAST(make_timestamp(epoch_us({})) AS DATE)"
_SELECT = {
    "events": f"SELECT *, {_DAY.format(chr(34) + 'at' + chr(34))} AS day FROM events",
    "commands": (
        f"SELECT c.*, {_DAY.format('coalesce(c.issued_at, f.first_at)')} AS day FROM commands c "
        'LEFT JOIN (SELECT causation_id, min("at") AS first_at FROM events GROUP BY 1) f '
        "ON f.causation_id = c.id"
    ),
    "rejections": f"SELECT *, {_DAY.format(chr(34) + 'at' + chr(34))} AS day FROM rejections",
}


def export_parquet(reader: HistoryReader, directory: str | Path) -> dict[str, int]:
    """Write every table under `directory` (which must not exist or be empty).

    Returns:
        Rows written per table.

    Raises:
        HistoryError: the directory holds files already, or a write fails.
    """
    out = Path(directory)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HistoryError(f"{out} exists and is not an empty directory; choose a new one")
    out.mkdir(parents=True, exist_ok=True)
    counts = reader.counts()
    try:
        for name, select in _SELECT.items():
            if counts[name] == 0:  # an empty table still gets a file: the reader needs its schema
                (out / name / "day=none").mkdir(parents=True)
                reader.con.execute(
                    f"COPY ({select} LIMIT 0) TO '{out / name / 'day=none' / 'empty.parquet'}' "
                    "(FORMAT PARQUET)"
                )
                continue
            reader.con.execute(
                f"COPY ({select}) TO '{out / name}' (FORMAT PARQUET, PARTITION_BY (day))"
            )
        (out / "chain_heads").mkdir()
        reader.con.execute(
            f"COPY chain_heads TO '{out / 'chain_heads' / 'heads.parquet'}' (FORMAT PARQUET)"
        )
    except duckdb.Error as err:
        raise HistoryError(f"export to {out} failed: {err}") from err
    return counts
