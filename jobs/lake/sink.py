"""Delta output: the only writer. One sink, two engines.

A run's runner stages every table as Parquet files in the run's staging area (jobs.engine.Stages), and only when
all of them are there is each Delta table replaced. So a run that fails while computing leaves every previous
table as it was, and each replacement is a single Delta commit (readers see the old or the new version).

* delta-rs (`deltalake`), the default: the staged Parquet files become the table's data files as they are
  (hard-linked into the table folder, then one commit adds them and removes the previous version's), so a
  table is written once and the driver never reads it.
* Spark's Delta writer, when `io.delta` is on the classpath of the session the run uses (Databricks,
  `--packages io.delta:...`).

The set of tables is atomic too: every commit is tagged with the run, and the run is recorded in DIR/_runs
after its last table (jobs.lake.runs), so readers see all tables of one run even if a run is killed midway.

Snapshots (`rebuild --snapshot`): after the tables, the state tables' rows are also written to
DIR/snapshots/<table>, partitioned by as_of. Each is one commit that replaces the partition of this as_of
(delta-rs: an overwrite with a predicate; Spark: replaceWhere), so a rerun at the same as_of never duplicates
rows, and other moments stay. Their versions are recorded with the run like any table's.
"""
from __future__ import annotations

import logging
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from jobs.kill_points import kill_point
from jobs.lake.hive import data_files
from jobs.lake.output_lock import STAGING_DIR
from jobs.lake.runs import (TABLE_PROPERTIES, commit_metadata, committed_version, new_run_id, record_run,
                            spark_user_metadata)
from jobs.lake.tables import (SNAPSHOT_PARTITION, SNAPSHOT_TABLES, TABLES, arrow_schema, conform, partition_columns,
                              snapshot_table)

log = logging.getLogger("offsetlake")
DELTA_JVM_CLASS = "io.delta.tables.DeltaTable"


def delta_engine(spark: Any) -> str:
    """`spark` when the session has Spark's Delta writer, else `delta-rs`."""
    from jobs.runtime.classpath import has_jvm_class

    return "spark" if spark is not None and has_jvm_class(spark, DELTA_JVM_CLASS) else "delta-rs"


def new_staging(output: Path, run_id: str | None = None) -> Path:
    """Run `run_id`'s staging area under `output` (created when something is written there); its name is the
    run's id (a new one by default), so the next run can tell whose it was (jobs.lake.output_lock.recover)."""
    return output / STAGING_DIR / (run_id or new_run_id())


class TableSink:
    """Replace the tables staged in `staging` with one commit each, then record the run: `commit()`."""

    def __init__(self, output: Path, staging: Path, engine: str = "delta-rs", snapshots: bool = False,
                 spark: Any = None) -> None:
        self.output = output
        self.staging = staging
        self.engine = engine  # "delta-rs", or "spark" (Spark's Delta writer, on `spark`)
        self.snapshots = snapshots  # also write the state tables to DIR/snapshots/<table> (--snapshot)
        self.spark = spark

    @property
    def run_id(self) -> str:
        """The run's id: its staging area's name (new_staging)."""
        return self.staging.name

    def staged(self, table: str) -> Path:
        """The folder a table is staged in: Parquet, partitioned by folders as the Delta table will be."""
        return self.staging / table

    def write(self, table: str, rows: pa.Table) -> None:
        """Stage rows the driver computed itself (small tables), beside what the runner staged."""
        folder = self.staged(table)
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(conform(rows, table), folder / f"driver-{len(list(folder.iterdir())):05d}.parquet")

    def rows(self, table: str) -> int:
        """The staged table's rows (from the files' footers: cheap)."""
        folder = self.staged(table)
        return pads.dataset(folder, format="parquet").count_rows() if folder.exists() else 0

    def head(self, table: str, n: int, columns: list[str]) -> list[dict[str, Any]]:
        folder = self.staged(table)
        if not folder.exists():
            return []
        return pads.dataset(folder, format="parquet").head(n, columns=columns).to_pylist()

    def commit(self, as_of: datetime | None = None, source: str | None = None, tables: list[str] | None = None
               ) -> dict[str, str]:
        """Replace every table of `tables` (default: all; one nothing staged is empty), and with snapshots this
        as_of's partition of each snapshot table, then record the run (its commit point); returns table -> Delta
        path."""
        if self.snapshots and as_of is None:
            raise ValueError("snapshots need the run's as_of")
        written, versions = {}, {}
        run_id = self.run_id
        tables = list(TABLES if tables is None else tables)
        for table in tables:
            if not self.staged(table).exists():  # known empty: no files, its schema is in the log
                self.staged(table).mkdir(parents=True)
        try:
            for table in tables:
                target = self.output / table
                if self.engine == "spark":
                    self._commit_spark(table, target, run_id)
                else:
                    self._commit_delta_rs(table, target, run_id)
                versions[table] = committed_version(target, run_id)
                written[table] = str(target)
                kill_point(f"committed:{len(written)}")
            for table in (SNAPSHOT_TABLES if self.snapshots else ()):
                if table not in tables:
                    continue
                path = snapshot_table(table)
                target = self.output / path
                if self.engine == "spark":
                    self._snapshot_spark(table, target, run_id, as_of)
                else:
                    self._snapshot_delta_rs(table, target, run_id, as_of)
                versions[path] = committed_version(target, run_id)
                written[path] = str(target)
                kill_point(f"committed:{len(written)}")
            record_run(self.output, run_id, versions, as_of, source, self.engine)
            kill_point("recorded")
        finally:
            self.discard()
        return written

    def discard(self) -> None:
        """Remove the staging area (after a commit, or after a failure, once no worker writes there)."""
        shutil.rmtree(self.staging, ignore_errors=True)
        parent = self.staging.parent
        if parent.exists() and not any(parent.iterdir()):
            parent.rmdir()

    def _commit_delta_rs(self, table: str, target: Path, run_id: str) -> None:
        """One overwrite commit whose data files are the staged files, linked into the table folder (same file
        system: no copy). The commit removes every file of the previous version; until it lands, the new
        files are unreferenced, so a run killed here leaves the table as it was."""
        from deltalake import DeltaTable, Schema
        from deltalake.transaction import CommitProperties, create_table_with_add_actions

        staged = self.staged(table)
        actions = (_add_action(staged, f, values, target, run_id) for f, values in data_files(staged))
        adds = [a for a in actions if a is not None]
        schema = Schema.from_arrow(arrow_schema(table))
        partitions = partition_columns(table) or None
        properties = CommitProperties(custom_metadata=commit_metadata(run_id))
        if (target / "_delta_log").is_dir():
            DeltaTable(str(target)).create_write_transaction(adds, "overwrite", schema, partitions,
                                                             commit_properties=properties)
        else:
            create_table_with_add_actions(str(target), schema, adds, mode="overwrite", partition_by=partitions,
                                          configuration=TABLE_PROPERTIES, commit_properties=properties)

    def _staged_batches(self, table: str) -> pa.RecordBatchReader:
        """The staged table, batch by batch with its contract's Arrow types (the driver never holds it whole)."""
        schema = arrow_schema(table)
        dataset = pads.dataset(self.staged(table), format="parquet")
        return pa.RecordBatchReader.from_batches(schema, (batch.cast(schema) for batch in dataset.to_batches()))

    def _commit_spark(self, table: str, target: Path, run_id: str) -> None:
        from jobs.runtime.spark_types import spark_schema

        staged = self.spark.read.schema(spark_schema(table)).parquet(str(self.staged(table)))
        staged.write.format("delta").partitionBy(*partition_columns(table)).mode("overwrite") \
            .option("overwriteSchema", "true") \
            .option("userMetadata", spark_user_metadata(run_id)).save(str(target))

    def _snapshot_delta_rs(self, table: str, target: Path, run_id: str, as_of: datetime) -> None:
        from deltalake import write_deltalake
        from deltalake.transaction import CommitProperties

        target.mkdir(parents=True, exist_ok=True)
        # An empty table still replaces the partition: a rerun that finds nothing leaves nothing behind.
        # schema_mode="merge": a contract column added later is null in older partitions, which stay.
        write_deltalake(str(target), self._staged_batches(table), mode="overwrite", predicate=as_of_predicate(as_of, "delta-rs"),
                        partition_by=[SNAPSHOT_PARTITION], schema_mode="merge", configuration=TABLE_PROPERTIES,
                        commit_properties=CommitProperties(custom_metadata=commit_metadata(run_id)))

    def _snapshot_spark(self, table: str, target: Path, run_id: str, as_of: datetime) -> None:
        staged = self.spark.read.parquet(str(self.staged(table)))
        staged.write.format("delta").mode("overwrite").partitionBy(SNAPSHOT_PARTITION) \
            .option("replaceWhere", as_of_predicate(as_of, "spark")).option("mergeSchema", "true") \
            .option("userMetadata", spark_user_metadata(run_id)).save(str(target))


def _add_action(staged: Path, file: Path, partition_values: dict[str, str | None], target: Path, run_id: str):
    """`file`, staged under `staged`, hard-linked into the same folder under `target` (copied where the file
    system has no links) with the run's id before its name, as a Delta add action: its size, partition values
    (from the hive-style folders Spark wrote: `commit_date=2026-11-20`), and its row count from the Parquet
    footer. None for a file without rows: an empty table has no data files (its schema is in the log).

    The name is the run's own, so a file never lands on a name an earlier version references (staged names
    such as part-00000.parquet repeat from run to run), and a dead run's uncommitted files can be found."""
    import json
    from urllib.parse import quote

    from deltalake.transaction import AddAction

    rows = pq.ParquetFile(file).metadata.num_rows
    if not rows:
        return None
    relative = file.relative_to(staged)
    relative = relative.with_name(f"{run_id}-{relative.name}")
    placed = target / relative
    placed.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(file, placed)  # FileExistsError: never onto an existing name
    except FileExistsError:
        raise
    except OSError:
        with open(file, "rb") as source, open(placed, "xb") as copy:
            shutil.copyfileobj(source, copy)
    stat = placed.stat()
    stats = json.dumps({"numRecords": rows})
    return AddAction(quote(relative.as_posix(), safe="/="), stat.st_size, partition_values,
                     int(stat.st_mtime * 1000), True, stats)


def as_of_predicate(as_of: datetime, engine: str) -> str:
    """SQL selecting the snapshot partition of `as_of`, in the engine's dialect. Spark reads a typed literal
    with its zone; delta-rs (DataFusion) compares the timestamp column with a plain ISO-8601 string, and
    refuses a TIMESTAMP literal (nanoseconds, no zone) against Delta's UTC microseconds."""
    moment = as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=timezone.utc)  # naive times are UTC
    text = moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    literal = f"TIMESTAMP '{text}'" if engine == "spark" else f"'{text}'"
    return f"{SNAPSHOT_PARTITION} = {literal}"
