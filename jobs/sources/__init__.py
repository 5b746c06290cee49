"""Sources: each turns a SourceSpec into the contract's raw-record frame (see jobs.raw)."""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from jobs.config import KafkaOptions, SourceSpec
from jobs.errors import BadInput
from jobs.raw import normalise


def read_source(spark: SparkSession, source: SourceSpec, kafka: KafkaOptions | None = None) -> DataFrame:
    """Read raw offsets-topic records from `source` (`kafka` configures a live cluster source)."""
    if source.kind == "parquet":
        from jobs.sources.parquet import read_parquet

        return normalise(read_parquet(spark, source.location), str(source))
    if source.kind == "kafka":
        from jobs.sources.kafka import read_kafka

        return normalise(read_kafka(spark, source.location, kafka or KafkaOptions()), str(source))
    # The segment reader is tracked as its own issue.
    raise BadInput(f"--source {source}: the {source.kind} source is not available in this version; "
                   "use parquet:PATH (a dump with Spark's Kafka-source columns)")
