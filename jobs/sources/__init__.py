"""Sources: each turns a SourceSpec into the contract's raw-record frame (see jobs.raw)."""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from jobs.config import KafkaOptions, SourceSpec
from jobs.raw import normalise


@dataclass(frozen=True)
class SourceRead:
    """What a source produced: the raw records, and (segments only) the damage and skipped files it found."""

    records: DataFrame
    segment_errors: DataFrame | None = None
    cached: DataFrame | None = None  # segments: the persisted frame both are split from (read once)

    def release(self) -> None:
        """Drop what the source cached, once the records have been consumed (e.g. checked and persisted)."""
        if self.cached is not None:
            self.cached.unpersist()


def read_source(spark: SparkSession, source: SourceSpec, kafka: KafkaOptions | None = None) -> SourceRead:
    """Read raw offsets-topic records from `source` (`kafka` configures a live cluster source)."""
    if source.kind == "parquet":
        from jobs.sources.parquet import read_parquet

        return SourceRead(normalise(read_parquet(spark, source.location), str(source)))
    if source.kind == "kafka":
        from jobs.sources.kafka import read_kafka

        return SourceRead(normalise(read_kafka(spark, source.location, kafka or KafkaOptions()), str(source)))
    from jobs.sources.segments import read_segments

    frame, records, errors = read_segments(spark, source.location)
    return SourceRead(normalise(records, str(source)), errors, frame)
