"""Delta output: the only writer. One sink, two engines.

A run's runner stages every table as Parquet files in the table's folder, under the run's own name
(`<table>/run-<run id>/`: jobs.engine.stages lays them out), and only when all of them are there is each Delta
table replaced. So a run that fails while computing leaves every previous table as it was, and each replacement
is a single Delta commit (readers see the old or the new version).

* delta-rs (`deltalake`), the default: the staged Parquet files become the table's data files where they are
  (one commit adds them and removes the previous version's), so a table is written once, on any filesystem, and
  the driver never reads it.
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
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from jobs.base.errors import LockLost
from jobs.base.hive import data_files, relative
from jobs.base.storage import Location, write_parquet
from jobs.kill_points import kill_point
from jobs.lake.output_lock import RUN_FOLDER, STAGING_DIR
from jobs.lake.runs import (TABLE_PROPERTIES, commit_metadata, committed_version, fenced_commit, new_run_id,
                            record_run, run_id_of, spark_user_metadata)
from jobs.base.tables import (SNAPSHOT_PARTITION, SNAPSHOT_TABLES, STAGED_TABLES, TABLES, arrow_schema, conform,
                              partition_columns, snapshot_table)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("offsetlake")
DELTA_JVM_CLASS = "io.delta.tables.DeltaTable"


def delta_engine(spark: SparkSession | None) -> str:
    """`spark` when the session has Spark's Delta writer, else `delta-rs`."""
    from jobs.runtime.classpath import has_jvm_class

    return "spark" if spark is not None and has_jvm_class(spark, DELTA_JVM_CLASS) else "delta-rs"


def new_staging(output: Location, run_id: str | None = None) -> Location:
    """Run `run_id`'s staging area under `output` (created when something is written there); its name is the
    run's id (a new one by default), so the next run can tell whose it was (jobs.lake.output_lock.recover)."""
    return output.child(STAGING_DIR, run_id or new_run_id())


class TableSink:
    """Replace the tables a run staged with one commit each, then record the run: `commit()`.

    A table is staged in its own folder, as `<table>/run-<run id>/` (RUN_FOLDER): the files become the table's
    data files where they are, and a run that dies before its commit leaves files no version references, which
    the next run removes (jobs.lake.output_lock.recover)."""

    def __init__(self, output: Location, run_id: str, engine: str = "delta-rs", snapshots: bool = False,
                 spark: SparkSession | None = None, guard: Callable[[], None] | None = None) -> None:
        self.output = output
        # The lock's check (jobs.lake.output_lock.OutputLock.check), made before every commit: LockLost once
        # another run took the output over. None: the caller holds no lock (tests of the sink alone).
        self.guard = guard
        self.run_id = run_id
        self.engine = engine  # "delta-rs", or "spark" (Spark's Delta writer, on `spark`)
        self.snapshots = snapshots  # also write the state tables to DIR/snapshots/<table> (--snapshot)
        self.spark = spark
        self.committed: dict[str, str] = {}  # table -> Delta path, as commit() lands them
        self.removed: dict[str, dict[str, int]] = {}  # table -> the files and rows commit()'s `removals` took out
        self._rows: dict[str, int] = {}  # a staged file's rows, from its footer (the summary's, then the commit's)

    def staged(self, table: str) -> Location:
        """The folder a table is staged in: Parquet, partitioned by folders as the Delta table will be."""
        return self.output.child(table, RUN_FOLDER + self.run_id)

    def write(self, table: str, rows: pa.Table) -> None:
        """Stage rows the driver computed itself (small tables), beside what the runner staged."""
        folder = self.staged(table)
        folder.mkdir()
        name = f"driver-{len(folder.children()):05d}.parquet"
        write_parquet(conform(rows, table), folder.child(name))

    def _dataset(self, table: str) -> pads.Dataset | None:
        folder = self.staged(table)
        files = [f.path for f, _ in data_files(folder)]
        return pads.dataset(files, format="parquet", filesystem=folder.fs) if files else None

    def rows(self, table: str) -> int:
        """The staged table's rows (from the files' footers: cheap)."""
        return sum(self._file_rows(f) for f, _ in data_files(self.staged(table)))

    def _file_rows(self, file: Location) -> int:
        """A staged file's rows, its footer read once (a staged file never changes)."""
        if file.path not in self._rows:
            self._rows[file.path] = pq.ParquetFile(file.path, filesystem=file.fs).metadata.num_rows
        return self._rows[file.path]

    def head(self, table: str, n: int, columns: list[str]) -> list[dict[str, Any]]:
        data = self._dataset(table)
        return data.head(n, columns=columns).to_pylist() if data is not None else []

    def commit(self, as_of: datetime | None = None, source: str | None = None, tables: list[str] | None = None,
               appends: tuple[str, ...] = (), info: dict[str, Any] | None = None,
               removals: dict[str, str] | None = None) -> dict[str, str]:
        """Replace every table of `tables` (default: all; one nothing staged is empty), but append to those of
        `appends` (raw_records: the archive grows), then delete from a table of `removals` the rows of its
        predicate (--history-days: jobs.base.retention), and with snapshots this as_of's partition of each snapshot
        table, then record the run (its commit point, with `info`: jobs.lake.runs.RUN_INFO) with each table's
        version after all of them; returns table -> Delta path."""
        if self.snapshots and as_of is None:
            raise ValueError("snapshots need the run's as_of")
        written, versions = self.committed, {}
        run_id = self.run_id
        tables = list(TABLES if tables is None else tables)
        try:
            for table in tables:
                target = self.output.child(table)
                mode = "append" if table in appends else "overwrite"
                if self.engine == "spark":
                    self._commit_spark(table, target, run_id, mode)
                    version = None
                else:
                    version = self._commit_delta_rs(table, target, run_id, mode)
                if table in (removals or {}) and self._remove(table, target, removals[table]):
                    version = None  # the removal's commit
                versions[table] = committed_version(target, run_id) if version is None else version
                written[table] = target.uri
                kill_point(f"committed:{len(written)}")
            for table in (SNAPSHOT_TABLES if self.snapshots else ()):
                if table not in tables:
                    continue
                path = snapshot_table(table)
                target = self.output.child(*path.split("/"))
                if self.engine == "spark":
                    self._snapshot_spark(table, target, run_id, as_of)
                else:
                    self._snapshot_delta_rs(table, target, run_id, as_of)
                versions[path] = committed_version(target, run_id)
                written[path] = target.uri
                kill_point(f"committed:{len(written)}")
            record_run(self.output, run_id, versions, as_of, source, self.engine, info, self.guard)
            kill_point("recorded")
        except BaseException:
            self.discard(committed=written, failed=True)
            raise
        self.discard(committed=written)
        return written

    def _remove(self, table: str, target: Location, predicate: str) -> bool:
        """Delete the rows of `predicate` from the table at `target`, in a commit of the run's (tagged and fenced
        as every other: a run that dies after it is undone with them, jobs.lake.runs.restore_unfinished), with
        delta-rs whichever engine wrote the table. A predicate on the partition column alone removes whole files
        without reading them. Notes the files and rows removed in `removed`; returns whether it committed."""
        from deltalake.transaction import CommitProperties

        once = CommitProperties(custom_metadata=commit_metadata(self.run_id), max_commit_retries=0)
        metrics = fenced_commit(target, lambda opened: opened.delete(predicate, commit_properties=once), self.guard)
        self.removed[table] = {"files": int(metrics["num_removed_files"]), "rows": int(metrics["num_deleted_rows"])}
        log.info("removed %d rows (%d files) of %s: %s", self.removed[table]["rows"], self.removed[table]["files"],
                 table, predicate)
        return bool(metrics["num_removed_files"])

    def discard(self, committed: dict[str, str] | None = None, failed: bool = False) -> None:
        """Remove the run's staging area, and its staged tables but those `committed` by delta-rs (default: those
        this sink committed; their files are the tables' now, even when the run then fails: the next run restores
        the tables); after a commit, or after a failure, once no worker writes there. After a failure (`failed`),
        what cannot be removed (a read-only folder; a run that took the output over removing them too) is left to
        the next run, and the run's own error told."""
        try:
            self._discard(self.committed if committed is None else committed)
        except Exception as e:
            if not failed:
                raise
            log.debug("left the staged files of run %s to the next run: %s", self.run_id, e)

    def _discard(self, committed: dict[str, str]) -> None:
        for table in STAGED_TABLES:
            if self.engine == "spark" or table not in (committed or {}):
                self.staged(table).remove()
        new_staging(self.output, self.run_id).remove()
        try:
            if self.guard is not None:
                self.guard()
        except LockLost:
            return  # the staging area's folder is the new holder's now
        staging = self.output.child(STAGING_DIR)
        if staging.is_dir() and not staging.children():
            staging.remove()

    def _commit_delta_rs(self, table: str, target: Location, run_id: str, mode: str = "overwrite") -> int | None:
        """One overwrite (or append) commit whose data files are the staged files, where they are (in the table's
        folder). An overwrite removes every file of the previous version; until it lands, the new files are
        unreferenced, so a run killed here leaves the table as it was. Returns the version committed, when the
        table read it back (`_transaction`)."""
        from deltalake.transaction import CommitProperties

        staged = self.staged(table)
        actions = (_add_action(target, f, values, self._file_rows(f)) for f, values in data_files(staged))
        adds = [a for a in actions if a is not None]
        return _transaction(target, arrow_schema(table), adds, partition_columns(table),
                            CommitProperties(custom_metadata=commit_metadata(run_id), max_commit_retries=0), mode,
                            run_id, self.guard)

    def _staged_batches(self, table: str) -> pa.RecordBatchReader:
        """The staged table, batch by batch with its contract's Arrow types (the driver never holds it whole)."""
        schema = arrow_schema(table)
        data = self._dataset(table)
        batches = data.to_batches() if data is not None else []
        return pa.RecordBatchReader.from_batches(schema, (batch.cast(schema) for batch in batches))

    def _commit_spark(self, table: str, target: Location, run_id: str, mode: str = "overwrite") -> None:
        """Spark's Delta writer cannot commit a given version only: the lock is checked before and after, and a
        takeover that lands between the two leaves this commit for the next run to undo (docs/robustness.md)."""
        from jobs.runtime.spark_types import spark_schema

        if self.guard is not None:
            self.guard()
        staged = self.staged(table)
        frame = self.spark.read.schema(spark_schema(table)).parquet(staged.hadoop_uri) if staged.exists() else \
            self.spark.createDataFrame([], spark_schema(table))
        frame.write.format("delta").partitionBy(*partition_columns(table)).mode(mode) \
            .option("overwriteSchema", str(mode == "overwrite").lower()) \
            .option("userMetadata", spark_user_metadata(run_id)).save(target.hadoop_uri)
        if self.guard is not None:
            self.guard()

    def _snapshot_delta_rs(self, table: str, target: Location, run_id: str, as_of: datetime) -> None:
        from deltalake import write_deltalake
        from deltalake.transaction import CommitProperties

        # An empty table still replaces the partition: a rerun that finds nothing leaves nothing behind.
        # schema_mode="merge": a contract column added later is null in older partitions, which stay.
        once = CommitProperties(custom_metadata=commit_metadata(run_id), max_commit_retries=0)

        def commit(opened: Any) -> None:
            if opened is None:
                write_deltalake(target.delta_uri, self._staged_batches(table), mode="error",
                                partition_by=[SNAPSHOT_PARTITION], configuration=TABLE_PROPERTIES,
                                storage_options=target.storage_options, commit_properties=once)
            else:
                write_deltalake(opened, self._staged_batches(table), mode="overwrite",
                                predicate=as_of_predicate(as_of, "delta-rs"), partition_by=[SNAPSHOT_PARTITION],
                                schema_mode="merge", commit_properties=once)

        fenced_commit(target, commit, self.guard)

    def _snapshot_spark(self, table: str, target: Location, run_id: str, as_of: datetime) -> None:
        staged = self.spark.read.parquet(self.staged(table).hadoop_uri)
        staged.write.format("delta").mode("overwrite").partitionBy(SNAPSHOT_PARTITION) \
            .option("replaceWhere", as_of_predicate(as_of, "spark")).option("mergeSchema", "true") \
            .option("userMetadata", spark_user_metadata(run_id)).save(target.hadoop_uri)


def _transaction(target: Location, schema: pa.Schema, adds: list, partitions: list[str], properties: Any,
                 mode: str = "overwrite", run_id: str | None = None, guard: Callable[[], None] | None = None
                 ) -> int | None:
    """Replace the table at `target` by the files `adds`, or add them (`mode` append), as a fenced commit of the
    version opened plus one (`properties` allow no retry); the first time, create it with TABLE_PROPERTIES (a
    takeover creates a staged table first: then this creation fails).
    Returns the version committed when the table, read on to its newest commit, shows it as run `run_id`'s (else
    None: jobs.lake.runs.committed_version looks for it)."""
    from deltalake import Schema
    from deltalake.transaction import create_table_with_add_actions

    delta_schema = Schema.from_arrow(schema)

    def commit(table: Any) -> int | None:
        if table is None:
            create_table_with_add_actions(target.delta_uri, delta_schema, adds, mode="error",
                                          partition_by=partitions or None, configuration=TABLE_PROPERTIES,
                                          storage_options=target.storage_options, commit_properties=properties)
            return None
        table.create_write_transaction(adds, mode, delta_schema, partitions or None, commit_properties=properties)
        table.update_incremental()
        newest = table.history(1)
        return int(newest[0]["version"]) if newest and run_id_of(newest[0]) == run_id else None

    return fenced_commit(target, commit, guard)


def _add_action(target: Location, file: Location, partition_values: dict[str, str | None], rows: int) -> Any:
    """A staged `file` under the table at `target` as a Delta add action: its path in the table, size, partition
    values (from the hive-style folders it is in: `commit_date=2026-11-20`) and `rows` (from its footer).
    None for a file without rows: an empty table has no data files (its schema is in the log)."""
    import json
    from urllib.parse import quote

    from deltalake.transaction import AddAction

    info = file.fs.get_file_info(file.path)
    if not rows:
        return None
    stats = json.dumps({"numRecords": rows})
    return AddAction(quote(relative(target, file), safe="/="), info.size, partition_values,
                     int(info.mtime.timestamp() * 1000), True, stats)


def as_of_predicate(as_of: datetime, engine: str) -> str:
    """SQL selecting the snapshot partition of `as_of`, in the engine's dialect. Spark reads a typed literal
    with its zone; delta-rs (DataFusion) compares the timestamp column with a plain ISO-8601 string, and
    refuses a TIMESTAMP literal (nanoseconds, no zone) against Delta's UTC microseconds."""
    moment = as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=timezone.utc)  # naive times are UTC
    text = moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    literal = f"TIMESTAMP '{text}'" if engine == "spark" else f"'{text}'"
    return f"{SNAPSHOT_PARTITION} = {literal}"
