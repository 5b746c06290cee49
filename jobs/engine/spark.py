"""The Spark runner: the kernel run by Spark's tasks, on any cluster, from any source Spark can read.

Each pass is one Spark job over Arrow batches: the source's records through the chunk kernel (`mapInArrow`), then
each coordinator partition's rows through the replay or the derivation (`groupBy("coordinator_partition")
.applyInArrow`). A task writes the tables it makes itself, as the local runner's tasks do (jobs.engine.stages
.TaskOutputs: the table's run folder, files named by the task's input, so a task run again replaces its files),
and the sink commits those files. The other outputs travel back as one frame, an envelope: a `kind` column naming
the output and one struct column per output, the row's own filled, which Spark writes once, partitioned by kind,
where the next pass and the driver (jobs.engine.Stages.read) read them.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from jobs.engine.stages import EARLIER, Stages, TaskOutputs
from jobs.lake.tables import conform

log = logging.getLogger("offsetlake")


class SparkRunner:
    """Runs the kernel's passes as Spark jobs on `spark` (a session started here when none is given)."""

    name = "spark"

    def __init__(self, spark: Any, cfg: Any) -> None:
        if spark is None:
            from jobs.runtime.session import get_spark

            spark = get_spark()
        self.spark = spark
        self.cores = spark.sparkContext.defaultParallelism
        self.stages: Stages | None = None
        from jobs.runtime.metrics import SparkWork

        self._work = SparkWork(spark, f"offsetlake rebuild {cfg.source}")

    def groups(self, plan: Any) -> int:
        return 1  # Spark groups by coordinator partition itself

    def attach(self, stages: Stages) -> None:
        self.stages = stages

    def delta_engine(self) -> str:
        from jobs.lake.sink import delta_engine

        return delta_engine(self.spark)

    def work(self) -> dict[str, int]:
        from jobs.runtime.metrics import peak_rss_mb

        return {**self._work.counts(), **peak_rss_mb(self.spark)}

    def read_source(self, plan: Any, kernel: Callable[[Iterable[pa.Table]], Iterator[tuple[str, pa.Table]]],
                    outputs: dict[str, pa.Schema]) -> None:
        """Pass 1: the source's records through `kernel`, task by task."""
        stages, tables = self.stages, self._tables(outputs)
        envelope = _Envelope({name: schema for name, schema in outputs.items() if name not in tables})

        def each(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            from pyspark import TaskContext

            written = TaskOutputs(stages, "chunks", f"t{TaskContext.get().partitionId():05d}", tables)
            try:
                for name, table in kernel(batches):
                    if name in tables:
                        written.write(name, table)
                    else:
                        yield from envelope.wrap(name, table)
            finally:
                written.close()

        self.spark.sparkContext.setJobDescription("offsetlake: read, check and reduce the source")
        self._lay_out("chunks", plan.frame(self.spark).mapInArrow(each, envelope.spark_schema()), envelope)

    def by_partition(self, stage: str, inputs: dict[str, str], kernel: Callable[[dict[str, pa.Table]],
                     Iterator[tuple[str, pa.Table]]], outputs: dict[str, pa.Schema]) -> None:
        """Pass 2 or 3: each coordinator partition's rows of `inputs` (output name -> the stage that wrote it)
        through `kernel`."""
        from pyspark.sql import functions as F

        given = _Envelope({name: self.stages.schemas[name] for name in inputs})
        frames = []
        for name, source in inputs.items():
            frame = self._read(source, name)
            others = [F.lit(None).cast(given.spark_schema()[n].dataType).alias(n) for n in inputs if n != name]
            frames.append(frame.select(F.col("coordinator_partition").alias("_partition"), F.lit(name).alias("kind"),
                                       F.struct(*frame.columns).alias(name), *others).select(
                "_partition", "kind", *inputs))
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)
        stages, tables = self.stages, self._tables(outputs)
        envelope = _Envelope({name: schema for name, schema in outputs.items() if name not in tables})

        def each(table: pa.Table) -> pa.Table:
            partition = table.column("_partition")[0].as_py() if table.num_rows else None
            written = TaskOutputs(stages, stage, f"c{'null' if partition is None else f'{partition:05d}'}", tables)
            wrapped = []
            try:
                for name, out in kernel(given.unwrap(table)):
                    if name in tables:
                        written.write(name, out)
                    else:
                        wrapped += envelope.wrap(name, out)
            finally:
                written.close()
            return pa.Table.from_batches(wrapped, envelope.schema) if wrapped else envelope.schema.empty_table()

        self.spark.sparkContext.setJobDescription(f"offsetlake: {stage} each coordinator partition")
        self._lay_out(stage, union.groupBy("_partition").applyInArrow(each, envelope.spark_schema()), envelope)

    def close(self) -> None:
        pass

    def _tables(self, outputs: dict[str, pa.Schema]) -> dict[str, pa.Schema]:
        return {name: schema for name, schema in outputs.items() if self.stages.is_table(name)}

    def _read(self, stage: str, name: str) -> Any:
        """An output as a frame of its own schema."""
        from jobs.runtime.spark_types import spark_struct

        schema = self.stages.schemas[name]
        if stage == EARLIER:
            files = [f.hadoop_uri for f in self.stages.earlier]
            return self.spark.read.schema(spark_struct(schema)).parquet(*files) if files else \
                self.spark.createDataFrame([], spark_struct(schema))
        if self.stages.is_table(name):
            where, fields = self.stages.folder(stage, name), schema
        else:  # its envelope's folder: the kind is in the path, the output's struct in the files
            where, fields = self.stages.enveloped(stage, name), pa.schema([(name, pa.struct(list(schema)))])
        if not where.exists():
            return self.spark.createDataFrame([], spark_struct(schema))
        frame = self.spark.read.schema(spark_struct(fields)).parquet(where.hadoop_uri)
        return frame if self.stages.is_table(name) else frame.select(f"{name}.*")

    def _lay_out(self, stage: str, frame: Any, envelope: "_Envelope") -> None:
        """Run the pass: its tasks write their tables, and Spark the envelope of the rest (when there is a rest)."""
        if envelope.outputs:
            frame.write.partitionBy("kind").parquet(self.stages.enveloped(stage, "x").parent.hadoop_uri)
        else:
            frame.write.format("noop").mode("overwrite").save()


class _Envelope:
    """The frame a pass's outputs travel in: `kind`, and one struct column per output (jobs.engine.spark)."""

    def __init__(self, outputs: dict[str, pa.Schema]) -> None:
        self.outputs = outputs
        self.schema = pa.schema([("kind", pa.string()), *((name, pa.struct(list(s))) for name, s in outputs.items())])

    def spark_schema(self) -> Any:
        from jobs.runtime.spark_types import spark_struct

        return spark_struct(self.schema)

    def wrap(self, name: str, table: pa.Table) -> Iterator[pa.RecordBatch]:
        """`table`, output `name`, as envelope batches."""
        if not table.num_rows:
            return
        schema = self.outputs[name]
        table = conform(table, name) if name in _tables() else table.select(schema.names).cast(schema)
        for batch in table.to_batches(max_chunksize=20_000):
            n = batch.num_rows
            columns = [pa.array([name] * n, pa.string())]
            for field in self.schema:
                if field.name == "kind":
                    continue
                columns.append(pa.StructArray.from_arrays(batch.columns, fields=list(field.type)) if field.name == name
                               else pa.nulls(n, field.type))
            yield pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def unwrap(self, table: pa.Table) -> dict[str, pa.Table]:
        """An envelope table as its outputs' tables."""
        import pyarrow.compute as pc

        found = {}
        for name, schema in self.outputs.items():
            rows = table.filter(pc.equal(table.column("kind"), name))
            struct = rows.column(name).combine_chunks()
            found[name] = pa.Table.from_arrays([pc.struct_field(struct, f.name) for f in schema], schema=schema) \
                if rows.num_rows else schema.empty_table()
        return found


def _tables() -> tuple[str, ...]:
    from jobs.lake.tables import STAGED_TABLES

    return STAGED_TABLES
