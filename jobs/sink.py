"""Delta output: the only writer. One sink, two engines.

Every table is first staged as Parquet by Spark (distributed, schema enforced), and only when all of them
have been computed is each Delta table replaced. So a run that fails while computing leaves every previous
table as it was, and each replacement is a single Delta commit (readers see the old or the new version).

* delta-rs (`deltalake`), the default: the staged files are streamed batch by batch into the commit, so
  the driver never holds a whole table.
* Spark's Delta writer, when `io.delta` is on the classpath (Databricks, `--packages io.delta:...`).
"""
from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
from pyspark.sql import DataFrame, SparkSession

from jobs.session import has_jvm_class
from jobs.tables import arrow_schema, conform

log = logging.getLogger("offsetlake")
DELTA_JVM_CLASS = "io.delta.tables.DeltaTable"
STAGING_DIR = "_offsetlake_staging"


def delta_engine(spark: SparkSession) -> str:
    """`spark` when Spark's Delta writer is available, else `delta-rs`."""
    return "spark" if has_jvm_class(spark, DELTA_JVM_CLASS) else "delta-rs"


class TableSink:
    """Stage tables, then replace them all: `stage(name, df)` for each table, then `commit()`."""

    def __init__(self, spark: SparkSession, output: Path, engine: str | None = None) -> None:
        self.spark = spark
        self.output = output
        self.engine = engine or delta_engine(spark)
        self.staging = output / STAGING_DIR / uuid.uuid4().hex
        self.rows: dict[str, int] = {}

    def stage(self, table: str, df: DataFrame) -> None:
        """Compute `df` now, with the table's contract schema, into the staging area."""
        path = self.staging / table
        conform(df, table).write.mode("overwrite").parquet(str(path))
        self.rows[table] = pads.dataset(path, format="parquet").count_rows()  # from footers, cheap
        log.info("computed %s: %d rows", table, self.rows[table])

    def commit(self) -> dict[str, str]:
        """Replace every staged table; returns table -> Delta path."""
        written = {}
        try:
            for table in self.rows:
                target = self.output / table
                if self.engine == "spark":
                    self._commit_spark(table, target)
                else:
                    self._commit_delta_rs(table, target)
                written[table] = str(target)
        finally:
            self.discard()
        return written

    def discard(self) -> None:
        """Remove the staging area (after a commit, or after a failure)."""
        shutil.rmtree(self.staging, ignore_errors=True)
        parent = self.staging.parent
        if parent.exists() and not any(parent.iterdir()):
            parent.rmdir()

    def _commit_delta_rs(self, table: str, target: Path) -> None:
        from deltalake import write_deltalake

        schema = arrow_schema(table)
        dataset = pads.dataset(self.staging / table, format="parquet")
        batches = (batch.cast(schema) for batch in dataset.to_batches())
        reader = pa.RecordBatchReader.from_batches(schema, batches)
        target.mkdir(parents=True, exist_ok=True)
        write_deltalake(str(target), reader, mode="overwrite", schema_mode="overwrite")

    def _commit_spark(self, table: str, target: Path) -> None:
        staged = self.spark.read.parquet(str(self.staging / table))
        staged.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(str(target))
