"""Whole rebuilds for tests, by either runner, and their tables read back as Python rows.

    tables = rebuild_tables(log, tmp_path, engine="local")    # the local runner, in this process
    tables["committed_offsets"]                               # a list of dicts, one per row
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jobs.base.storage import Location
from jobs.base.tables import TABLES
from jobs.config import RebuildConfig
from jobs.lake.runs import snapshot
from jobs.pipeline import run

MS = 1000


def rebuild_tables(log: Any, base: Path, *, engine: str = "local", as_of_ms: int | None = None,
                   retention_ms: int | None = None, history: bool = True, end_offsets: Path | None = None,
                   spark: Any = None, **options: Any) -> dict[str, Any]:
    """Rebuild `log` (an OffsetsLog, written as a Parquet dump under `base`) into `base/out`; returns each table's
    rows (sorted dicts) and the summary under "summary". The local runner runs in this process (no workers)."""
    dump = base / "dump"
    if not dump.exists():
        log.write_parquet(dump)
    out = base / f"out-{engine}"
    cfg = RebuildConfig.build(
        source=f"parquet:{dump}", output=str(out),
        as_of=None if as_of_ms is None else str(as_of_ms),
        retention_minutes=None if retention_ms is None else max(retention_ms // 60_000, 1),
        no_history=not history, end_offsets=None if end_offsets is None else str(end_offsets), engine=engine,
        workers=0 if engine == "local" else None, **options)
    summary = run(cfg, spark=spark)
    return {"summary": summary, **read_tables(out)}


def read_tables(out: "Path | Location") -> dict[str, list[dict[str, Any]]]:
    """Every table of the newest complete run under `out` (a folder, or a Location on any filesystem), as rows."""
    tables = snapshot(out, TABLES)
    found = {}
    for name in TABLES:
        if name in tables.versions:
            rows = tables.open(name).to_pyarrow_table().to_pylist()
            found[name] = sorted(rows, key=lambda r: repr(sorted(r.items())))
    return found


def utc_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / MS, tz=timezone.utc)
