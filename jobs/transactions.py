"""Transactional offset commits (spec §7.2), resolved with set operations instead of a fold.

The broker keeps a transactional commit pending per producer until that producer's next marker in the
same coordinator partition: COMMIT applies it, unless the committed offset there was written by a newer
record; ABORT drops it. A tombstone, whoever wrote it, removes the committed offset and every pending
one on its key. So a transactional commit's fate is its producer's next marker, and the broker's final
state is still "the newest record per key wins", over fewer records:

* every non-transactional record, values and tombstones alike, applies at its own position;
* every tombstone applies at its own position, transactional or not;
* a transactional value applies only if its transaction committed, and then only if no record on its
  key is newer. A tombstone between it and the marker would have removed it while pending, and is
  newer; a non-transactional commit between them is newer too, and is what Kafka keeps.

Taking the newest of those records per key gives exactly the broker's result. Only transactional
records and markers are ordered (a window per producer); the bulk of the log is not.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from jobs.records import NO_PRODUCER


@dataclass(frozen=True)
class Transactions:
    effective: DataFrame  # the offset records that take part in "newest per key wins", with applied_offset
    open: DataFrame  # transactional commits still pending at the end, the newest per (key, producer)


def transaction_fates(offset_records: DataFrame, markers: DataFrame) -> DataFrame:
    """The transactional commits of `offset_records` (checked records of the offset types), each with `fate`:
    COMMIT or ABORT from its producer's next marker among `markers` (control records with a
    transaction_marker), null while its transaction is open, and `marker_offset`: that marker's position.

    The only ordered work on transactions (a window per producer): computed once per rebuild, for the state
    and the history alike."""
    pending = offset_records.where(_transactional())
    events = pending.withColumn("fate", F.lit(None).cast("string")).unionByName(
        markers.where(F.col("transaction_marker").isin("COMMIT", "ABORT"))
        .select("coordinator_partition", "producer_id", "record_offset", F.col("transaction_marker").alias("fate"),
                F.col("record_offset").alias("marker_offset")),
        allowMissingColumns=True,
    )
    # Newest first, so "the nearest later marker" is a running last-non-null: a linear pass per producer.
    later_first = Window.partitionBy("coordinator_partition", "producer_id").orderBy(F.desc("record_offset")) \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return events.select(
        *[c for c in events.columns if c not in ("fate", "marker_offset")],
        F.last("fate", ignorenulls=True).over(later_first).alias("fate"),
        F.last("marker_offset", ignorenulls=True).over(later_first).alias("marker_offset"),
    ).where(F.col("key").isNotNull())  # the commits, not the markers


def resolve_transactions(offset_records: DataFrame, fates: DataFrame, offset_key: Column) -> Transactions:
    """Split offset records by the fate of their transaction.

    `offset_records`: checked records of the offset types; `fates`: their transactional commits with their
    fates (`transaction_fates`); `offset_key`: the (group, topic, partition) identity of an offset record.
    """
    # A committed transactional commit is applied where its COMMIT marker is (the history's position).
    committed = fates.where(F.col("fate") == "COMMIT").withColumnRenamed("marker_offset", "applied_offset").drop("fate")
    effective = offset_records.where(~_transactional()).withColumn(
        "applied_offset", F.col("record_offset")).unionByName(committed)

    still_open = fates.where(F.col("fate").isNull()).drop("fate", "marker_offset").withColumn("offset_key", offset_key)
    # The broker's pending map holds one commit per producer and key: the newest one.
    newest = still_open.groupBy("coordinator_partition", "offset_key", "producer_id").agg(
        F.max("record_offset").alias("record_offset"))
    last_tombstone = offset_records.where(F.col("value").isNull()).groupBy(
        "coordinator_partition", offset_key.alias("offset_key")).agg(F.max("record_offset").alias("tombstone_offset"))
    open_commits = (
        still_open.join(newest, ["coordinator_partition", "offset_key", "producer_id", "record_offset"], "left_semi")
        .join(last_tombstone, ["coordinator_partition", "offset_key"], "left")
        # A later tombstone on the key removed it from every producer's pending map.
        .where(F.col("tombstone_offset").isNull() | (F.col("record_offset") > F.col("tombstone_offset")))
        .drop("offset_key", "tombstone_offset")
    )
    return Transactions(effective=effective, open=open_commits)


def _transactional() -> Column:
    """A commit written in a transaction (its tombstones apply where they are, like anyone's)."""
    return (F.col("producer_id") != NO_PRODUCER) & F.col("value").isNotNull()
