"""Replay per coordinator partition, as the broker's load does (spec §7.2-§7.5).

Offsets stay native: the broker's in-order fold over offset commits ends in "the newest record per key
wins; a tombstone deletes" (spec §7.7), once transactional commits are sorted by the fate of their
transaction (jobs.transactions), so it is a reduction on raw key bytes and only the winners are decoded
(natively, jobs.native). Groups of every family are folded in log order by jobs.groups; here their rows
are named (topic ids, streams tasks) and joined with the offsets (a run writes the member-level tables from the
pinned fold and offsets without Spark instead: jobs.task_groups).

Input: checked records (the reduced log, or a whole checked log), valid and at or before as_of, with
columns coordinator_partition, record_offset, record_timestamp, key, value, record_type, group_id,
producer_id, producer_epoch, transaction_marker.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs import decode, native
from jobs.groups import CLASSIC, GROUP_FOLD, replay_groups
from jobs.spark_threads import SparkThreads
from jobs.transactions import resolve_transactions, transaction_fates

GROUP_KEY = ["coordinator_partition", "group_id"]
MEMBER_KEY = GROUP_KEY + ["member_id"]
OFFSET_TYPES = list(native.OFFSET_TYPES)
# Member state names by family and code (modern/MemberState.java, streams/MemberState.java).
MEMBER_STATES = {
    **{f"{f}:{c}": n for f in ("consumer", "share") for c, n in
       ((0, "STABLE"), (1, "UNREVOKED_PARTITIONS"), (2, "UNRELEASED_PARTITIONS"), (127, "UNKNOWN"))},
    **{f"streams:{c}": n for c, n in ((1, "STABLE"), (2, "UNREVOKED_TASKS"), (3, "UNRELEASED_TASKS"), (127, "UNKNOWN"))},
}
Pin = Callable[[str, DataFrame], DataFrame]
OFFSETS = "offsets"  # what the replay pins the decoded offsets as (jobs.task_groups reads them)


def offset_key() -> Column:
    """Types 0 and 1 share the key layout and the broker converts type 0 to type 1 before replay, so the key
    bytes after the 2-byte type prefix identify (group, topic, partition) whichever type wrote it."""
    return F.substring(F.col("key"), 3, 1 << 30)


@dataclass(frozen=True)
class ReplayedState:
    """The state a coordinator would hold after loading the log up to as_of, before expiry."""

    offsets: DataFrame  # live committed offsets, one row per (group, topic, partition)
    pending: DataFrame  # transactional commits of transactions still open, one row per (offset key, producer)
    groups: DataFrame  # groups of every family, one row per group id
    activity: DataFrame  # the newest record about each group: last_record_offset, last_record_timestamp
    members: DataFrame | None  # members of those groups (classic and modern), group_members columns; None unless named
    targets: DataFrame | None  # modern target assignments, one row per (member, topic, partition); None unless named
    topologies: DataFrame | None  # streams topologies, one row per subtopology; None unless named
    violations: DataFrame  # (group_id, coordinator_partition, reason): sequences Kafka's strict replay refuses
    events: DataFrame  # group events (jobs.groups), in log order per group
    fates: DataFrame | None  # transactional commits with their fates (jobs.transactions); None: no transactions


def last_writes(records: DataFrame, record_key: Column) -> DataFrame:
    """The newest record (highest offset) per coordinator partition and key; tombstones included.

    A max over the offset alone keeps the aggregation buffer fixed-width (a hash aggregate, no sort); the
    winning records are then fetched whole by (coordinator partition, offset).
    """
    newest = records.groupBy("coordinator_partition", record_key.alias("record_key")).agg(
        F.max("record_offset").alias("record_offset")
    )
    return records.join(newest.drop("record_key"), ["coordinator_partition", "record_offset"], "left_semi")


def offset_winners(records: DataFrame, fates: DataFrame | None) -> tuple[DataFrame, DataFrame]:
    """Spec §7.2: (the newest effective offset record per key, a tombstone meaning deleted; the commits of
    transactions still open). `fates`: the transactional commits with their fates (jobs.transactions), None
    when the log has no transactional record and no marker (as the run's counts tell): then every record is
    effective and nothing is open."""
    offset_records = records.where(F.col("record_type").isin(OFFSET_TYPES))
    if fates is None:
        return last_writes(offset_records, offset_key()), offset_records.limit(0)
    resolved = resolve_transactions(offset_records, fates, offset_key())
    return last_writes(resolved.effective, offset_key()), resolved.open


def fates_of(records: DataFrame) -> DataFrame:
    """The transactional offset commits among checked records, with their fates (jobs.transactions)."""
    return transaction_fates(records.where(F.col("record_type").isin(OFFSET_TYPES)),
                             records.where(F.col("transaction_marker").isNotNull()))


def committed_offsets(winners: DataFrame, keep: list[str] = ()) -> DataFrame:
    """The live offsets among the offset winners (or open transactional commits), decoded: natively where the
    native reader proves the record, by the Python codec otherwise. `keep`: more columns of `winners` to keep."""
    return _decoded(_native_offsets(winners, keep), keep)


def pinned_offsets(winners: DataFrame, pin: Pin, name: str, keep: list[str] = ()) -> DataFrame:
    """`committed_offsets(winners, keep)` pinned as `name`. The native reader's rows are pinned first, and the
    Python codec decodes the rows it could not prove in a second pinned pass only when there are some: a Python
    UDF in a plan starts Spark's Python workers (seconds on a small machine) even when no row reaches it."""
    native_rows = pin(name, _native_offsets(winners, keep))
    return finished_offsets(native_rows, not native_rows.where(~F.col("proven")).isEmpty(), pin, name, keep)


def finished_offsets(native_rows: DataFrame, unproven: bool, pin: Pin, name: str, keep: list[str] = ()) -> DataFrame:
    """Rows as `_native_offsets` gives them (pinned, or jobs.task_offsets'), decoded: the Python codec's pass,
    pinned as `{name}_decoded`, only when some are `unproven`."""
    if not unproven:
        return native_rows.select(*_OFFSET_COLUMNS, "c.*", *keep)
    return pin(f"{name}_decoded", _decoded(native_rows, keep))


_OFFSET_COLUMNS = ["coordinator_partition", "group_id", "record_offset", "record_timestamp", "producer_id",
                   "producer_epoch"]


def _native_offsets(winners: DataFrame, keep: list[str]) -> DataFrame:
    """The live offsets' native reading: `c` (the decoded columns) where `proven`, else key and value for the
    Python codec."""
    key, value = native.offset_key(), native.offset_value()
    commits = native.with_read(winners.where(F.col("value").isNotNull()), [key, value], {
        "proven": key.ok & value.ok, "native_commit": native.offset_commit_struct(key, value)})
    unproven = ~F.col("proven")
    return commits.select(*_OFFSET_COLUMNS, "proven", F.when(F.col("proven"), F.col("native_commit")).alias("c"),
                          F.when(unproven, F.col("key")).alias("unproven_key"),
                          F.when(unproven, F.col("value")).alias("unproven_value"),
                          *keep)


def _decoded(native_rows: DataFrame, keep: list[str]) -> DataFrame:
    """`_native_offsets`' rows with the Python codec's decoding where the native reader left them unproven."""
    python = decode.offset_commit(F.col("unproven_key"), F.col("unproven_value"))  # null where proven
    return native_rows.select(*_OFFSET_COLUMNS, F.when(F.col("proven"), F.col("c")).otherwise(python).alias("c"),
                              *keep).select(*_OFFSET_COLUMNS, "c.*", *keep)


def group_activity(records: DataFrame, offset_winners: DataFrame) -> DataFrame:
    """The newest record about each group (metadata or offsets, any family).

    A group's newest offset record is the newest record of one of its keys, so the per-key winners
    (tombstones included) stand in for its offset records; group records are taken as they are.
    """
    columns = ["coordinator_partition", "group_id", "record_offset", "record_timestamp"]
    candidates = offset_winners.select(columns).unionByName(
        records.where(~F.col("record_type").isin(OFFSET_TYPES) & F.col("group_id").isNotNull()).select(columns))
    return candidates.groupBy(*GROUP_KEY).agg(
        F.max("record_offset").alias("last_record_offset"),
        F.max_by("record_timestamp", "record_offset").alias("last_record_timestamp"),
    )


def replay(records: DataFrame, pin: Pin, topic_ids: DataFrame | None = None, transactions: bool = True,
           modern: bool = True, events: bool = True, group_fold: Callable[[], DataFrame] | None = None,
           offset_state: Callable[[], tuple[DataFrame, int]] | None = None, named: bool = True) -> ReplayedState:
    """Committed offsets plus the groups of every family that hold them, and their members.

    `pin(name, df)` materialises what several outputs read: the transactions' fates, the offset winners, the
    decoded offsets and the group fold. `transactions=False` / `modern=False` (the run's counts say the log has
    no transactional record / no modern-group record) skip the work for what cannot be there; `events=False`
    skips the group events (a history table). `group_fold`: gives the group fold of `records` (with `events`) when
    the source's tasks folded it (jobs.sources.reduced_dump.DumpTasks.group_fold); `offset_state`: gives the offset
    winners and open commits of `records`, and how many they left unproven, when the source's tasks computed them
    (jobs.task_offsets; then the state has no fates). `named=False`: the members, target assignments and
    topologies are left out (None), for a caller that writes them from the pinned fold (jobs.task_groups)."""
    with SparkThreads(records.sparkSession, 1, "offsetlake-fold") as beside:  # independent of the offsets
        fold = (beside.submit(group_fold) if group_fold
                else beside.submit(pin, GROUP_FOLD, replay_groups(records, events)))
        if offset_state is not None:
            fates = None
            computed, unproven = offset_state()
            winners = computed.where(~F.col("open"))
            decoded = finished_offsets(computed.where(F.col("live")), unproven > 0, pin, OFFSETS, keep=["open"])
        else:
            fates = pin("transaction_fates", fates_of(records)) if transactions else None
            winners, open_commits = offset_winners(records, fates)
            winners = pin("offset_winners", winners)
            # The winners and the open transactional commits are decoded together: one native reader's plan.
            rows = winners.select(*_OFFSET_COLUMNS, "key", "value", F.lit(False).alias("open"))
            if transactions:
                rows = rows.unionByName(open_commits.select(*_OFFSET_COLUMNS, "key", "value",
                                                            F.lit(True).alias("open")))
            decoded = pinned_offsets(rows, pin, OFFSETS, keep=["open"])
        offsets = decoded.where(~F.col("open")).drop("open")
        pending = decoded.where(F.col("open")).drop("open") if transactions else offsets.limit(0)
        folded = fold.result()

    def of(kind: str) -> DataFrame:
        return folded.where(F.col("kind") == kind).select(*GROUP_KEY, f"{kind}.*")

    identity = of("identity")
    held = of("group")
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
    groups = held.withColumn("is_orphan", F.lit(False)).unionByName(simple, allowMissingColumns=True)

    members, targets, topologies = _member_level(of, offsets, topic_ids, modern) if named else (None, None, None)
    return ReplayedState(offsets=offsets, pending=pending, groups=groups, activity=group_activity(records, winners),
                         members=members, targets=targets, topologies=topologies, violations=of("violation"),
                         events=of("event"), fates=fates)


def _member_level(of: Callable[[str], DataFrame], offsets: DataFrame, topic_ids: DataFrame | None, modern: bool
                  ) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(members, target assignments, topologies) of the fold's rows `of(kind)`, their partitions named."""
    topologies = of("topology")
    members = of("member")
    classic = classic_members(members.where(F.col("family") == CLASSIC))
    targets = of("target").select(*GROUP_KEY, "member_id", F.explode("partitions").alias("p")).select(
        *MEMBER_KEY, "p.*")
    if modern:
        names = topic_names(of("topic_name"), offsets, topic_ids)
        members = classic.unionByName(modern_members(members.where(F.col("family") != CLASSIC), names, topologies))
        targets = name_partitions(targets, names, topologies, MEMBER_KEY + ["assignment_epoch"])
    else:  # only classic groups: their members name their topics, and nothing else can exist
        members = classic
        targets = targets.select(*MEMBER_KEY, "assignment_epoch", "topic", "partition", "topic_id").limit(0)
        topologies = topologies.limit(0)
    return members, targets, topologies


def classic_members(members: DataFrame) -> DataFrame:
    """Members of classic groups: their partitions are named already (the consumer protocol names topics)."""
    no_detail = F.lit(None).cast("array<struct<topic:string,partition:int,topic_id:string,assignment_epoch:int,"
                                 "pending_revocation:boolean>>")
    return members.select(
        *MEMBER_KEY, "group_instance_id", "client_id", "client_host", "rack_id", "session_timeout_ms",
        "rebalance_timeout_ms", "subscribed_topics",
        F.transform("assigned", lambda p: F.struct(p.topic.alias("topic"), p.partition.alias("partition"),
                                                    p.topic_id.alias("topic_id"))).alias("assigned_partitions"),
        "member_epoch", "previous_member_epoch", no_detail.alias("current_assignment_detail"),
        F.lit(None).cast("string").alias("member_state"), "server_assignor", "subscribed_topic_regex",
        "is_classic_member", "subscription_version", "member_payload_error",
    )


def topic_names(record_names: DataFrame, offsets: DataFrame, topic_ids: DataFrame | None) -> DataFrame:
    """topic_id -> topic from the --topic-ids map and from records that carry both (spec §3, "Topic-ID references")."""
    pairs = record_names.select("topic_id", "topic").unionByName(
        offsets.where(F.col("topic_id").isNotNull()).select("topic_id", "topic"))
    if topic_ids is not None:
        pairs = pairs.unionByName(topic_ids.select("topic_id", "topic"))
    return pairs.groupBy("topic_id").agg(F.max("topic").alias("topic"))


def name_partitions(rows: DataFrame, names: DataFrame, topologies: DataFrame, keep: list[str]) -> DataFrame:
    """Rows with topic_id or subtopology_id -> rows with a topic name (null when the id is unknown).

    A streams task (subtopology, partition) stands for that partition of each of the subtopology's source topics.
    """
    by_id = rows.where(F.col("subtopology_id").isNull()).drop("topic").join(F.broadcast(names), "topic_id", "left")
    sources = topologies.select(*GROUP_KEY, "subtopology_id", F.explode("source_topics").alias("topic"))
    by_task = rows.where(F.col("subtopology_id").isNotNull()).drop("topic", "topic_id").join(
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
        F.sort_array(F.collect_list(F.when(~F.col("pending_revocation"), F.struct("topic", "partition", "topic_id"))))
        .alias("assigned_partitions"),
        F.sort_array(F.collect_list(F.struct("topic", "partition", "topic_id", "assignment_epoch", "pending_revocation")))
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
        "server_assignor", "subscribed_topic_regex", "is_classic_member", "subscription_version",
        "member_payload_error",
    )
