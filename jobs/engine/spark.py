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
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from jobs.engine.stages import Stages, TaskOutputs, chunk_task, partition_task

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
        """Groups of coordinator partitions, as the local runner makes them for as many cores."""
        return 2 * self.cores

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
        """Pass 1: every task of `plan` through `kernel`."""
        stages = self.stages
        if _read_by_spark(self.spark, plan):
            self._through_frame(plan, kernel, outputs)
            return
        tasks = plan.reads
        log.info("Spark's tasks read the source's %d task(s) themselves", len(tasks))
        self._run("read, check and reduce the source", len(tasks),
                  lambda index: chunk_task(plan, tasks[index], index, kernel, outputs, stages))

    def by_partition(self, stage: str, inputs: dict[str, str], kernel: Callable[[dict[str, pa.Table]],
                     Iterator[tuple[str, pa.Table]]], outputs: dict[str, pa.Schema]) -> None:
        """Pass 2 or 3: each group's rows of `inputs` (output name -> the stage that wrote it) through `kernel`."""
        stages = self.stages
        self._run(f"{stage} each coordinator partition", stages.groups,
                  lambda group: partition_task(stage, group, inputs, kernel, outputs, stages))

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

    def _through_frame(self, plan: Any, kernel: Callable, outputs: dict[str, pa.Schema]) -> None:
        """Pass 1 over the frame Spark reads (Spark's Kafka source): each Spark task a source task."""
        stages = self.stages

        def each(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            from pyspark import TaskContext

            written = TaskOutputs(stages, "chunks", f"t{TaskContext.get().partitionId():05d}", outputs)
            try:
                for name, table in kernel(batches):
                    written.write(name, table)
            finally:
                written.close()
            yield pa.RecordBatch.from_pydict({"done": pa.array([1], pa.int32())})

        self.spark.sparkContext.setJobDescription("offsetlake: read, check and reduce the source")
        plan.frame(self.spark).mapInArrow(each, "done int").write.format("noop").mode("overwrite").save()


def _read_by_spark(spark: Any, plan: Any) -> bool:
    """The source is one only Spark reads: a live cluster through Spark's own Kafka source."""
    if plan.spec.kind != "kafka":
        return False
    from jobs.sources.kafka_spark import choose_reader

    return choose_reader(spark, plan.kafka_reader) == "spark"
