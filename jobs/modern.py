"""KIP-848 consumer, KIP-932 share and KIP-1071 streams groups (spec §7.4-§7.5), with native operations.

The broker folds these records in log order. The fold reduces to three set-based steps:

1. Identity. Per group id, the newest *identity event* decides who holds it: a value record of a family
   creates or keeps that family's group (every value record creates a missing group), a type-2 value makes it
   classic, and a type-2 tombstone or a family's group-level tombstone removes it. The holder's current
   incarnation is its records after the newest event of another family (or its own group tombstone).
   Kafka throws when a modern record arrives for an id held by another non-simple family; here the later
   family wins and the group is reported as a conflict (contract, "Semantics").
2. Within the incarnation, the newest record per key wins (all these records are last-value records).
3. Members, assignments, regexes and topologies are assembled from the decoded winners; the state is derived
   as ConsumerGroup / ShareGroup / StreamsGroup.maybeUpdateGroupState do.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs import decode
from offsets_codec import REGISTRY, record_type_named

FAMILIES = ("consumer", "share", "streams")
CLASSIC = "classic"
GROUP_KEY = ["coordinator_partition", "group_id"]
MEMBER_KEY = GROUP_KEY + ["member_id"]
# Member state codes: consumer and share STABLE is 0, streams STABLE is 1 (streams/MemberState.java).
STABLE_STATE = {"consumer": 0, "share": 0, "streams": 1}


def _types(*names: str) -> list[int]:
    return sorted(record_type_named(n) for n in names)


MODERN_TYPES = sorted(t for t, rt in REGISTRY.items() if rt.group_family in FAMILIES)
GROUP_METADATA = _types("ConsumerGroupMetadata", "ShareGroupMetadata", "StreamsGroupMetadata")
TARGET_METADATA = _types("ConsumerGroupTargetAssignmentMetadata", "ShareGroupTargetAssignmentMetadata",
                         "StreamsGroupTargetAssignmentMetadata")
MEMBER_METADATA = _types("ConsumerGroupMemberMetadata", "ShareGroupMemberMetadata", "StreamsGroupMemberMetadata")
CURRENT_ASSIGNMENT = _types("ConsumerGroupCurrentMemberAssignment", "ShareGroupCurrentMemberAssignment",
                            "StreamsGroupCurrentMemberAssignment")
TARGET_MEMBER = _types("ConsumerGroupTargetAssignmentMember", "ShareGroupTargetAssignmentMember",
                       "StreamsGroupTargetAssignmentMember")
REGULAR_EXPRESSION = _types("ConsumerGroupRegularExpression")
TOPOLOGY = _types("StreamsGroupTopology")
TOPIC_NAMES = _types("ConsumerGroupPartitionMetadata", "ShareGroupPartitionMetadata",
                     "ShareGroupStatePartitionMetadata", "StreamsGroupPartitionMetadata")


@dataclass(frozen=True)
class ModernState:
    identity: DataFrame  # per group: holder (classic/consumer/share/streams or null), start, conflict
    violations: DataFrame  # (group, reason) for sequences Kafka's strict replay refuses
    groups: DataFrame  # modern groups held at as_of
    members: DataFrame  # their members (assigned partitions by topic id or subtopology, not yet named)
    targets: DataFrame  # target assignment rows
    topologies: DataFrame  # streams topologies, one row per subtopology
    topic_names: DataFrame  # (topic_id, topic) pairs the records themselves carry


def family_of(record_type: Column) -> Column:
    """The group family of a record type, from the codec's registry."""
    pairs = [x for t, rt in sorted(REGISTRY.items()) for x in (F.lit(t), F.lit(rt.group_family))]
    return F.element_at(F.create_map(*pairs), record_type)


def identity(modern_records: DataFrame, classic_winners: DataFrame) -> DataFrame:
    """Who holds each group id, where its current incarnation starts, and whether Kafka would have thrown."""
    is_group_tombstone = F.col("value").isNull() & F.col("record_type").isin(GROUP_METADATA)
    events = modern_records.where(F.col("value").isNotNull() | is_group_tombstone).select(
        *GROUP_KEY, "family", F.col("value").isNotNull().alias("is_value"), "record_offset")
    classic = classic_winners.select(*GROUP_KEY, F.lit(CLASSIC).alias("family"), (~F.col("is_tombstone")).alias("is_value"),
                                     F.col("metadata_record_offset").alias("record_offset"))
    latest = {}
    for family in (CLASSIC,) + FAMILIES:
        for kind, flag in (("value", True), ("tombstone", False)):
            latest[(family, kind)] = F.max(F.when((F.col("family") == family) & (F.col("is_value") == flag),
                                                  F.col("record_offset"))).alias(f"{family}_{kind}")
    per_group = events.unionByName(classic).groupBy(*GROUP_KEY).agg(*latest.values())

    def col(family: str, kind: str) -> Column:
        return F.col(f"{family}_{kind}")

    newest = F.greatest(*[col(f, k) for f, k in latest])
    holder = reduce(lambda acc, f: acc.when(newest == col(f, "value"), F.lit(f)),
                    FAMILIES, F.when(newest == col(CLASSIC, "value"), F.lit(CLASSIC)))
    # A family's incarnation starts after the newest event of any other family, or its own group tombstone.
    starts = {f: F.coalesce(F.greatest(col(f, "tombstone"), *[col(o, k) for o, k in latest if o != f]), F.lit(-1))
              for f in FAMILIES}
    start = reduce(lambda acc, f: acc.when(F.col("holder") == f, starts[f]), FAMILIES[1:],
                   F.when(F.col("holder") == FAMILIES[0], starts[FAMILIES[0]]))
    # Kafka throws when a modern record arrives while another non-simple family holds the id: the event at the
    # start of the incarnation is then a value of another family (a proper conversion ends it with tombstones).
    conflict = reduce(lambda acc, o: acc.when((F.col("holder") != o) & (F.col("start") == col(o, "value")), F.lit(o)),
                      (CLASSIC,) + FAMILIES[1:],
                      F.when((F.col("holder") != FAMILIES[0]) & (F.col("start") == col(FAMILIES[0], "value")),
                             F.lit(FAMILIES[0])))
    return (
        per_group.withColumn("newest_identity_offset", newest)
        .withColumn("holder", holder)
        .withColumn("start", start)
        .withColumn("conflict_with", F.when(F.col("holder").isin(*FAMILIES), conflict))
        .select(*GROUP_KEY, "holder", "start", "conflict_with", "newest_identity_offset")
    )


def replay_modern(records: DataFrame, classic_winners: DataFrame, last_writes) -> ModernState:
    """Modern groups as the coordinator holds them after loading `records` (valid, at or before as_of)."""
    modern_records = records.where(F.col("record_type").isin(MODERN_TYPES)).withColumn(
        "family", family_of(F.col("record_type")))
    ident = identity(modern_records, classic_winners).persist(StorageLevel.MEMORY_AND_DISK)
    held = ident.where(F.col("holder").isin(*FAMILIES)).select(*GROUP_KEY, "holder", "start")
    incarnation = modern_records.join(F.broadcast(held), GROUP_KEY).where(
        (F.col("family") == F.col("holder")) & (F.col("record_offset") > F.col("start")))
    winners = last_writes(incarnation, F.col("key")).select(
        *GROUP_KEY, "family", "record_type", "record_offset", F.col("value").isNull().alias("is_tombstone"),
        decode.modern(F.col("key"), F.col("value")).alias("m"),
    ).persist(StorageLevel.MEMORY_AND_DISK)

    def of(types: list[int], values_only: bool = True) -> DataFrame:
        chosen = winners.where(F.col("record_type").isin(types))
        return chosen.where(~F.col("is_tombstone")) if values_only else chosen

    group_meta = of(GROUP_METADATA).select(*GROUP_KEY, F.col("m.epoch").alias("group_epoch"),
                                           F.col("m.validated_topology_epoch").alias("validated_topology_epoch"),
                                           F.col("record_offset").alias("metadata_record_offset"))
    target_meta = of(TARGET_METADATA, values_only=False).select(
        *GROUP_KEY, F.when(F.col("is_tombstone"), F.lit(-1)).otherwise(F.col("m.assignment_epoch")).alias("target_epoch"))
    topology = of(TOPOLOGY).select(*GROUP_KEY, F.col("m.epoch").alias("topology_epoch"),
                                   F.col("m.subtopologies").alias("subtopologies"))
    regexes = of(REGULAR_EXPRESSION).select(*GROUP_KEY, F.col("m.regex").alias("regex"),
                                            F.col("m.regex_topics").alias("regex_topics"))

    members = _members(of(MEMBER_METADATA, values_only=False), of(CURRENT_ASSIGNMENT, values_only=False), held)
    members = _subscriptions(members, regexes, topology)
    groups = _groups(held, group_meta, target_meta, topology, regexes, members)
    targets = of(TARGET_MEMBER).select(*GROUP_KEY, F.col("m.member_id").alias("member_id"),
                                       F.explode("m.assigned").alias("p"))
    targets = targets.join(groups.select(*GROUP_KEY, "target_assignment_epoch"), GROUP_KEY).select(
        *MEMBER_KEY, "p.topic_id", "p.subtopology_id", "p.partition",
        F.col("target_assignment_epoch").alias("assignment_epoch"))
    topologies = topology.select(*GROUP_KEY, "topology_epoch", F.explode("subtopologies").alias("s")).select(
        *GROUP_KEY, "topology_epoch", "s.*")
    topic_names = of(TOPIC_NAMES).select(F.explode("m.topic_names").alias("t")).select("t.topic_id", "t.topic")
    return ModernState(ident, tombstone_violations(modern_records), groups, members, targets, topologies, topic_names)


def tombstone_violations(modern_records: DataFrame) -> DataFrame:
    """Groups deleted while Kafka's replay would refuse it (ConsumerGroup/StreamsGroup tombstone checks).

    A group-level tombstone must come after the tombstones of every member, target assignment and the target
    assignment metadata; whatever is still live (its newest record before the tombstone is a value) would make
    the broker's load fail. The group is removed anyway and reported.
    """
    family_key = GROUP_KEY + ["family"]
    tombstones = modern_records.where(F.col("value").isNull() & F.col("record_type").isin(GROUP_METADATA)).groupBy(
        *family_key).agg(F.max("record_offset").alias("tombstone_offset"))
    before = modern_records.join(F.broadcast(tombstones), family_key).where(
        F.col("record_offset") < F.col("tombstone_offset"))
    live = before.groupBy(*family_key, "key").agg(
        F.max_by(F.col("value").isNotNull(), "record_offset").alias("live"),
        F.max_by("record_type", "record_offset").alias("record_type"),
    ).where("live")
    what = (F.when(F.col("record_type").isin(MEMBER_METADATA), "members")
            .when(F.col("record_type").isin(TARGET_MEMBER), "target assignments")
            .when(F.col("record_type").isin(TARGET_METADATA), "its target assignment metadata"))
    return live.where(what.isNotNull()).groupBy(*family_key).agg(
        F.array_sort(F.collect_set(what)).alias("remaining")).select(
        "group_id", "coordinator_partition",
        F.concat(F.lit("a "), F.col("family"), F.lit(" group tombstone while "), F.concat_ws(" and ", "remaining"),
                 F.lit(" remained (Kafka's replay would fail); the group was removed")).alias("reason"))


def _members(metadata: DataFrame, current: DataFrame, held: DataFrame) -> DataFrame:
    """Members as ConsumerGroupMember replay leaves them (spec §7.4 table, rows 5 and 8).

    A value of either record creates the member; a metadata tombstone removes it (unless a current assignment
    came after it); a current-assignment tombstone only resets the epochs to -1 and clears the partitions.
    """
    m5 = metadata.select(*GROUP_KEY, F.col("m.member_id").alias("member_id"), F.col("record_offset").alias("m5_offset"),
                         F.col("is_tombstone").alias("m5_tombstone"), F.col("m").alias("m5"))
    m8 = current.select(*GROUP_KEY, F.col("m.member_id").alias("member_id"), F.col("record_offset").alias("m8_offset"),
                        F.col("is_tombstone").alias("m8_tombstone"), F.col("m").alias("m8"))
    both = m5.join(m8, MEMBER_KEY, "full_outer")
    m5_value = F.coalesce(~F.col("m5_tombstone"), F.lit(False))
    m8_value = F.coalesce(~F.col("m8_tombstone"), F.lit(False))
    m8_after_m5 = F.col("m5_offset").isNull() | (F.col("m8_offset") > F.col("m5_offset"))
    exists = m5_value | (m8_value & m8_after_m5)
    epochs_from_m8 = m8_value & (m5_value | m8_after_m5)
    left = F.coalesce(F.col("m8_tombstone") & m8_after_m5, F.lit(False))  # a type-8 tombstone after the member
    stable = F.when(F.col("holder") == "streams", F.lit(STABLE_STATE["streams"])).otherwise(F.lit(STABLE_STATE["consumer"]))
    attrs = F.when(m5_value, F.col("m5"))
    return both.join(F.broadcast(held.select(*GROUP_KEY, "holder")), GROUP_KEY).where(exists).select(
        *MEMBER_KEY,
        F.col("holder").alias("family"),
        attrs.instance_id.alias("group_instance_id"),
        F.coalesce(attrs.client_id, F.lit("")).alias("client_id"),
        F.coalesce(attrs.client_host, F.lit("")).alias("client_host"),
        attrs.rack_id.alias("rack_id"),
        attrs.classic_session_timeout_ms.alias("session_timeout_ms"),
        attrs.rebalance_timeout_ms.alias("rebalance_timeout_ms"),
        F.coalesce(attrs.subscribed_topic_names, F.array().cast("array<string>")).alias("subscribed_topic_names"),
        attrs.subscribed_topic_regex.alias("subscribed_topic_regex"),
        attrs.server_assignor.alias("server_assignor"),
        F.coalesce(attrs.is_classic_member, F.lit(False)).alias("is_classic_member"),
        F.when(epochs_from_m8, F.col("m8.member_epoch")).when(left, F.lit(-1)).otherwise(F.lit(0)).alias("member_epoch"),
        F.when(epochs_from_m8, F.col("m8.previous_member_epoch")).otherwise(F.lit(-1)).alias("previous_member_epoch"),
        F.when(epochs_from_m8, F.col("m8.member_state")).otherwise(stable).cast("smallint").alias("member_state"),
        F.when(epochs_from_m8, F.col("m8.assigned")).otherwise(F.array().cast(decode.PARTITIONS_DDL)).alias("assigned"),
        F.when(epochs_from_m8, F.col("m8.pending_revocation")).otherwise(F.array().cast(decode.PARTITIONS_DDL))
        .alias("pending_revocation"),
    )


def _subscriptions(members: DataFrame, regexes: DataFrame, topology: DataFrame) -> DataFrame:
    """Subscribed topics: names plus the topics the member's regex resolved to; streams: topology source topics."""
    regex_topics = regexes.withColumnRenamed("regex", "subscribed_topic_regex")
    sources = topology.select(*GROUP_KEY, F.flatten(F.transform("subtopologies", lambda s: s.source_topics))
                              .alias("source_topics"))
    joined = members.join(regex_topics, GROUP_KEY + ["subscribed_topic_regex"], "left").join(sources, GROUP_KEY, "left")
    subscribed = F.when(F.col("family") == "streams", F.coalesce("source_topics", F.array().cast("array<string>"))) \
        .otherwise(F.array_union("subscribed_topic_names", F.coalesce("regex_topics", F.array().cast("array<string>"))))
    return joined.withColumn("subscribed_topics", F.array_sort(F.array_distinct(subscribed))).drop(
        "regex_topics", "source_topics")


def _groups(held: DataFrame, group_meta: DataFrame, target_meta: DataFrame, topology: DataFrame, regexes: DataFrame,
            members: DataFrame) -> DataFrame:
    """One row per modern group with its epochs and the state maybeUpdateGroupState derives."""
    target = target_meta.select(*GROUP_KEY, "target_epoch")
    # A member is reconciled when its state is STABLE and its epoch is the target assignment epoch.
    stable = F.when(F.col("family") == "streams", F.lit(STABLE_STATE["streams"])).otherwise(F.lit(STABLE_STATE["consumer"]))
    unreconciled = ~((F.col("member_state") == stable) & (F.col("member_epoch") == F.coalesce("target_epoch", F.lit(0))))
    member_stats = members.join(target, GROUP_KEY, "left").groupBy(*GROUP_KEY).agg(
        F.count(F.lit(1)).cast("int").alias("member_count"),
        F.max(unreconciled).alias("any_unreconciled"),
        F.array_distinct(F.flatten(F.collect_list("subscribed_topic_names"))).alias("member_topics"),
    )
    regex_all = regexes.groupBy(*GROUP_KEY).agg(F.array_distinct(F.flatten(F.collect_list("regex_topics"))).alias("regex_topics"))
    topo_topics = topology.select(*GROUP_KEY, "topology_epoch", F.array_distinct(F.flatten(F.transform(
        "subtopologies", lambda s: F.concat(s.source_topics, s.repartition_source_topics)))).alias("topology_topics"))
    g = (held.join(group_meta, GROUP_KEY, "left").join(target, GROUP_KEY, "left").join(member_stats, GROUP_KEY, "left")
         .join(regex_all, GROUP_KEY, "left").join(topo_topics, GROUP_KEY, "left")
         .withColumnRenamed("holder", "family")
         .withColumn("group_epoch", F.coalesce("group_epoch", F.lit(0)))
         .withColumn("target_epoch", F.coalesce("target_epoch", F.lit(0)))
         .withColumn("member_count", F.coalesce("member_count", F.lit(0)))
         .withColumn("any_unreconciled", F.coalesce("any_unreconciled", F.lit(False))))
    empty = F.col("member_count") == 0
    not_ready = F.col("topology_epoch").isNull() | (F.col("topology_epoch") != F.coalesce("validated_topology_epoch", F.lit(-1)))
    state = (
        F.when(empty, "Empty")
        .when(F.col("family") == "share", "Stable")
        .when((F.col("family") == "streams") & not_ready, "NotReady")
        .when(F.col("group_epoch") > F.col("target_epoch"), "Assigning")
        .when(F.col("any_unreconciled"), "Reconciling")
        .otherwise("Stable")
    )
    no_topics = F.array().cast("array<string>")
    # Topics whose offsets never expire (spec §8.3): consumer: member subscriptions and resolved regexes;
    # streams: topology source and repartition-source topics unless Empty; share groups hold no offsets.
    subscribed = (
        F.when(F.col("family") == "consumer", F.array_union(F.coalesce("member_topics", no_topics),
                                                            F.coalesce("regex_topics", no_topics)))
        .when((F.col("family") == "streams") & ~empty, F.coalesce("topology_topics", no_topics))
        .otherwise(no_topics)
    )
    return g.select(
        *GROUP_KEY,
        F.col("family").alias("group_type"),
        F.col("family").alias("protocol_type"),
        state.alias("state"),
        F.col("group_epoch").alias("generation"),
        F.col("target_epoch").alias("target_assignment_epoch"),
        "member_count",
        F.array_sort(subscribed).alias("subscribed_topics"),
        "metadata_record_offset",
        "topology_epoch",
    )
