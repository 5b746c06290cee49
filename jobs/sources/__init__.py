"""Sources: each turns a SourceSpec into the contract's raw-record frame (see jobs.sources.raw).

`check_source` is what can be known about a source before Spark starts; `read_source` reads it with Spark.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.config import KafkaOptions, SourceSpec
from jobs.sources.raw import normalise

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.sources.early_reduction import EarlyReduction
    from jobs.sources.reduced_dump import DumpTasks


@dataclass(frozen=True)
class SourceRead:
    """What a source produced: the raw records, and (segments only) the damage and skipped files it found."""

    records: DataFrame
    segment_errors: DataFrame | None = None
    cached: DataFrame | None = None  # segments: the persisted frame both are split from (read once)
    # A local dump: its records reduced by the tasks that read them (jobs.sources.reduced_dump).
    tasks: DumpTasks | None = None

    def release(self) -> None:
        """Drop what the source cached, once the records have been consumed (e.g. checked and persisted)."""
        if self.cached is not None:
            self.cached.unpersist()


def check_source(source: SourceSpec, kafka: KafkaOptions | None = None) -> None:
    """BadInput for what is wrong with `source` without starting Spark: a local dump's files and columns, a
    log dir without partition folders, a cluster's address, client settings, and whether it answers with the
    offsets topic (one metadata request, bounded by --kafka-timeout)."""
    if source.kind == "parquet":
        from jobs.sources.parquet import check_dump

        check_dump(source.location)
    elif source.kind == "segments":
        from jobs.sources.segments import plan_segments

        plan_segments(source.location)
    else:
        from jobs.sources.kafka_client import OFFSETS_TOPIC, Cluster

        cluster = Cluster.open(source.location, kafka or KafkaOptions(), f"--source kafka:{source.location}")
        # Asked now, so an unreachable cluster fails within --kafka-timeout, not after the JVM has started too
        # (the snapshot itself is planned when reading).
        cluster.partitions(cluster.admin(), OFFSETS_TOPIC)


def input_bytes(source: SourceSpec) -> int | None:
    """The bytes a local source holds (a dump's data files, a log dir's segments); None for a cluster or a
    remote dump, whose size is not known before reading it."""
    if source.kind == "parquet" and "://" not in source.location:
        from jobs.sources.parquet import dump_bytes

        return dump_bytes(source.location)
    if source.kind == "segments":
        from jobs.sources.segments import plan_segments

        return sum(p.size for p in plan_segments(source.location).partitions)
    return None


def read_source(spark: SparkSession, source: SourceSpec, kafka: KafkaOptions | None = None,
                early: EarlyReduction | None = None) -> SourceRead:
    """Read raw offsets-topic records from `source` (`kafka` configures a live cluster source; `early`: its
    reduction, started before Spark)."""
    if source.kind == "parquet":
        from jobs.sources.parquet import read_parquet
        from jobs.sources.reduced_dump import DumpTasks, plan_dump

        records = normalise(read_parquet(spark, source.location), str(source))
        if early is not None:
            return SourceRead(records, tasks=DumpTasks(spark, early.plan, early))
        # Tasks read the dump's files with pyarrow, so only where they run on this machine (local mode).
        context = spark.sparkContext
        plan = plan_dump(source.location, context.defaultParallelism) if context.master.startswith("local") else None
        if plan is None:
            return SourceRead(records)
        return SourceRead(records, tasks=DumpTasks(spark, plan))
    if source.kind == "kafka":
        from jobs.sources.kafka import read_kafka

        return SourceRead(normalise(read_kafka(spark, source.location, kafka or KafkaOptions()), str(source)))
    from jobs.sources.segments import read_segments

    frame, records, errors = read_segments(spark, source.location)
    return SourceRead(normalise(records, str(source)), errors, frame)
