"""The one pass over the log: the whole log is read once and reduced to what the replay needs.

Almost every record is a plain offset commit, and for those the coordinator's fold ends in "the newest record
per key wins" (spec §7.7). So one aggregation over the log keeps, per coordinator partition and key, only the
newest plain commit (and the newest plain tombstone: `tombstone`), and keeps every other record whole (group
metadata, modern-group records, transactional commits and markers, anything the native reader cannot prove,
records after as_of). Only the aggregation's fixed-width results travel through the shuffle; the rows it picked
are then fetched whole by their position, and checked (natively, or by the Python codec for what native code
cannot prove).

When a source's tasks read the log (jobs.partial_reduce), they reduce and check it themselves, and only their
results are combined here.

The result, the reduced log, holds every record the replay can need, and every record the quarantine must
keep, with `records`: how many log records each row stands for. It grows with the number of keys, not with
the log.
"""
from __future__ import annotations

from datetime import datetime
from typing import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs import native
from jobs.records import CHECK_COLUMNS, NO_PRODUCER, check, control_error, log_records

Pin = Callable[[str, DataFrame], DataFrame]
POSITION = ["coordinator_partition", "record_offset"]


def tombstone() -> Column:
    """A key's newest tombstone is kept beside its newest commit: besides deleting the offset, a tombstone removes
    the key's open transactional commits (spec §7.2, jobs.transactions), which a newer commit does not."""
    return F.col("value").isNull().alias("tombstone")


def after(as_of: datetime | None) -> Column:
    """The record is newer than as_of (a record without a timestamp never is)."""
    if as_of is None:
        return F.lit(False)
    return F.coalesce(F.col("record_timestamp") > F.lit(as_of).cast("timestamp"), F.lit(False))


def is_plain_offset_record() -> Column:
    """An offset commit or tombstone written outside a transaction: raw columns only, no decoding."""
    return native.is_offset_key(F.col("key")) & ~F.col("is_control") & (F.col("producer_id") == NO_PRODUCER)


def with_reducible(plain: DataFrame) -> DataFrame:
    """Plain offset records (`is_plain_offset_record`) plus reducible: a tombstone, or a commit whose value the
    native reader proves valid, of which only its key's newest one matters to the replay.

    Its key is checked after the reduction (a key's validity is the same for all its records; a bad key's
    records are fetched whole again, see `scattered_bad_keys`).
    """
    value = native.offset_value()
    return native.with_read(plain, [value], {"reducible": F.col("value").isNull() | value.ok})


def reduce_log(records: DataFrame, as_of: datetime | None, pin: Pin,
               partial: Callable[[datetime | None], DataFrame] | None = None) -> DataFrame:
    """The checked, reduced log: RECORD_COLUMNS + CHECK_COLUMNS (jobs.records) + records (how many log
    records the row stands for), newest_timestamp (theirs), after_as_of, reduced (the row is the newest
    of several plain commits, or of transactional commits of one fate) and readable (the history's tasks read
    the record themselves: jobs.partial_reduce; never here).

    `pin(name, df)` materialises a frame that is read more than once (the pipeline writes it to its staging
    area), so the log is scanned exactly twice: once to aggregate, once to fetch the chosen rows.
    `partial(as_of)`: the log as its source's tasks reduced, checked and combined it (jobs.sources.reduced_dump,
    `combine_partials`), pinned, when the source can; then the log is read once, by those tasks.
    """
    if partial is not None:
        return partial(as_of)
    late = after(as_of)
    plain = is_plain_offset_record()
    # Only plain records are aggregated. Every other record (transactional commits and markers: their fate is
    # their producer's next marker, jobs.transactions; group records) is kept whole, picked out again by the
    # same cheap test, so the rows fetched by position are about one per key.
    # A record newer than as_of is counted and checked, never replayed: its own group, away from the others.
    newest = with_reducible(records.where(plain)).groupBy(
        "coordinator_partition", "key", late.alias("after_as_of"), tombstone(),
        F.when(~F.col("reducible"), F.col("record_offset")).alias("own_offset"),
    ).agg(
        F.max("record_offset").alias("record_offset"),
        F.count(F.lit(1)).alias("records"),
        F.max("record_timestamp").alias("newest_timestamp"),
    )
    chosen = pin("chosen_records", newest.select(
        *POSITION, "records", "newest_timestamp", "after_as_of", F.col("own_offset").isNull().alias("reduced")))
    fetched = records.join(F.broadcast(chosen), POSITION, "left").where(~plain | F.col("records").isNotNull())
    kept = fetched.select(
        *records.columns,
        F.coalesce("records", F.lit(1).cast("bigint")).alias("records"),
        F.coalesce("newest_timestamp", "record_timestamp").alias("newest_timestamp"),
        F.coalesce("after_as_of", late).alias("after_as_of"),
        F.coalesce("reduced", F.lit(False)).alias("reduced"),
        F.lit(False).alias("readable"))
    return pin("reduced_log", check(kept))


def combine_partials(partial: DataFrame, combined: bool = False) -> DataFrame:
    """The reduction finished across tasks: each task kept its newest reducible commit per (coordinator
    partition, key, after_as_of), and its newest transactional commit per key and fate when it held their
    marker (jobs.partial_reduce); here the newest of those wins, standing for all their records, unless they come
    `combined` already (jobs.partial_reduce.combine, for tasks run outside Spark). The tasks checked every row
    but a control record's key (jobs.partial_reduce.checked): that error is added here."""
    rows = log_records(partial, keep=("records", "newest_timestamp", "after_as_of", "reduced", "readable", "fate",
                                      *CHECK_COLUMNS))
    rows = rows.withColumn("error", F.when(F.col("is_control"), control_error()).otherwise(F.col("error")))
    if not combined:
        folded = rows.where("reduced")
        newest = folded.groupBy("coordinator_partition", "key", "after_as_of", "fate", tombstone()).agg(
            F.max("record_offset").alias("record_offset"), F.sum("records").alias("records"),
            F.max("newest_timestamp").alias("newest_timestamp"))
        winners = folded.drop("records", "newest_timestamp").join(
            newest.drop("key", "after_as_of", "fate", "tombstone"), POSITION).select(rows.columns)
        rows = rows.where(~F.col("reduced")).unionByName(winners)
    return rows.drop("fate")


def scattered_bad_keys(reduced_log: DataFrame, records: DataFrame) -> DataFrame:
    """Every log record of a key that failed its check after being reduced (possible only for a corrupt key
    whose values look right): the quarantine keeps them all, whole. Empty on sound input."""
    bad = reduced_log.where(F.col("reduced") & F.col("error").isNotNull() & (F.col("records") > 1)).select(
        "coordinator_partition", "key").distinct()
    return check(records.join(F.broadcast(bad), ["coordinator_partition", "key"], "left_semi"))
