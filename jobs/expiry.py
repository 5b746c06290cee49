"""Offset retention (spec §8), evaluated once at as_of on the replayed state.

The broker's cleanup only considers offsets of topics the group is not subscribed to, then applies the
group's expiration condition (OffsetExpirationConditionImpl); an explicit v1 expireTimestamp replaces
the retention deadline for those candidates. Expiry compares `as_of >= deadline`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.decode import CONSUMER_PROTOCOL

GROUP_KEY = ["coordinator_partition", "group_id"]


@dataclass(frozen=True)
class ExpiredState:
    offsets: DataFrame  # live offsets with expires_at_ms (null: not expiring now)
    expired: DataFrame  # offsets whose deadline has passed, with expired_at_ms
    groups: DataFrame  # groups that still exist, with offset_count


def retention_base() -> Column:
    """The time an offset's retention is measured from, or null when the group's condition forbids expiry."""
    protocol_type = F.col("protocol_type")
    state = F.col("state")
    group_type = F.col("group_type")
    commit_time = F.col("commit_timestamp_ms")
    return (
        # Share groups hold no committed offsets; Kafka's offsetExpirationCondition throws for them.
        F.when(group_type == "share", F.lit(None).cast("bigint"))
        # Consumer (KIP-848) and streams groups: commit time, in any state (unsubscribed topics only).
        .when(group_type != "classic", commit_time)
        # Simple groups (no protocol type): commit time.
        .when(protocol_type.isNull(), commit_time)
        # Empty classic groups: from when the group became Empty (v2+), else the commit time.
        .when(state == "Empty", F.coalesce(F.col("current_state_timestamp_ms"), commit_time))
        # Stable consumer-protocol groups with a known subscription: commit time (unsubscribed topics only).
        .when((protocol_type == CONSUMER_PROTOCOL) & (state == "Stable") & F.col("subscribed_topics").isNotNull(), commit_time)
        # Anything else (Stable connect groups, unknown subscriptions): no expiry.
    )


def is_candidate() -> Column:
    """Spec §8.3: only topics the group is not subscribed to are looked at."""
    subscribed = F.coalesce(F.array_contains(F.col("subscribed_topics"), F.col("topic")), F.lit(False))
    return retention_base().isNotNull() & ~subscribed


def apply_expiry(offsets: DataFrame, groups: DataFrame, as_of_ms: int, retention_ms: int,
                 pending: DataFrame | None = None,
                 pin: Callable[[str, DataFrame], DataFrame] | None = None) -> ExpiredState:
    """Split offsets into live and expired at as_of, and drop Empty groups left with no offsets (§8.4).

    `pending`: open transactional commits. An offset with one on its partition never expires, and a group
    with any is never deleted (OffsetMetadataManager.cleanupExpiredOffsets). `pin(name, df)`: materialises the
    judged offsets, which the live and expired offsets and the surviving groups all read (jobs.pipeline).
    """
    group_cols = groups.select(
        "coordinator_partition", "group_id", "group_type", "protocol_type", "state", "current_state_timestamp_ms",
        "subscribed_topics",
    )
    base = retention_base()
    explicit = F.col("expire_timestamp_ms")
    judged = offsets.join(group_cols, ["coordinator_partition", "group_id"], "left")
    if pending is not None:
        open_partitions = pending.select(*GROUP_KEY, "topic", "partition").distinct().withColumn(
            "in_open_transaction", F.lit(True))
        judged = judged.join(open_partitions, [*GROUP_KEY, "topic", "partition"], "left")
    else:
        judged = judged.withColumn("in_open_transaction", F.lit(None).cast("boolean"))
    candidate = is_candidate() & F.col("in_open_transaction").isNull()
    judged = judged.withColumn(
        "deadline_ms", F.when(candidate, F.coalesce(explicit, F.try_add(base, F.lit(retention_ms))))
    )
    # Kafka's own test (OffsetExpirationConditionImpl): now >= expireTimestamp, else now - base >= retention,
    # in Java longs. A subtraction that overflows wraps negative there (never expired): null here, likewise.
    kafka_condition = F.when(explicit.isNotNull(), F.lit(as_of_ms) >= explicit).otherwise(
        F.try_subtract(F.lit(as_of_ms), base) >= F.lit(retention_ms)
    )
    judged = judged.withColumn("expired_now", candidate & F.coalesce(kafka_condition, F.lit(False))).drop(
        "group_type", "protocol_type", "state", "current_state_timestamp_ms", "subscribed_topics",
        "in_open_transaction")
    if pin is not None:
        judged = pin("judged_offsets", judged)
    expired_now = F.col("expired_now")
    live = judged.where(~expired_now).withColumnRenamed("deadline_ms", "expires_at_ms").drop("expired_now")
    expired = judged.where(expired_now).withColumn("expires_at_ms", F.col("deadline_ms")).withColumnRenamed(
        "deadline_ms", "expired_at_ms"
    ).drop("expired_now")

    counts = live.groupBy(*GROUP_KEY).agg(F.count(F.lit(1)).cast("int").alias("offset_count"))
    surviving = groups.join(counts, GROUP_KEY, "left").withColumn("offset_count", F.coalesce("offset_count", F.lit(0)))
    # The cleanup deletes an Empty group once no committed offsets and no open transactions remain;
    # share groups are never deleted this way (ShareGroup.shouldExpire is false).
    deletable = (F.col("state") == "Empty") & (F.col("offset_count") == 0) & (F.col("group_type") != "share")
    if pending is not None:
        surviving = surviving.join(pending.select(*GROUP_KEY).distinct().withColumn("has_open_transaction", F.lit(True)),
                                   GROUP_KEY, "left")
        deletable = deletable & F.col("has_open_transaction").isNull()
    surviving = surviving.where(~deletable).drop("has_open_transaction")
    return ExpiredState(offsets=live, expired=expired, groups=surviving)
