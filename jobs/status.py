"""Burrow's consumer evaluation, offline (contract: group_status): each partition's window of recent commits
judged by Burrow's rules in Burrow's order (linkedin/Burrow core/internal/evaluator/caching.go,
calculatePartitionStatus), and each group by its worst partition.

A window is the last N commits of a (group, topic, partition) up to as_of (Burrow's storage `intervals`),
in log order, after the offset's last tombstone. The lag at each commit is the log end at the commit's time
(jobs.end_offsets_history.log_end_at: interpolated between the snapshots around it, else the newest before it) minus the
committed offset, never below zero (Burrow's storage clamps it too); unknown before the history starts. Rules
that need a lag are skipped where it is unknown; STOP and REWIND need only the commits and as_of.
"""
from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.derive.status import ALLOWED_LAG, DECISIONS, GROUP_LEVELS, GROUP_STATUS, STATUS_WINDOW
from jobs.end_offsets_history import (SNAPSHOTS_TYPE, TOPIC_PARTITION, end_offsets_history, log_end_at, micros, newest,
                                      snapshot_series)

GROUP_PARTITION = ["group_id", *TOPIC_PARTITION]


def group_status(commits: DataFrame, history: DataFrame | None, as_of: datetime, window: int = STATUS_WINDOW,
                 allowed_lag: int = ALLOWED_LAG) -> DataFrame:
    """One row per (group, topic, partition) whose offset is live at as_of (its newest record up to as_of is a
    commit): group_id, topic, partition, status, group_status, rule, window_commits, window_start, window_end,
    lag, as_of, and current_lag, complete, window_offsets, window_lags.

    `commits` is offset_commits-shaped (group_id, topic, partition, kind, committed_offset, commit_timestamp,
    record_timestamp, coordinator_partition, record_offset); `history` is end_offsets_history-shaped (or end
    offsets as read, made history as consumer_lag does), or None: then no lag is known. `window` is Burrow's
    `intervals`, `allowed_lag` its evaluator's `allowed-lag`.
    """
    at = F.lit(as_of).cast("timestamp")
    windows = commit_windows(commits, as_of, window)
    if history is not None and "observed_at" not in history.columns:
        history = end_offsets_history(history, at)
    if history is None:
        series = windows.withColumn("snapshots", F.lit(None).cast(SNAPSHOTS_TYPE))
    else:
        series = windows.join(snapshot_series(history, as_of), TOPIC_PARTITION, "left")
    # In steps: each step's arrays are computed once, not once per rule that reads them (higher-order functions
    # run interpreted, per element).
    judged = series.withColumn("window", with_lags(F.col("window"), F.col("snapshots"))).withColumn(
        "current_lag", current(F.col("window"), F.col("snapshots"))).withColumns({
            "window_offsets": F.transform("window", lambda c: c.committed_offset),
            "window_lags": F.transform("window", lambda c: c.lag)}).withColumn(
        "known_lags", F.filter("window_lags", lambda lag: lag.isNotNull()))
    verdict = partition_status(F.col("window"), F.col("snapshots"), F.col("current_lag"), at, window, allowed_lag,
                               F.col("window_offsets"), F.col("known_lags"))
    w = F.col("window")
    last = F.try_element_at(w, F.lit(-1))
    rows = judged.withColumn("_verdict", verdict).select(
        *GROUP_PARTITION,
        F.element_at(F.array(*[F.lit(d.status) for d in DECISIONS]), F.col("_verdict")).alias("status"),
        F.element_at(F.array(*[F.lit(d.rule) for d in DECISIONS]), F.col("_verdict")).alias("rule"),
        F.size(w).alias("window_commits"),
        F.try_element_at(w, F.lit(1)).committed_at.alias("window_start"),
        last.committed_at.alias("window_end"),
        last.lag.alias("lag"),
        at.alias("as_of"),
        "current_lag",
        (F.size(w) / F.lit(window)).alias("complete"),  # Burrow's Complete: how full the window is
        "window_offsets",
        "window_lags",
    )
    to_group = F.create_map(*[F.lit(v) for pair in GROUP_STATUS.items() for v in pair])
    levels = F.array(*map(F.lit, GROUP_LEVELS))
    worst = F.max(F.array_position(levels, to_group[F.col("status")])).over(Window.partitionBy("group_id"))
    return rows.withColumn("group_status", F.element_at(levels, worst.cast("int"))).select(
        *GROUP_PARTITION, "status", "group_status", "rule", "window_commits", "window_start", "window_end", "lag",
        "as_of", "current_lag", "complete", "window_offsets", "window_lags")


def recent_commits(offset_commits: DataFrame, window: int) -> DataFrame:
    """The rows of an offset_commits table, as rebuilt up to the as_of it is judged at, that a window can hold:
    each key's last `window` records (`later_records`), tombstones among them. The windows are a few rows per
    key; the table is the whole log."""
    return offset_commits.where(F.col("later_records") < window)


def commit_windows(commits: DataFrame, as_of: datetime, window: int) -> DataFrame:
    """group_id, topic, partition, window: the last `window` commits up to as_of after the offset's last
    tombstone, in log order, array<struct<order, committed_at, committed_offset>> (order: coordinator partition
    and record offset; committed_at: the commit timestamp, as Burrow reads it from the value, else the record's).
    An offset whose newest record is a tombstone is gone, and has no row.

    One aggregation per offset (its commits and its last tombstone), then array functions on a few elements: no
    window over the commits, whose sort would cost more than the rules."""
    at = F.lit(as_of).cast("timestamp")
    applied = commits.where(F.col("record_timestamp").isNull() | (F.col("record_timestamp") <= at))
    order = F.struct("coordinator_partition", "record_offset")
    point = F.struct(order.alias("order"), F.coalesce("commit_timestamp", "record_timestamp").alias("committed_at"),
                     F.col("committed_offset"))
    per_offset = applied.groupBy(*GROUP_PARTITION).agg(
        F.sort_array(F.collect_list(F.when(F.col("kind") == "commit", point))).alias("commits"),  # nulls skipped
        F.max(F.when(F.col("kind") == "delete", order)).alias("last_delete"))
    # Most offsets were never deleted: their commits are all live, without a filter's per-element lambda.
    live = per_offset.withColumn("live", F.when(F.col("last_delete").isNull(), F.col("commits")).otherwise(
        F.filter("commits", lambda c: c.order > F.col("last_delete"))))
    recent = F.slice("live", F.greatest(F.size("live") - window + 1, F.lit(1)), window)
    return live.select(*GROUP_PARTITION, recent.alias("window")).where(F.size("window") > 0)


def with_lags(window: Column, snapshots: Column) -> Column:
    """The window's commits, each with its lag: the log end at its time minus its offset, 0 when the consumer is
    ahead (Burrow's storage: its broker offsets are periodic, so a commit may pass them); null when the log
    end then is unknown."""
    def lag_at(c: Column) -> Column:
        end = log_end_at(snapshots, c.committed_at)
        return F.when(end.isNotNull(), F.greatest(end - c.committed_offset, F.lit(0)))

    return F.transform(window, lambda c: F.struct(c.order.alias("order"), c.committed_at.alias("committed_at"),
                                                  c.committed_offset.alias("committed_offset"), lag_at(c).alias("lag")))


def current(window: Column, snapshots: Column) -> Column:
    """Burrow's CurrentLag: the newest log end at as_of minus the newest commit, 0 when ahead; null unknown."""
    lag = newest(snapshots).log_end_offset - F.try_element_at(window, F.lit(-1)).committed_offset
    return F.when(lag.isNotNull(), F.greatest(lag, F.lit(0)))


def partition_status(window: Column, snapshots: Column, current_lag: Column, at: Column, intervals: int,
                     allowed_lag: int, offsets: Column, known: Column) -> Column:
    """The 1-based index in DECISIONS of one partition's verdict, from its commit window (with_lags), the
    window's committed offsets and its lags that are known (arrays), end-offset snapshots and current lag:
    calculatePartitionStatus's checks in its order, the first that holds decides."""
    n = F.size(window)
    first, last = F.try_element_at(window, F.lit(1)), F.try_element_at(window, F.lit(-1))

    # Rule 3 (checkIfOffsetsStopped): no commit for longer than the window spans, with "now" = as_of ...
    stopped = (micros(at) - micros(last.committed_at)) > (micros(last.committed_at) - micros(first.committed_at))
    # ... unless the log end sat at or below the newest commit in the recent snapshots (checkIfRecentLagZero:
    # Burrow's ring of `intervals` broker offsets, all fetched since the consumer stopped: a snapshot older
    # than the newest commit says nothing about whether the log moved on after it).
    since_last = F.filter(snapshots, lambda s: s.observed_at >= last.committed_at)
    recent_ends = F.slice(since_last, F.greatest(F.size(since_last) - intervals + 1, F.lit(1)), intervals)
    recent_lag_zero = F.coalesce(F.exists(recent_ends, lambda s: s.log_end_offset <= last.committed_offset),
                                 F.lit(False))
    # Rule 2 (checkIfOffsetsRewind, checkIfRewindRecovered): the first step back, not made good later.
    pairs = F.greatest(n - 1, F.lit(0))
    moved_back = F.zip_with(F.slice(offsets, 1, pairs), F.slice(offsets, 2, pairs), lambda before, after: after < before)
    rewind_at = F.array_position(moved_back, True).cast("int")  # Burrow's rewindIndex, 0: none
    recovered = F.exists(F.slice(offsets, rewind_at + 1, n - rewind_at),
                         lambda o: o >= F.element_at(offsets, F.greatest(rewind_at, F.lit(1))))
    # Rule 1 (isLagAlwaysNotZero) over the lags known; rule 4 (checkIfOffsetsStalled); rule 5 (checkIfLagNotDecreasing).
    k = F.size(known)
    known_pairs = F.greatest(k - 1, F.lit(0))
    not_decreasing = F.forall(F.zip_with(F.slice(known, 1, known_pairs), F.slice(known, 2, known_pairs),
                                         lambda before, after: after >= before), lambda ok: ok)
    tests = (  # one per DECISIONS entry but the last
        current_lag.isNotNull() & (current_lag <= allowed_lag),
        stopped & ~recent_lag_zero,
        (rewind_at > 0) & ~recovered,
        k == 0,
        F.exists(known, lambda lag: lag <= allowed_lag),
        F.size(F.array_distinct(offsets)) == 1,
        (k >= 2) & not_decreasing,
    )
    verdict = F.lit(len(DECISIONS))
    for index, holds in reversed(list(enumerate(tests, start=1))):
        verdict = F.when(holds, F.lit(index)).otherwise(verdict)
    return verdict
