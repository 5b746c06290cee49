"""Replay per coordinator partition, as the broker's load does (spec §7.2-§7.3), with native operations.

Without transaction markers (a read_committed dump), the broker's in-order fold over offset commits and
classic group records ends in "the newest record per key wins; a tombstone deletes" (spec §7.7). So the
fold becomes a reduction on raw key bytes per coordinator partition, and only the winners are decoded.

Input: the checked records (jobs.pipeline), valid and at or before as_of, with columns
coordinator_partition, record_offset, record_timestamp, key, value, record_type, group_id.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs import decode
from offsets_codec import REGISTRY


def record_types(family: str) -> list[int]:
    """Record type ids of a group family, from the codec's registry (the only home of type numbers)."""
    return sorted(t for t, rt in REGISTRY.items() if rt.group_family == family)


OFFSET_TYPES = record_types("offsets")
CLASSIC_TYPES = record_types("classic")


@dataclass(frozen=True)
class ReplayedState:
    """The state a coordinator would hold after loading the log up to as_of, before expiry."""

    offsets: DataFrame  # live committed offsets, one row per (group, topic, partition)
    groups: DataFrame  # classic and simple groups, one row per group id (members as an array)
    activity: DataFrame  # the newest record about each group: last_record_offset, last_record_timestamp


def last_writes(records: DataFrame, record_key: Column) -> DataFrame:
    """The newest record (highest offset) per coordinator partition and key; tombstones included.

    A max over the offset alone keeps the aggregation buffer fixed-width (a hash aggregate, no sort of
    the log); the winning records are then fetched whole by (coordinator partition, offset).
    """
    newest = records.groupBy("coordinator_partition", record_key.alias("record_key")).agg(
        F.max("record_offset").alias("record_offset")
    )
    return records.join(newest.drop("record_key"), ["coordinator_partition", "record_offset"], "left_semi")


def offset_winners(records: DataFrame) -> DataFrame:
    """Spec §7.2 without transactions: the newest offset record per key (a tombstone means deleted)."""
    # Types 0 and 1 share the key layout and the broker converts type 0 to type 1 before replay, so the
    # key bytes after the 2-byte type prefix identify (group, topic, partition) whichever type wrote it.
    offset_records = records.where(F.col("record_type").isin(OFFSET_TYPES))
    return last_writes(offset_records, F.expr("substring(key, 3)"))


def committed_offsets(winners: DataFrame) -> DataFrame:
    """The live offsets among the offset winners, decoded."""
    return winners.where(F.col("value").isNotNull()).select(
        "coordinator_partition",
        "group_id",
        "record_offset",
        "record_timestamp",
        decode.offset_commit(F.col("key"), F.col("value")).alias("c"),
    ).select("coordinator_partition", "group_id", "record_offset", "record_timestamp", "c.*")


def classic_group_records(records: DataFrame) -> DataFrame:
    """Spec §7.3: the newest type-2 record per group; a value replaces the group, a tombstone removes it."""
    winners = last_writes(records.where(F.col("record_type").isin(CLASSIC_TYPES)), F.col("group_id"))
    decoded = decode.group_metadata(F.col("record_type"), F.col("value"))
    return winners.select(
        "coordinator_partition",
        "group_id",
        F.col("record_offset").alias("metadata_record_offset"),
        "record_timestamp",
        F.col("value").isNull().alias("is_tombstone"),
        decoded.alias("g"),  # null for a tombstone
    )


def group_activity(records: DataFrame, offset_winners: DataFrame, metadata: DataFrame) -> DataFrame:
    """The newest record about each group (metadata or offsets, any family).

    A group's newest record is the newest record of one of its keys, so the per-key winners (tombstones
    included) stand in for the whole log of their families; other families are taken as they are.
    """
    reduced = OFFSET_TYPES + CLASSIC_TYPES
    columns = ["coordinator_partition", "group_id", "record_offset", "record_timestamp"]
    candidates = (
        offset_winners.select(columns)
        .unionByName(metadata.select(*columns[:2], F.col("metadata_record_offset").alias("record_offset"), columns[3]))
        .unionByName(records.where(~F.col("record_type").isin(reduced) & F.col("group_id").isNotNull()).select(columns))
    )
    return candidates.groupBy("coordinator_partition", "group_id").agg(
        F.max("record_offset").alias("last_record_offset"),
        F.max_by("record_timestamp", "record_offset").alias("last_record_timestamp"),
    )


def replay(records: DataFrame) -> ReplayedState:
    """Committed offsets plus the classic and simple groups that hold them."""
    # One row per key: cached, as the groups, the offsets and the group activity all read them.
    winners = offset_winners(records).persist(StorageLevel.MEMORY_AND_DISK)
    offsets = committed_offsets(winners)
    metadata = classic_group_records(records).persist(StorageLevel.MEMORY_AND_DISK)

    classic = metadata.where(~F.col("is_tombstone")).select(
        "coordinator_partition",
        "group_id",
        F.col("g.protocol_type").alias("protocol_type"),
        F.when(F.size("g.members") == 0, "Empty").otherwise("Stable").alias("state"),
        F.col("g.generation").alias("generation"),
        F.col("g.protocol").alias("protocol"),
        F.col("g.leader_id").alias("leader_id"),
        F.col("g.current_state_timestamp_ms").alias("current_state_timestamp_ms"),
        F.col("g.members").alias("members"),
        F.col("g.subscribed_topics").alias("subscribed_topics"),
        "metadata_record_offset",
        F.lit(False).alias("is_orphan"),
    )

    # A group id with offsets but no live type-2 record is a "simple" group (state Empty, generation 0,
    # no protocol type). When its newest type-2 record is a tombstone and no commit came after it, the
    # offsets are orphans the pre-4.0 coordinator loaded as a simple group (contract, "orphan_groups").
    offset_groups = offsets.groupBy("coordinator_partition", "group_id").agg(
        F.max("record_offset").alias("newest_commit_offset")
    )
    tombstones = metadata.where(F.col("is_tombstone")).select(
        "coordinator_partition", "group_id", F.col("metadata_record_offset").alias("tombstone_offset")
    )
    simple = (
        offset_groups.join(classic.select("coordinator_partition", "group_id"), ["coordinator_partition", "group_id"], "left_anti")
        .join(tombstones, ["coordinator_partition", "group_id"], "left")
        .select(
            "coordinator_partition",
            "group_id",
            F.lit(None).cast("string").alias("protocol_type"),
            F.lit("Empty").alias("state"),
            F.lit(0).alias("generation"),
            F.lit(None).cast("string").alias("protocol"),
            F.lit(None).cast("string").alias("leader_id"),
            F.lit(None).cast("bigint").alias("current_state_timestamp_ms"),
            F.array().cast(classic.schema["members"].dataType).alias("members"),
            F.array().cast("array<string>").alias("subscribed_topics"),
            F.lit(None).cast("bigint").alias("metadata_record_offset"),
            F.coalesce(F.col("tombstone_offset") > F.col("newest_commit_offset"), F.lit(False)).alias("is_orphan"),
        )
    )
    groups = classic.unionByName(simple).withColumn("group_type", F.lit("classic"))
    return ReplayedState(offsets=offsets, groups=groups, activity=group_activity(records, winners, metadata))
