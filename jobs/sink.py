"""Delta output: the only writer. One sink, two engines.

Every table is first staged as Parquet by Spark (distributed, schema enforced), and only when all of them
have been computed is each Delta table replaced. So a run that fails while computing leaves every previous
table as it was, and each replacement is a single Delta commit (readers see the old or the new version).

* delta-rs (`deltalake`), the default: Spark's staged Parquet files become the table's data files as they
  are (hard-linked into the table folder, then one commit adds them and removes the previous version's), so a
  table is written once, by Spark, and the driver never reads it.
* Spark's Delta writer, when `io.delta` is on the classpath (Databricks, `--packages io.delta:...`).

The set of tables is atomic too: every commit is tagged with the run, and the run is recorded in DIR/_runs
after its last table (jobs/runs.py), so readers see all tables of one run even if a run is killed midway.

Snapshots (`rebuild --snapshot`): after the tables, the state tables' rows are also written to
DIR/snapshots/<table>, partitioned by as_of. Each is one commit that replaces the partition of this as_of
(delta-rs: an overwrite with a predicate; Spark: replaceWhere), so a rerun at the same as_of never duplicates
rows, and other moments stay. Their versions are recorded with the run like any table's.
"""
from __future__ import annotations

import logging
import os
import shutil
from concurrent.futures import Future, wait
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from jobs.hive import data_files
from jobs.kill_points import kill_point
from jobs.output_lock import STAGING_DIR
from jobs.runs import (TABLE_PROPERTIES, commit_metadata, committed_version, new_run_id, record_run,
                       spark_user_metadata)
from jobs.session import has_jvm_class
from jobs.spark_threads import SparkThreads
from jobs.tables import (SNAPSHOT_PARTITION, SNAPSHOT_TABLES, TABLES, arrow_schema, conform, partition_columns,
                         snapshot_table, spark_schema)

log = logging.getLogger("offsetlake")
DELTA_JVM_CLASS = "io.delta.tables.DeltaTable"
# Tables staged at once (`stage_soon`, jobs.spark_threads).
STAGING_THREADS = 2
# Writes a table's Parquet files (its contract's Arrow schema) into the folder it is given, without Spark.
TableWriter = Callable[[Path], object]


def delta_engine(spark: SparkSession) -> str:
    """`spark` when Spark's Delta writer is available, else `delta-rs`."""
    return "spark" if has_jvm_class(spark, DELTA_JVM_CLASS) else "delta-rs"


def new_staging(output: Path, run_id: str | None = None) -> Path:
    """Run `run_id`'s staging area under `output` (created when something is written there); its name is the
    run's id (a new one by default), so the next run can tell whose it was (jobs.output_lock.recover)."""
    return output / STAGING_DIR / (run_id or new_run_id())


def pinned(staging: Path, name: str) -> Path:
    """Where state pinned as `name` (TableSink.pin) lives in the staging area `staging`."""
    return staging / "_state" / name


class TableSink:
    """Stage tables, then replace them all: `stage(name, df)` for each table, then `commit()`."""

    def __init__(self, spark: SparkSession, output: Path, engine: str | None = None, snapshots: bool = False,
                 staging: Path | None = None) -> None:
        self.spark = spark
        self.output = output
        self.engine = engine or delta_engine(spark)
        self.snapshots = snapshots  # also write the state tables to DIR/snapshots/<table> (--snapshot)
        self.staging = staging or new_staging(output)  # given: work started before Spark writes there
        self.rows: dict[str, int] = {}
        self._soon: dict[str, Future] = {}  # tables given to `stage_soon`
        self._threads: SparkThreads | None = None

    def stage(self, table: str, df: DataFrame | TableWriter | None) -> None:
        """Compute `df` now, with the table's contract schema, into the staging area; None: the table is
        known to be empty (written without Spark: a job costs more than nothing); a TableWriter: it writes the
        table's files itself."""
        path = self.staged(table)
        if table in self.rows:  # pinned as a table already (pin)
            return
        if df is None:
            path.mkdir(parents=True, exist_ok=True)
            pq.write_table(arrow_schema(table).empty_table(), path / "part-00000.parquet")
        elif not isinstance(df, DataFrame):
            df(path)
        else:
            self.spark.sparkContext.setJobDescription(f"offsetlake: table {table}")  # names its jobs in Spark's UI
            # Laid out as the Delta table will be: a partition column lives in folder names, not in the files.
            # Appended: files a source's tasks wrote for the table are already there (jobs.task_history).
            conform(df, table).write.mode("append").partitionBy(*partition_columns(table)).parquet(str(path))
        self.rows[table] = pads.dataset(path, format="parquet").count_rows()  # from footers, cheap
        log.info("computed %s: %d rows", table, self.rows[table])

    def stage_soon(self, table: str, df: DataFrame | TableWriter | None) -> None:
        """`stage` on one of the sink's threads (STAGING_THREADS), now or once one is free; `wait` for them."""
        if table in self.rows or table in self._soon:
            return
        if self._threads is None:
            self._threads = SparkThreads(self.spark, STAGING_THREADS, "offsetlake-stage")
        self._soon[table] = self._threads.submit(self.stage, table, df)

    def wait(self) -> None:
        """Wait for every table given to `stage_soon`; the first failure is raised."""
        for future in self._soon.values():
            future.result()

    @property
    def run_id(self) -> str:
        """The run's id: its staging area's name (new_staging)."""
        return self.staging.name

    def staged(self, table: str) -> Path:
        """The folder a table is staged in: Parquet, partitioned by folders as the Delta table will be."""
        return self.staging / table

    def pin(self, name: str, df: DataFrame) -> DataFrame:
        """`df` written to the staging area and read back: state that several tables read is computed once,
        and their plans start from these files instead of the whole replay (Spark plans them in a fraction
        of the time). Unlike a local checkpoint, the files survive a lost executor; they go with the staging
        area and are never committed."""
        if name in TABLES:  # a table that other tables read: staged once, and read back from there
            self.stage(name, df)
            return self.spark.read.schema(spark_schema(name)).parquet(str(self.staged(name)))
        path = self.pinned(name)
        self.spark.sparkContext.setJobDescription(f"offsetlake: state {name}")
        df.write.parquet(str(path))
        return self.spark.read.schema(df.schema).parquet(str(path))  # the schema is known: no footer reads

    def pinned(self, name: str) -> Path:
        """Where `pin(name, ...)` wrote its files."""
        return pinned(self.staging, name)

    def commit(self, as_of: datetime | None = None, source: str | None = None) -> dict[str, str]:
        """Replace every staged table (and with snapshots, this as_of's partition of each snapshot table), then
        record the run (its commit point); returns table -> Delta path."""
        if self.snapshots and as_of is None:
            raise ValueError("snapshots need the run's as_of")
        written, versions = {}, {}
        run_id = self.run_id
        try:
            # In the contract's order, whatever order they were staged in (a table read by others is staged first).
            for table in sorted(self.rows, key=lambda t: TABLES.index(t) if t in TABLES else len(TABLES)):
                target = self.output / table
                if self.engine == "spark":
                    self._commit_spark(table, target, run_id)
                else:
                    self._commit_delta_rs(table, target, run_id)
                versions[table] = committed_version(target, run_id)
                written[table] = str(target)
                kill_point(f"committed:{len(written)}")
            for table in (SNAPSHOT_TABLES if self.snapshots else ()):
                if table not in self.rows:
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
        """Remove the staging area (after a commit, or after a failure: then once no thread writes there)."""
        if any(not future.done() for future in self._soon.values()):
            self.spark.sparkContext.cancelAllJobs()
            wait(self._soon.values())
        if self._threads is not None:
            self._threads.shutdown()
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
