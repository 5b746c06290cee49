"""Output folders written with delta-rs alone (no Spark), one Delta commit per table as jobs/lake/sink.py makes
them, for tests of readers: `commit_run(out, {"committed_offsets": [row, ...], ...})`."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake
from deltalake.transaction import CommitProperties

from jobs.base.tables import arrow_schema
from jobs.lake.runs import commit_metadata, committed_version, new_run_id, record_run

AS_OF = datetime(2026, 11, 1, 8, tzinfo=timezone.utc)


def write_table(output: Path, table: str, rows: list[dict[str, Any]], run_id: str | None = None) -> None:
    """Replace one table (columns not given are null); tagged with `run_id` as the sink tags it."""
    data = pa.Table.from_pylist(rows, schema=arrow_schema(table))
    properties = CommitProperties(custom_metadata=commit_metadata(run_id)) if run_id else None
    write_deltalake(str(output / table), data, mode="overwrite", schema_mode="overwrite",
                    commit_properties=properties)


def commit_run(output: Path, tables: dict[str, list[dict[str, Any]]], finish: bool = True,
               as_of: datetime = AS_OF) -> str:
    """Commit `tables` in order as one run; without `finish` the run stops before it is recorded, as a run
    killed after its last table commit does. Returns the run id."""
    run_id = new_run_id()
    versions = {}
    for table, rows in tables.items():
        write_table(output, table, rows, run_id)
        versions[table] = committed_version(output / table, run_id)
    if finish:
        record_run(output, run_id, versions, as_of, "parquet:/test", "delta-rs")
    return run_id
