"""Replay per coordinator partition, as the broker's load does (spec §7.2-§7.3), with native operations.

The broker's in-order fold over offset commits and classic group records ends in "the newest record per
key wins; a tombstone deletes" (spec §7.7), once transactional commits are sorted by the fate of their
transaction (jobs.transactions). So the fold becomes a reduction on raw key bytes per coordinator
partition, and only the winners are decoded.

Input: the checked records (jobs.pipeline), valid and at or before as_of, with columns
coordinator_partition, record_offset, record_timestamp, key, value, record_type, group_id.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs import decode, native
from jobs.modern import CLASSIC, GROUP_KEY, MEMBER_KEY, replay_modern
from jobs.transactions import resolve_transactions
from offsets_codec import REGISTRY

# Member state names by family and code (modern/MemberState.java, streams/MemberState.java).
MEMBER_STATES = {
    **{f"{f}:{c}": n for f in ("consumer", "share") for c, n in
       ((0, "STABLE"), (1, "UNREVOKED_PARTITIONS"), (2, "UNRELEASED_PARTITIONS"), (127, "UNKNOWN"))},
    **{f"streams:{c}": n for c, n in ((1, "STABLE"), (2, "UNREVOKED_TASKS"), (3, "UNRELEASED_TASKS"), (127, "UNKNOWN"))},
}


def record_types(family: str) -> list[int]:
    """Record type ids of a group family, from the codec's registry (the only home of type numbers)."""
    return sorted(t for t, rt in REGISTRY.items() if rt.group_family == family)


OFFSET_TYPES = record_types("offsets")
# Types 0 and 1 share the key layout and the broker converts type 0 to type 1 before replay, so the key
# bytes after the 2-byte type prefix identify (group, topic, partition) whichever type wrote it.
def offset_key() -> Column:
    return F.substring(F.col("key"), 3, 1 << 30)
CLASSIC_TYPES = record_types("classic")


@dataclass(frozen=True)
class ReplayedState:
    """The state a coordinator would hold after loading the log up to as_of, before expiry."""

    offsets: DataFrame  # live committed offsets, one row per (group, topic, partition)
    pending: DataFrame  # transactional commits of transactions still open, one row per (offset key, producer)
    groups: DataFrame  # groups of every family, one row per group id
    activity: DataFrame  # the newest record about each group: last_record_offset, last_record_timestamp
    members: DataFrame  # members of those groups (classic and modern), group_members columns
    targets: DataFrame  # modern target assignments, one row per (member, topic, partition)
    topologies: DataFrame  # streams topologies, one row per subtopology
    identity: DataFrame  # who holds each group id
    violations: DataFrame  # (group_id, coordinator_partition, reason): sequences Kafka's strict replay refuses


def last_writes(records: DataFrame, record_key: Column) -> DataFrame:
    """The newest record (highest offset) per coordinator partition and key; tombstones included.

    A max over the offset alone keeps the aggregation buffer fixed-width (a hash aggregate, no sort of
    the log); the winning records are then fetched whole by (coordinator partition, offset).
    """
    newest = records.groupBy("coordinator_partition", record_key.alias("record_key")).agg(
        F.max("record_offset").alias("record_offset")
    )
    return records.join(newest.drop("record_key"), ["coordinator_partition", "record_offset"], "left_semi")


def offset_winners(records: DataFrame, transactions: bool = True) -> tuple[DataFrame, DataFrame]:
    """Spec §7.2: (the newest effective offset record per key, a tombstone meaning deleted; the commits of
    transactions still open). `transactions=False` (the log has no transactional record and no marker, as
    the run's counts tell) skips their resolution: every record is effective and nothing is open."""
    offset_records = records.where(F.col("record_type").isin(OFFSET_TYPES))
    if not transactions:
        return last_writes(offset_records, offset_key()), offset_records.limit(0)
    markers = records.where(F.col("transaction_marker").isNotNull())
    transactions = resolve_transactions(offset_records, markers, offset_key())
    return last_writes(transactions.effective, offset_key()), transactions.open


def committed_offsets(winners: DataFrame) -> DataFrame:
    """The live offsets among the offset winners (or open transactional commits), decoded: natively where the
    native reader proves the record, by the Python codec otherwise."""
    key, value = native.offset_key(F.col("key")), native.offset_value(F.col("value"))
    commits = native.with_read(winners.where(F.col("value").isNotNull()), [key, value], {
        "proven": key.ok & value.ok, "native_commit": native.offset_commit_struct(key, value)})
    unproven = ~F.col("proven")
    python = decode.offset_commit(F.when(unproven, F.col("key")), F.when(unproven, F.col("value")))
    return commits.select(
        "coordinator_partition",
        "group_id",
        "record_offset",
        "record_timestamp",
        "producer_id",
        "producer_epoch",
        F.when(F.col("proven"), F.col("native_commit")).otherwise(python).alias("c"),
    ).select("coordinator_partition", "group_id", "record_offset", "record_timestamp", "producer_id",
             "producer_epoch", "c.*")


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


def replay(records: DataFrame, topic_ids: DataFrame | None = None, transactions: bool = True) -> ReplayedState:
    """Committed offsets plus the groups of every family that hold them, and their members."""
    # One row per key: cached, as the groups, the offsets and the group activity all read them.
    winners, open_commits = offset_winners(records, transactions)
    winners = winners.persist(StorageLevel.MEMORY_AND_DISK)
    offsets = committed_offsets(winners)
    pending = committed_offsets(open_commits)
    metadata = classic_group_records(records).persist(StorageLevel.MEMORY_AND_DISK)
    modern = replay_modern(records, metadata, last_writes)
    identity = modern.identity

    held_by_classic = identity.where(F.col("holder") == CLASSIC).select(*GROUP_KEY)
    classic = metadata.where(~F.col("is_tombstone")).join(held_by_classic, GROUP_KEY, "left_semi")
    classic_groups = classic.select(
        *GROUP_KEY,
        F.lit(CLASSIC).alias("group_type"),
        F.col("g.protocol_type").alias("protocol_type"),
        F.when(F.size("g.members") == 0, "Empty").otherwise("Stable").alias("state"),
        F.col("g.generation").alias("generation"),
        F.col("g.protocol").alias("protocol"),
        F.col("g.leader_id").alias("leader_id"),
        F.col("g.current_state_timestamp_ms").alias("current_state_timestamp_ms"),
        F.size("g.members").cast("int").alias("member_count"),
        F.col("g.subscribed_topics").alias("subscribed_topics"),
        "metadata_record_offset",
    )
    modern_groups = modern.groups.select(
        *GROUP_KEY, "group_type", "protocol_type", "state", "generation",
        F.lit(None).cast("string").alias("protocol"), F.lit(None).cast("string").alias("leader_id"),
        F.lit(None).cast("bigint").alias("current_state_timestamp_ms"), "member_count", "subscribed_topics",
        "metadata_record_offset", "target_assignment_epoch", "topology_epoch",
    )

    # A group id with offsets that no family holds is a "simple" group (state Empty, generation 0, no protocol
    # type). When the newest record that removed its group (a type-2 or modern group tombstone) came after
    # every commit, the offsets are orphans the pre-4.0 coordinator loaded as a simple group ("orphan_groups").
    # Open transactional commits count too: their replay created the group, and they keep it (spec §8.4).
    offset_groups = offsets.select(*GROUP_KEY, "record_offset").unionByName(
        pending.select(*GROUP_KEY, "record_offset")).groupBy(*GROUP_KEY).agg(
        F.max("record_offset").alias("newest_commit_offset"))
    simple = (
        offset_groups.join(identity.where(F.col("holder").isNotNull()), GROUP_KEY, "left_anti")
        .join(identity.select(*GROUP_KEY, "newest_identity_offset"), GROUP_KEY, "left")
        .select(
            *GROUP_KEY,
            F.lit(CLASSIC).alias("group_type"),
            F.lit("Empty").alias("state"),
            F.lit(0).alias("generation"),
            F.lit(0).alias("member_count"),
            F.array().cast("array<string>").alias("subscribed_topics"),
            F.coalesce(F.col("newest_identity_offset") > F.col("newest_commit_offset"), F.lit(False)).alias("is_orphan"),
        )
    )
    groups = classic_groups.unionByName(modern_groups, allowMissingColumns=True).unionByName(
        simple, allowMissingColumns=True).withColumn("is_orphan", F.coalesce("is_orphan", F.lit(False)))

    names = topic_names(modern.topic_names, offsets, topic_ids)
    members = classic_members(classic).unionByName(
        modern_members(modern.members, names, modern.topologies), allowMissingColumns=True)
    targets = name_partitions(modern.targets, names, modern.topologies, MEMBER_KEY + ["assignment_epoch"])
    return ReplayedState(offsets=offsets, pending=pending, groups=groups, activity=group_activity(records, winners, metadata),
                         members=members, targets=targets, topologies=modern.topologies, identity=identity,
                         violations=_violations(identity, modern.violations))


def _violations(identity: DataFrame, tombstones: DataFrame) -> DataFrame:
    """Cross-family conflicts and premature group tombstones, with a reason each."""
    conflicts = identity.where(F.col("conflict_with").isNotNull()).select(
        "group_id", "coordinator_partition",
        F.concat(F.lit("a "), F.col("holder"), F.lit(" group record arrived while a "), F.col("conflict_with"),
                 F.lit(" group held the id (Kafka's replay would fail); the later family was kept")).alias("reason"))
    return conflicts.unionByName(tombstones)


def classic_members(classic: DataFrame) -> DataFrame:
    """Members of classic groups, from their group record."""
    return classic.select(*GROUP_KEY, F.explode("g.members").alias("m")).select(
        *GROUP_KEY, "m.*",
        F.lit(None).cast("string").alias("rack_id"),  # classic members carry no rack in the group record
        F.lit(None).cast("int").alias("member_epoch"),
    )


def topic_names(record_names: DataFrame, offsets: DataFrame, topic_ids: DataFrame | None) -> DataFrame:
    """topic_id -> topic from the --topic-ids map and from records that carry both (spec §3, "Topic-ID references")."""
    pairs = record_names.unionByName(offsets.where(F.col("topic_id").isNotNull()).select("topic_id", "topic"))
    if topic_ids is not None:
        pairs = pairs.unionByName(topic_ids.select("topic_id", "topic"))
    return pairs.groupBy("topic_id").agg(F.max("topic").alias("topic"))


def name_partitions(rows: DataFrame, names: DataFrame, topologies: DataFrame, keep: list[str]) -> DataFrame:
    """Rows with topic_id or subtopology_id -> rows with a topic name (null when the id is unknown).

    A streams task (subtopology, partition) stands for that partition of each of the subtopology's source topics.
    """
    by_id = rows.where(F.col("subtopology_id").isNull()).join(F.broadcast(names), "topic_id", "left")
    sources = topologies.select(*GROUP_KEY, "subtopology_id", F.explode("source_topics").alias("topic"))
    by_task = rows.where(F.col("subtopology_id").isNotNull()).drop("topic_id").join(
        sources, GROUP_KEY + ["subtopology_id"], "left").withColumn("topic_id", F.lit(None).cast("string"))
    return by_id.select(*keep, "topic", "partition", "topic_id").unionByName(
        by_task.select(*keep, "topic", "partition", "topic_id"))


def modern_members(members: DataFrame, names: DataFrame, topologies: DataFrame) -> DataFrame:
    """Modern members with their current assignment named: assigned partitions (topic, partition, topic_id)
    and a detail column adding each partition's assignment epoch and the partitions pending revocation."""
    def partitions(column: str, pending: bool) -> DataFrame:
        rows = members.select(*MEMBER_KEY, F.explode(column).alias("p")).select(*MEMBER_KEY, "p.*")
        return rows.withColumn("pending_revocation", F.lit(pending))

    exploded = partitions("assigned", False).unionByName(partitions("pending_revocation", True))
    named = name_partitions(exploded, names, topologies, MEMBER_KEY + ["assignment_epoch", "pending_revocation"])
    assigned = named.groupBy(*MEMBER_KEY).agg(
        F.array_sort(F.collect_list(F.when(~F.col("pending_revocation"), F.struct("topic", "partition", "topic_id"))))
        .alias("assigned_partitions"),
        F.array_sort(F.collect_list(F.struct("topic", "partition", "topic_id", "assignment_epoch", "pending_revocation")))
        .alias("current_assignment_detail"),
    )
    no_partitions = F.array().cast("array<struct<topic:string,partition:int,topic_id:string>>")
    state_names = F.create_map(*[F.lit(x) for kv in MEMBER_STATES.items() for x in kv])
    return members.join(assigned, MEMBER_KEY, "left").select(
        *MEMBER_KEY, "group_instance_id", "client_id", "client_host", "rack_id", "session_timeout_ms",
        "rebalance_timeout_ms", "subscribed_topics", F.coalesce("assigned_partitions", no_partitions).alias(
            "assigned_partitions"),
        "member_epoch", "previous_member_epoch", "current_assignment_detail",
        F.element_at(state_names, F.concat_ws(":", "family", F.col("member_state").cast("string"))).alias("member_state"),
        "server_assignor", "subscribed_topic_regex", "is_classic_member",
    )
