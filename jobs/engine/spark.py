"""The Spark runner: the kernel's tasks run by Spark, on any cluster.

Each pass is one Spark job whose tasks are the local runner's (jobs.engine.stages.chunk_task and
partition_task): a source task reads its share of the source itself (a dump's row groups, a log dir's
segments, a live partition's slice) and a partition task its group of coordinator partitions, each writing its
outputs where the next pass and the sink read them (the run's staging area and the tables' run folders, through
jobs.base.storage). Spark schedules, places and retries them; no record crosses the JVM. A task's files are
named by its input (a source task, a group), so a task Spark runs again replaces what its first attempt wrote.

Only Spark's own Kafka source (--kafka-reader spark, its jar on the classpath) is read by Spark: its frame goes
through the source kernel with `mapInArrow`, each Spark task a source task.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Iterator

import pyarrow as pa

from jobs.engine.handoffs import CHUNKS, Staged
from jobs.engine.stages import ChunkKernel, PartitionKernel, StagingLayout, TaskOutputs, chunk_task, partition_task

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.sources.plan import SourcePlan

log = logging.getLogger("offsetlake")


class SparkRunner:
    """Runs the kernel's passes as Spark jobs on `spark` (a session started here when none is given), the jobs
    described as `label` in Spark's UI and counted in the summary (jobs.runtime.metrics.SparkWork)."""

    name = "spark"

    def __init__(self, spark: SparkSession | None, label: str) -> None:
        if spark is None:
            from jobs.runtime.session import get_spark

            spark = get_spark()
        self.spark = spark
        self.cores = spark.sparkContext.defaultParallelism
        self.layout: StagingLayout | None = None
        from jobs.runtime.metrics import SparkWork

        self._work = SparkWork(spark, label)

    def groups(self, plan: SourcePlan) -> int:
        """Groups of coordinator partitions, as the local runner makes them for as many cores."""
        return 2 * self.cores

    def attach(self, layout: StagingLayout) -> None:
        self.layout = layout

    def delta_engine(self) -> str:
        from jobs.lake.sink import delta_engine

        return delta_engine(self.spark)

    def work(self) -> dict[str, int]:
        from jobs.runtime.metrics import peak_rss_mb

        return {**self._work.counts(), **peak_rss_mb(self.spark)}

    def read_source(self, plan: SourcePlan, kernel: ChunkKernel, outputs: dict[str, pa.Schema]) -> None:
        """Pass 1: every task of `plan` through `kernel`."""
        layout = self.layout
        if _read_by_spark(self.spark, plan):
            self._through_frame(plan, kernel, outputs)
            return
        tasks = plan.reads
        log.info("Spark's tasks read the source's %d task(s) themselves", len(tasks))
        self._run("read, check and reduce the source", len(tasks),
                  lambda index: chunk_task(plan, tasks[index], index, kernel, outputs, layout))

    def by_partition(self, stage: str, inputs: tuple[Staged, ...], kernel: PartitionKernel,
                     outputs: dict[str, pa.Schema]) -> None:
        """Pass 2 or 3: each group's rows of `inputs` through `kernel`."""
        layout = self.layout
        self._run(f"{stage} each coordinator partition", layout.groups,
                  lambda group: partition_task(stage, group, inputs, kernel, outputs, layout))

    def close(self) -> None:
        pass

    def _run(self, what: str, count: int, task: Callable[[int], None]) -> None:
        """One Spark job of `count` tasks, task i running `task(i)`."""
        if not count:
            return

        def each(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for index in batch.column(0).to_pylist():
                    task(index)
            yield pa.RecordBatch.from_pydict({"done": pa.array([1], pa.int32())})

        self.spark.sparkContext.setJobDescription(f"offsetlake: {what}")
        tasks = self.spark.range(count, numPartitions=count).selectExpr("cast(id as int) as task")
        tasks.mapInArrow(each, "done int").write.format("noop").mode("overwrite").save()

    def _through_frame(self, plan: SourcePlan, kernel: ChunkKernel, outputs: dict[str, pa.Schema]) -> None:
        """Pass 1 over the frame Spark reads (Spark's Kafka source): each Spark task a source task."""
        layout = self.layout

        def each(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            from pyspark import TaskContext

            written = TaskOutputs(layout, CHUNKS.stage, f"t{TaskContext.get().partitionId():05d}", outputs)
            try:
                for name, table in kernel(batches):
                    written.write(name, table)
            finally:
                written.close()
            yield pa.RecordBatch.from_pydict({"done": pa.array([1], pa.int32())})

        self.spark.sparkContext.setJobDescription("offsetlake: read, check and reduce the source")
        plan.frame(self.spark).mapInArrow(each, "done int").write.format("noop").mode("overwrite").save()


def _read_by_spark(spark: SparkSession, plan: SourcePlan) -> bool:
    """The source is one only Spark reads: a live cluster through Spark's own Kafka source."""
    if plan.spec.kind != "kafka":
        return False
    from jobs.sources.kafka_spark import choose_reader

    return choose_reader(spark, plan.kafka_reader) == "spark"
