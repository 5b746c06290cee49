"""A source planned on the driver, before any record is read: its tasks, each a picklable description of a share
of the log that any worker (a forked process, a Spark executor) reads into raw Arrow batches (the contract's
columns), and, for notebooks and Spark's own Kafka source, the same records as one Spark frame.

* a Parquet dump: its records cut into tasks of about TASK_BYTES, by row group (jobs.sources.parquet);
* log segments: one task per coordinator partition, its segments in base-offset order (jobs.sources.segments);
* a live cluster: one task per offsets-topic partition, [log start, end) captured now (jobs.sources.kafka).

With the archive on (jobs.sources.archive), a live cluster's slices and a log dir's segments start after each
partition's archived end, and the archived records are read by tasks of their own (`archived`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterator

from jobs.config import KafkaOptions, SourceSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from jobs.sources.archive import Archive
    from jobs.sources.kafka_client import Cluster

log = logging.getLogger("offsetlake")
# Compressed bytes of a dump's row groups per task, at most (as many tasks as cores at least).
TASK_BYTES = 256 << 20


@dataclass(frozen=True)
class SourcePlan:
    spec: SourceSpec
    tasks: tuple[Any, ...]
    size: int | None = None  # bytes, when known before reading
    ignored: tuple[Any, ...] = field(default=())  # segments: files and folders not read (segment_errors rows)
    columns: tuple[str, ...] = ()  # a dump: the contract's columns it has
    kafka: Cluster | None = None  # a live cluster's resolved connection
    kafka_reader: str = "auto"  # --kafka-reader: which reader Spark uses (jobs.sources.kafka_spark)
    archive: Archive | None = None  # --archive: what the archive holds
    archived: tuple[Any, ...] = ()  # the tasks that read the archived records

    @property
    def reads(self) -> tuple[Any, ...]:
        """Every task a runner reads: the source's, then the archive's."""
        return self.tasks + self.archived

    def read(self, task: Any) -> Iterator[pa.Table]:
        """One task's raw batches (a segments task adds its damage as rows with a `problem`)."""
        from jobs.sources.archive import ArchivedFiles, read_archived

        if isinstance(task, ArchivedFiles):
            return read_archived(task)
        if self.spec.kind == "parquet":
            from jobs.sources.parquet import read_row_groups

            return read_row_groups(task, list(self.columns))
        if self.spec.kind == "segments":
            from jobs.sources.segments import read_partition

            return read_partition(task)
        from jobs.sources.kafka import read_slice

        return read_slice(self.kafka, task.topic, task)

    def frame(self, spark: SparkSession) -> DataFrame:
        """The raw records as one Spark frame (the contract's columns; a segments frame has a `problem` column),
        and the archived ones after them (with their first_seen_run)."""
        frame = self._source_frame(spark)
        if not self.archived:
            return frame
        from jobs.sources.archive import archived_frame

        return frame.unionByName(archived_frame(spark, self.archive), allowMissingColumns=True)

    def _source_frame(self, spark: SparkSession) -> DataFrame:
        if self.spec.kind == "parquet":
            from jobs.sources.raw import normalise
            from jobs.sources.parquet import read_parquet

            return normalise(read_parquet(spark, self.spec.dump), str(self.spec))
        if self.spec.kind == "segments":
            from jobs.sources.segments import read_partitions

            return read_partitions(spark, list(self.tasks))
        from jobs.sources.kafka_spark import read_kafka
        from jobs.sources.raw import normalise

        return normalise(read_kafka(spark, self.kafka, list(self.tasks), self.kafka_reader), str(self.spec))


def plan_source(spec: SourceSpec, kafka: KafkaOptions, cores: int, archive: Archive | None = None, read_back: bool = True
                ) -> SourcePlan:
    """Plan `spec` for `cores` workers (no Spark); with `archive` (jobs.sources.archive.Archive), after what it
    holds, and its records too unless not `read_back` (a replay state stands for them: jobs.replay.resume)."""
    plan = _plan_source(spec, kafka, cores, (archive.ends if archive is not None else None) or {})
    if archive is None:
        return plan
    return replace(plan, archive=archive, archived=archive.tasks(cores, TASK_BYTES) if read_back else ())


def _plan_source(spec: SourceSpec, kafka: KafkaOptions, cores: int, ends: dict[tuple[str, int], int]
                 ) -> SourcePlan:
    if spec.kind == "parquet":
        from jobs.sources.parquet import plan_dump

        tasks, size, columns = plan_dump(spec.dump, cores, TASK_BYTES)
        return SourcePlan(spec, tasks, size, columns=columns)
    if spec.kind == "segments":
        from jobs.sources.segments import plan_segments

        plan = plan_segments(spec.location)
        parts = [p.after(ends[(p.topic, p.partition)]) if (p.topic, p.partition) in ends else p
                 for p in plan.partitions]
        todo = tuple(p for p in parts if p.segments)
        return SourcePlan(spec, todo, sum(p.size for p in todo), tuple(plan.ignored))
    from jobs.sources.kafka import plan_snapshot
    from jobs.sources.kafka_client import OFFSETS_TOPIC, Cluster
    from offsets_codec.registry import SHARE_STATE_TOPIC

    cluster = Cluster.open(spec.location, kafka, f"--source {spec}")
    # What the archive holds is not read again: each partition from its archived end on.
    planned = [replace(s, start=max(s.start, ends[(s.topic, s.partition)] + 1)) if (s.topic, s.partition) in ends
               else s for s in plan_snapshot(cluster) + plan_snapshot(cluster, SHARE_STATE_TOPIC, optional=True)]
    slices = tuple(s for s in planned if s.records > 0)
    for topic in (OFFSETS_TOPIC, SHARE_STATE_TOPIC):
        of_topic = [s for s in planned if s.topic == topic]
        if of_topic or topic == OFFSETS_TOPIC:
            log.info("kafka snapshot of %s on %s (%s): %d partitions, up to %d records", topic, cluster.bootstrap,
                     cluster.isolation, len(of_topic), sum(s.records for s in of_topic if s.records > 0))
    log.info("planned offsets per partition [start, end): %s",
             ", ".join(f"{'' if s.topic == OFFSETS_TOPIC else s.topic + '-'}{s.partition}:[{s.start},{s.end})"
                       for s in slices) or "all empty")
    return SourcePlan(spec, slices, None, kafka=cluster, kafka_reader=kafka.reader)
