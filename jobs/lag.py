"""Consumer lag: committed offsets joined with topic end offsets (as kafka-consumer-groups.sh computes)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def consumer_lag(committed: DataFrame, end_offsets: DataFrame) -> DataFrame:
    """One row per committed offset whose topic-partition has a known end offset; lag may be negative."""
    ends = end_offsets.select("topic", "partition", F.col("offset").alias("log_end_offset"))
    return committed.join(ends, ["topic", "partition"], "inner").select(
        "group_id",
        "topic",
        "partition",
        "committed_offset",
        "log_end_offset",
        (F.col("log_end_offset") - F.col("committed_offset")).alias("lag"),
        "as_of",
    )
