"""End-offset history (contract: end_offsets_history): every snapshot of a partition's log end offset seen,
kept across runs into the same output, and what lag and Burrow's rules read from it.

A snapshot is (topic, partition, log_end_offset, observed_at). Reading the history at a moment uses only
snapshots observed at or before it: nothing later was known then. Between two snapshots the log end is taken
to grow linearly, as kafka-lag-exporter's lookup table assumes.
"""
from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

TOPIC_PARTITION = ["topic", "partition"]
KEY = [*TOPIC_PARTITION, "observed_at"]  # the table is unique on it
# Contract columns, then fetched_at (extra): when a cluster was asked; null for a file's snapshot.
COLUMNS = ("topic", "partition", "log_end_offset", "log_start_offset", "observed_at", "fetched_at")
_TYPES = {"log_start_offset": "bigint", "fetched_at": "timestamp"}
# snapshot_series' column type: what the rules read where there is no history at all (every value null).
SNAPSHOTS_TYPE = "array<struct<observed_at:timestamp,log_end_offset:bigint,log_start_offset:bigint,fetched_at:timestamp>>"


def end_offsets_history(ends: DataFrame, as_of_col: Column) -> DataFrame:
    """The history rows of end offsets as read this run: COLUMNS.

    `ends` is what jobs.sources.end_offsets gives: topic, partition, offset, and optionally timestamp (a
    file's), log_start_offset and fetched_at (a live fetch). observed_at is the file's timestamp, else the
    fetch time, else `as_of_col`: a snapshot without a time (a 3-column file) is the one taken for as_of.
    """
    def optional(name: str, dtype: str) -> Column:
        return F.col(name).cast(dtype) if name in ends.columns else F.lit(None).cast(dtype)

    return ends.select(
        "topic", "partition", F.col("offset").cast("bigint").alias("log_end_offset"),
        optional("log_start_offset", "bigint").alias("log_start_offset"),
        F.coalesce(optional("timestamp", "timestamp"), optional("fetched_at", "timestamp"),
                   as_of_col.cast("timestamp")).alias("observed_at"),
        optional("fetched_at", "timestamp").alias("fetched_at"),
    )


def merge_history(previous: DataFrame | None, new: DataFrame) -> DataFrame:
    """`previous` (the table as written by earlier runs, or None) plus this run's `new` rows, one row per
    (topic, partition, observed_at): on a repeated key this run's row wins, so rerunning over the same file
    changes nothing and a corrected file replaces its snapshot. Ties inside one frame keep the highest log end
    (deterministic). Columns: COLUMNS (fetched_at null where `previous` has none)."""
    def rows(frame: DataFrame, newer: int) -> DataFrame:
        return frame.select(*[F.col(c) if c in frame.columns else F.lit(None).cast(_TYPES[c]).alias(c) for c in COLUMNS],
                            F.lit(newer).alias("_newer"))

    both = rows(new, 1) if previous is None else rows(new, 1).unionByName(rows(previous, 0))
    order = Window.partitionBy(*KEY).orderBy(F.col("_newer").desc(), F.col("log_end_offset").desc(),
                                             F.col("log_start_offset").desc_nulls_last(),
                                             F.col("fetched_at").desc_nulls_last())
    return both.withColumn("_rank", F.row_number().over(order)).where(F.col("_rank") == 1).select(*COLUMNS)


def snapshot_series(history: DataFrame, as_of: datetime | None) -> DataFrame:
    """topic, partition, snapshots: the partition's snapshots observed at or before `as_of` (None: all) in time
    order, array<struct<observed_at, log_end_offset, log_start_offset, fetched_at>>. One row per partition
    with any: what newest, log_end_at and passed_at read."""
    known = history if as_of is None else history.where(F.col("observed_at") <= F.lit(as_of).cast("timestamp"))
    optional = [F.col(c) if c in history.columns else F.lit(None).cast(_TYPES[c]).alias(c) for c in _TYPES]
    return known.groupBy(*TOPIC_PARTITION).agg(
        F.sort_array(F.collect_list(F.struct("observed_at", "log_end_offset", *optional))).alias("snapshots"))


def newest(snapshots: Column) -> Column:
    """The newest snapshot of a series (a struct), null for an empty one."""
    return F.try_element_at(snapshots, F.lit(-1))


def latest_end_offsets(history: DataFrame, as_of: datetime | None) -> DataFrame:
    """Per topic-partition, the newest snapshot observed at or before `as_of` (None: the newest of all): the
    end offsets consumer_lag subtracts from. A partition with no such snapshot has no row. Columns: COLUMNS."""
    last = newest(F.col("snapshots"))
    return snapshot_series(history, as_of).select(*TOPIC_PARTITION, *[last[c].alias(c) for c in COLUMNS[2:]])


def micros(ts: Column) -> Column:
    """A timestamp as epoch microseconds, a double: exact below 2^53 µs (year 2255), and safe to divide."""
    return F.unix_micros(ts).cast("double")


def log_end_at(snapshots: Column, at: Column) -> Column:
    """The log end offset at the moment `at` (bigint): linear between the snapshots before and after it (rounded
    down: a log end is a whole offset), the newest before it when none follows (what a live reader would hold
    then), null before the first snapshot."""
    before = F.try_element_at(F.filter(snapshots, lambda s: s.observed_at <= at), F.lit(-1))
    after = F.try_element_at(F.filter(snapshots, lambda s: s.observed_at > at), F.lit(1))
    # Multiplied before divided: a log end that falls on a whole offset comes out exact, not a hair below it.
    grown = (micros(at) - micros(before.observed_at)) * (after.log_end_offset - before.log_end_offset)
    between = F.floor(before.log_end_offset + grown / (micros(after.observed_at) - micros(before.observed_at)))
    return F.when(after.isNull(), before.log_end_offset).otherwise(between.cast("bigint"))


def passed_at(snapshots: Column, offset: Column) -> Column:
    """When the log end reached `offset`, in epoch microseconds (double), as kafka-lag-exporter's lookup table
    predicts it: on the line through the last snapshot whose log end had not passed the offset and the next
    snapshot that had. Null when the history does not bracket it (it starts after the log end passed, or the
    log end never passed it). Taking the *last* such snapshot follows the log end's newest climb past the
    offset, should it ever have fallen back (a recreated topic)."""
    below = F.try_element_at(F.filter(snapshots, lambda s: s.log_end_offset <= offset), F.lit(-1))
    above = F.try_element_at(
        F.filter(snapshots, lambda s: (s.observed_at > below.observed_at) & (s.log_end_offset > offset)), F.lit(1))
    t0, t1 = micros(below.observed_at), micros(above.observed_at)
    # log end is below.log_end_offset at t0 and above.log_end_offset > offset at t1: solve for the offset
    return t0 + (offset - below.log_end_offset) * (t1 - t0) / (above.log_end_offset - below.log_end_offset)
