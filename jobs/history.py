"""History tables: how the state moved up to as_of, next to where it ended.

`offset_commits` is every offset record the coordinator applied, in the order it applied them, with what
each replaced. It grows with the log, so it is built natively from the log itself: plain commits and
tombstones (nearly every record) are read by the native reader (jobs.native) straight from the source; the few
records the reduction kept whole (transactional commits, values only the Python codec proves) come from the
checked, reduced log. One window per offset key, in application order, then gives the previous offset, the
time since it and the key's records after it (group_status reads only each key's last few); the key is named
after the window, from the few distinct keys.

A large local dump's tasks (jobs.sources.reduced_dump) do most of it themselves: each holds every record of its
share of the keys that it can read (plain and transactional, `readable` in the reduced log) and every marker,
writes the rows of the keys with no other record (jobs.task_history), and gives Spark the applied records of
the others, whose window is computed here as above with their records that are not readable.

Transactional commits are applied at their COMMIT marker (spec §7.2), and only when no record on their key
newer than them came before the marker (the broker keeps the committed offset with the greater record
offset; a tombstone in between removed the pending commit): in the window, a transactional commit applies
when every earlier applied record on its key is older than it.

`group_events` comes from the group fold (jobs.groups), which emits an event at every group-level change.
"""
from __future__ import annotations

from datetime import datetime
from typing import Callable, NamedTuple

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from jobs import native
from jobs.reduce import after, is_plain_offset_record
from jobs.replay import OFFSET_TYPES, committed_offsets, fates_of, offset_key
from jobs.tables import spark_schema
from jobs.transactions import resolve_transactions
from jobs.types import ms_to_timestamp

# What a history row holds before its movement is derived and its key named.
APPLIED = ["coordinator_partition", "offset_key", "record_offset", "source_record_offset", "record_timestamp",
           "producer_id", "committed_offset", "leader_epoch", "metadata", "commit_timestamp_ms"]
KEY = ["coordinator_partition", "offset_key"]
# A source's tasks that finish the history of some keys (jobs.sources.reduced_dump.DumpTasks.offset_history):
# given the named keys (offset_keys), they start; they write the rows of the keys that are not `whole`, and the
# function they return gives the applied records they read of those that are, computed once (pinned), once
# they have finished (None when no key is whole: the tasks finished them all).
HistoryTasks = Callable[[DataFrame], Callable[[], DataFrame | None]]


class StartedTasks(NamedTuple):
    """History tasks started on the reduced log's keys (`start_history_tasks`)."""

    keys: DataFrame  # offset_keys, pinned
    whole_key_commits: Callable[[], DataFrame | None]  # the tasks' frame, once they have finished


def start_history_tasks(valid: DataFrame, tasks: HistoryTasks, pin: Callable[[str, DataFrame], DataFrame]
                        ) -> StartedTasks:
    """Start the source's tasks on the keys of `valid` (the reduced log, as offset_commits reads it), pinned with
    `pin`: before the replay, so that tasks running outside Spark (jobs.sources.early_reduction) overlap it."""
    keys = pin("offset_keys", offset_keys(valid))
    return StartedTasks(keys, tasks(keys))


def offset_commits(valid: DataFrame, as_of: datetime, transactions: bool, log: DataFrame | None = None,
                   fates: DataFrame | None = None, tasks: StartedTasks | None = None) -> DataFrame:
    """The offset_commits table: one row per applied offset record, in application order per key.

    `valid`: the checked records the replay reads (valid, at or before as_of): the reduced log (jobs.reduce),
    or a whole checked log; `log`: the whole log (jobs.records.log_records) the reduced log came from, whose
    plain commits are read natively here; `transactions`: the records hold transactional records or markers;
    `fates`: their transactional commits with their fates, when the replay has them (computed here otherwise);
    `tasks`: the source's tasks, started (`start_history_tasks`): they finish the keys with no record kept whole
    they cannot read, and the rows returned are the others' (with the reduced log only; none when every key is
    theirs).
    """
    from_log = log is not None and "reduced" in valid.columns
    if tasks is not None and not from_log:
        raise ValueError("a source's tasks finish keys of the reduced log")
    keys = offset_keys(valid) if tasks is None else tasks.keys
    whole_key_commits = None if tasks is None else tasks.whole_key_commits()
    if tasks is not None and whole_key_commits is None:  # the tasks finished every key: no row is Spark's
        return valid.sparkSession.createDataFrame([], spark_schema("offset_commits"))
    if not transactions:
        fates = None
    elif fates is None:
        fates = fates_of(valid)
    if from_log:  # the records kept whole, but those the tasks read (their keys' records come from them)
        kept = _kept_whole(valid.where(~F.col("reduced") & ~F.col("readable")),
                           None if fates is None else fates.where(~F.col("readable")))
    else:
        kept = _kept_whole(valid, fates)
    applied = kept.withColumn("proven", F.lit(True))  # checked records: valid
    if from_log:
        plain = whole_key_commits if whole_key_commits is not None else _plain_records(log, as_of)
        applied = plain.unionByName(applied)
    # A plain record whose value the native reader does not prove is kept out of its key's window (in a keyless
    # one of its own) and dropped after the window: a filter below it would be pushed into the reader's
    # projection and inline its helper columns, each many times (measured: five times slower).
    applied = applied.withColumn("window_key", F.when(F.col("proven"), F.col("offset_key"))).drop("offset_key")
    per_key = Window.partitionBy("coordinator_partition", "window_key")
    by_key = per_key.orderBy("record_offset", "source_record_offset")
    if transactions:
        # Two commits of one key in one transaction share its marker's position: the later one replaced the
        # earlier in the producer's pending map.
        superseded = F.coalesce(F.lead("record_offset").over(by_key) == F.col("record_offset"), F.lit(False))
        newest_before = F.max("source_record_offset").over(by_key.rowsBetween(Window.unboundedPreceding, -1))
        applies = ~F.col("superseded") & F.coalesce(F.col("newest_before") < F.col("source_record_offset"), F.lit(True))
        applied = applied.select("*", superseded.alias("superseded"), newest_before.alias("newest_before")).where(
            applies).drop("superseded", "newest_before")
    previous = F.lag("committed_offset").over(by_key)
    previous_time = F.lag("record_timestamp").over(by_key)
    # The key's records after this one: its whole window counted once (no second sort), less this row's rank.
    later = F.count(F.lit(1)).over(per_key) - F.row_number().over(by_key)
    rows = applied.select("*", previous.alias("previous_offset"), previous_time.alias("previous_timestamp"),
                          later.alias("later_records"))
    # Keys are named after the window, from the few distinct keys (a key whose bytes the native reader does not
    # prove has no name, and its records are not applied): no record's key is read, and the shuffle carries the
    # key's bytes, not its three fields.
    names = F.broadcast(keys.drop("whole").withColumnRenamed("offset_key", "window_key"))
    named = rows.where("proven").join(names, ["coordinator_partition", "window_key"])
    return named.select(
        "group_id", "topic", "partition",
        F.when(F.col("committed_offset").isNull(), "delete").otherwise("commit").alias("kind"),
        "committed_offset", "previous_offset",
        (F.col("committed_offset") - F.col("previous_offset")).alias("offset_delta"),
        ms_to_timestamp(F.col("commit_timestamp_ms")).alias("commit_timestamp"),
        "record_timestamp",
        F.when(F.col("previous_offset").isNotNull(),
               F.unix_micros("record_timestamp") / 1e6 - F.unix_micros("previous_timestamp") / 1e6)
        .alias("seconds_since_previous"),
        F.coalesce(F.col("committed_offset") < F.col("previous_offset"), F.lit(False)).alias("is_rewind"),
        "leader_epoch", "metadata", "producer_id", "coordinator_partition", "record_offset",
        F.to_date("record_timestamp").alias("commit_date"),
        "source_record_offset", "later_records",
    )


def offset_keys(valid: DataFrame) -> DataFrame:
    """coordinator_partition, offset_key, group_id, topic, partition, whole: each offset key among the valid
    records, once (every key with a valid record has one in the reduced log, whose rows each stand for a key or
    a record), and whether any of its records was kept whole there and is not readable (always, in a whole
    log): the source's tasks finish the others. Both key types write the same bytes after their type
    (jobs.replay.offset_key)."""
    kept_whole = ~F.col("reduced") & ~F.col("readable") if "reduced" in valid.columns else F.lit(True)
    keys = valid.where(F.col("record_type").isin(OFFSET_TYPES)).groupBy(
        "coordinator_partition", offset_key().alias("offset_key")).agg(
        F.any_value("key").alias("key"), F.bool_or(kept_whole).alias("whole"))
    key = native.offset_key()
    return native.with_read(keys, [key], {"group_id": key.fields["group"], "topic": key.fields["topic"],
                                          "partition": key.fields["partition"].cast("int")}).drop("key")


def _plain_records(log: DataFrame, as_of: datetime) -> DataFrame:
    """Plain (non-transactional) offset commits and tombstones up to as_of, from the whole log, with `proven`:
    the native reader proves the value valid (only those are applied, and only on keys it proves: see
    offset_commits)."""
    value = native.offset_value()
    plain = is_plain_offset_record() & ~after(as_of)
    commit = native.offset_commit_values(value)
    read = native.with_read(log.where(plain), [value], {
        "proven": F.col("value").isNull() | value.ok, "commit": F.when(F.col("value").isNotNull(), commit)})
    return read.select(
        "coordinator_partition", offset_key().alias("offset_key"), "record_offset",
        F.col("record_offset").alias("source_record_offset"), "record_timestamp", "producer_id",
        "commit.committed_offset", "commit.leader_epoch", "commit.metadata", "commit.commit_timestamp_ms", "proven")


def _kept_whole(whole: DataFrame, fates: DataFrame | None) -> DataFrame:
    """Applied offset records among valid records kept whole: transactional commits (at their marker, when
    committed), tombstones, and values only the Python codec proves (or every record of a whole log).
    `fates`: the transactional commits with their fates; None when there are none."""
    offsets = whole.where(F.col("record_type").isin(OFFSET_TYPES))
    if fates is not None:
        offsets = resolve_transactions(offsets, fates, offset_key()).effective
    else:
        offsets = offsets.withColumn("applied_offset", F.col("record_offset"))
    values = committed_offsets(offsets.where(F.col("value").isNotNull()), keep=["key", "applied_offset"])
    tombstones = offsets.where(F.col("value").isNull())
    for name, dtype in (("committed_offset", "bigint"), ("leader_epoch", "int"), ("metadata", "string"),
                        ("commit_timestamp_ms", "bigint")):
        tombstones = tombstones.withColumn(name, F.lit(None).cast(dtype))
    return values.unionByName(tombstones, allowMissingColumns=True).select(
        "coordinator_partition", offset_key().alias("offset_key"), F.col("applied_offset").alias("record_offset"),
        F.col("record_offset").alias("source_record_offset"), *APPLIED[4:])


def group_events(events: DataFrame) -> DataFrame:
    """The group_events table from the fold's events (jobs.groups, kind "event")."""
    return events.select(
        "group_id", "group_type", "event", ms_to_timestamp(F.col("event_timestamp_ms")).alias("event_timestamp"),
        "generation", "previous_generation", "state", "protocol", "leader_id", "member_count", "members_joined",
        "members_left", "seconds_since_previous", "coordinator_partition", "record_offset")

