"""Consumer lag: committed offsets joined with topic end offsets (as kafka-consumer-groups.sh computes)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def consumer_lag(committed: DataFrame, end_offsets: DataFrame) -> DataFrame:
    """One row per committed offset whose topic-partition has a known end offset; lag may be negative.

    `end_offsets` has topic, partition, offset and, when fetched from a cluster, log_start_offset and
    fetched_at; without them (a file) end_offsets_fetched_at and below_log_start are null (unknown).
    """
    def optional(name: str, dtype: str):
        return F.col(name) if name in end_offsets.columns else F.lit(None).cast(dtype)

    ends = end_offsets.select(
        "topic", "partition", F.col("offset").alias("log_end_offset"),
        optional("log_start_offset", "bigint").alias("log_start_offset"),
        optional("fetched_at", "timestamp").alias("end_offsets_fetched_at"),
    )
    return committed.join(ends, ["topic", "partition"], "inner").select(
        "group_id",
        "topic",
        "partition",
        "committed_offset",
        "log_end_offset",
        (F.col("log_end_offset") - F.col("committed_offset")).alias("lag"),
        "as_of",
        "end_offsets_fetched_at",
        "log_start_offset",
        # Retention deleted what this offset points at: the consumer will reset (auto.offset.reset).
        (F.col("committed_offset") < F.col("log_start_offset")).alias("below_log_start"),
    )
