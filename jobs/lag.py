"""Consumer lag: committed offsets joined with topic end offsets (as kafka-consumer-groups.sh computes), and the
same lag in time and rates from the end-offset history and the offset commits (contract: consumer_lag, added
columns)."""
from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.derive.lag import RATE_WINDOW_MS
from jobs.end_offsets_history import TOPIC_PARTITION, end_offsets_history, micros, newest, passed_at, snapshot_series

GROUP_PARTITION = ["group_id", *TOPIC_PARTITION]


def consumer_lag(committed: DataFrame, end_offsets: DataFrame, as_of: datetime | None = None,
                 commits: DataFrame | None = None, rate_window_ms: int = RATE_WINDOW_MS) -> DataFrame:
    """One row per committed offset whose topic-partition has a known end offset; lag may be negative.

    `committed` has group_id, topic, partition, committed_offset, as_of (committed_offsets). `end_offsets` is
    either an end_offsets_history frame (observed_at, log_end_offset, ...) or end offsets as read this run
    (topic, partition, offset and optionally timestamp, log_start_offset, fetched_at), which become history
    rows observed at their timestamp, fetch time or else as_of. Without the live columns (a file)
    end_offsets_fetched_at and below_log_start are null (unknown).

    With `as_of`, lag is measured there: the end offsets are the newest snapshot observed at or before it and
    nothing later is read. Without it (the call of a single snapshot) the snapshot given is current whenever
    it was taken (a live fetch comes after the rebuild's as_of), and times are measured at committed's as_of.

    Time columns: lag_seconds, consume_rate (from `commits`, offset_commits rows; null without them),
    produce_rate and catch_up_seconds, over the rate window (as_of - rate_window_ms, as_of]; see lag_in_time
    and rates.
    """
    if "observed_at" not in end_offsets.columns:
        if as_of is None:  # the committed rows' as_of, which every one of them carries: joined on, not collected
            end_offsets = end_offsets.crossJoin(committed.select(F.max("as_of").alias("as_of")))
        end_offsets = end_offsets_history(end_offsets, measured_at(as_of))
    # The current snapshot is the newest of the series, as latest_end_offsets has it (one aggregation for both).
    current = newest(F.col("snapshots"))
    lagging = committed.join(snapshot_series(end_offsets, as_of), TOPIC_PARTITION, "inner").select(
        "*", current.log_end_offset.alias("log_end_offset"), current.log_start_offset.alias("log_start_offset"),
        current.fetched_at.alias("end_offsets_fetched_at"))
    lag = F.col("log_end_offset") - F.col("committed_offset")
    with_rates = rates(lagging.withColumn("lag", lag), commits, as_of, rate_window_ms)
    return with_rates.select(
        *GROUP_PARTITION,
        "committed_offset",
        "log_end_offset",
        "lag",
        "as_of",
        lag_in_time(F.col("snapshots"), F.col("committed_offset"), F.col("lag"), measured_at(as_of)).alias("lag_seconds"),
        "consume_rate",
        "produce_rate",
        catch_up(F.col("lag"), F.col("consume_rate"), F.col("produce_rate")).alias("catch_up_seconds"),
        "end_offsets_fetched_at",
        "log_start_offset",
        # Retention deleted what this offset points at: the consumer will reset (auto.offset.reset).
        (F.col("committed_offset") < F.col("log_start_offset")).alias("below_log_start"),
    )


def lag_in_time(snapshots: Column, committed_offset: Column, lag: Column, at: Column) -> Column:
    """Seconds (double) from when the log end passed the committed offset to `at`: how old the oldest unconsumed
    record is, interpolated from the snapshots as kafka-lag-exporter does (jobs.end_offsets_history.passed_at). 0 when the
    consumer is at or past the log end; null, never NaN, when no two snapshots bracket the committed offset."""
    passed = passed_at(snapshots, committed_offset)
    # The log end may have passed the offset only after `at` (a snapshot given without as_of): nothing unread then.
    behind = F.when(passed.isNotNull(), F.greatest((micros(at) - passed) / 1e6, F.lit(0.0)))
    return F.when(lag <= 0, F.lit(0.0)).otherwise(behind)


def measured_at(as_of: datetime | None) -> Column:
    """as_of, or without it each committed row's own as_of."""
    return F.lit(as_of).cast("timestamp") if as_of is not None else F.col("as_of")


def rates(lagging: DataFrame, commits: DataFrame | None, as_of: datetime | None, window_ms: int) -> DataFrame:
    """`lagging` (group_id, topic, partition, as_of, snapshots) with consume_rate and produce_rate, offsets per
    second over (as_of - window, as_of]: each the change between the window's first and last point over the
    time between them (a net rate: a rewind in the window lowers it), null with fewer than two points or no
    time between them."""
    until = micros(measured_at(as_of))
    since = until - F.lit(window_ms * 1000.0)

    def inside(ts: Column) -> Column:
        return (micros(ts) > since) & (micros(ts) <= until)

    in_window = F.filter("snapshots", lambda s: inside(s.observed_at))
    first, last = F.try_element_at(in_window, F.lit(1)), F.try_element_at(in_window, F.lit(-1))
    produced = per_second(last.log_end_offset - first.log_end_offset, last.observed_at, first.observed_at)
    with_produce = lagging.withColumn("produce_rate", produced)
    if commits is None:
        return with_produce.withColumn("consume_rate", F.lit(None).cast("double"))
    windowed = commits.where(F.col("kind") == "commit")
    if as_of is None:  # each committed row's own as_of bounds its window
        windowed = windowed.join(lagging.select(*GROUP_PARTITION, "as_of"), GROUP_PARTITION)
    windowed = windowed.where(inside(F.col("record_timestamp")))
    # Ordered by time, then log order: min/max of the struct are the window's first and last commit.
    point = F.struct("record_timestamp", "coordinator_partition", "record_offset", "committed_offset")
    ends = windowed.groupBy(*GROUP_PARTITION).agg(F.min(point).alias("first"), F.max(point).alias("last"),
                                                  F.count(F.lit(1)).alias("n"))
    consumed = ends.select(*GROUP_PARTITION, F.when(F.col("n") >= 2, per_second(
        F.col("last.committed_offset") - F.col("first.committed_offset"), F.col("last.record_timestamp"),
        F.col("first.record_timestamp"))).alias("consume_rate"))
    return with_produce.join(consumed, GROUP_PARTITION, "left")


def per_second(delta: Column, later: Column, earlier: Column) -> Column:
    """delta / seconds between two timestamps; null when they are equal (never a division by zero)."""
    seconds = (micros(later) - micros(earlier)) / 1e6
    return F.when(seconds > 0, delta.cast("double") / seconds)


def catch_up(lag: Column, consume_rate: Column, produce_rate: Column) -> Column:
    """Seconds until the consumer reaches the log end at today's rates: lag / (consume - produce) when the
    consumer gains on the producers, else null (it never catches up, or a rate is unknown). A consumer at or
    past the log end needs 0."""
    gain = consume_rate - produce_rate
    return F.when(gain > 0, F.greatest(lag, F.lit(0)).cast("double") / gain)
