"""read -> check -> replay -> expiry -> lag -> write. `rebuild` is the pure transform; `run` does the I/O."""
from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any, Callable

import pyarrow.compute as pc
import pyarrow.dataset as pads
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.config import RebuildConfig
from jobs.expiry import apply_expiry
from jobs.end_offsets_history import end_offsets_history, merge_history
from jobs.groups import GROUP_FOLD
from jobs.kill_points import kill_point
from jobs.history import HistoryTasks, group_events, offset_commits, start_history_tasks
from jobs.lag import RATE_WINDOW_MS, consumer_lag
from jobs.metrics import SparkWork, peak_rss_mb
from jobs.records import check, log_records
from jobs.reduce import reduce_log, scattered_bad_keys
from jobs.replay import OFFSETS, replay
from jobs.output_lock import OutputLock
from jobs.runs import keep_runs, new_run_id
from jobs.sink import TableSink, TableWriter, new_staging
from jobs.status import STATUS_WINDOW, group_status, recent_commits
from jobs.session import sized_for
from jobs.sources import input_bytes, read_source
from jobs.sources.end_offsets import is_live, live_cluster, live_end_offsets, read_end_offsets
from jobs.sources.early_reduction import EarlyReduction
from jobs.sources.reduced_dump import OFFSET_STATE, TASK_SPANS, DumpTasks
from jobs.sources.topic_ids import read_topic_ids
from jobs.tables import TABLES, spark_schema
from jobs.task_groups import PinnedFold
from jobs.types import ms_to_timestamp
from offsets_codec import REGISTRY

log = logging.getLogger("offsetlake")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
GROUP_KEY = ["coordinator_partition", "group_id"]


def check_records(raw: DataFrame) -> DataFrame:
    """Every raw record, checked: RECORD_COLUMNS and CHECK_COLUMNS of jobs.records (for tools and tests;
    `run` checks only the reduced log, and pins it).

    A lazy local checkpoint ends the plan here: the optimizer would otherwise push every later filter into
    the native check's expressions, one copy per filter."""
    return check(log_records(raw)).localCheckpoint(eager=False)


def rebuild(checked: DataFrame, as_of: datetime, retention_ms: int, end_offsets: DataFrame | None,
            topic_ids: DataFrame | None = None, segment_errors: DataFrame | None = None,
            transactions: bool = True, pin: Callable[[str, DataFrame], DataFrame] | None = None,
            modern: bool = True, history: bool = True, log: DataFrame | None = None,
            rate_window_ms: int = RATE_WINDOW_MS, status_window: int = STATUS_WINDOW,
            history_tasks: HistoryTasks | None = None, ready: Callable[[str, DataFrame], None] | None = None,
            group_fold: Callable[[], DataFrame] | None = None,
            offset_state: Callable[[], tuple[DataFrame, int]] | None = None,
            apart: Callable[[str], TableWriter] | None = None) -> dict[str, DataFrame | TableWriter]:
    """All contract tables from checked records, as of `as_of` (records after it are not replayed).

    `transactions=False` says the records hold no transactional record or marker, `modern=False` no
    modern-group record (record_counts knows), so the replay can skip that work. `history=False` skips the
    history tables; `log`: the whole log when `checked` is the reduced log (jobs.history reads its plain
    commits); `history_tasks`: the source's tasks that finish most keys' commit history themselves
    (jobs.history.HistoryTasks).
    `end_offsets`: end offsets as read (topic, partition, offset[, timestamp]) or the end-offset history
    (jobs.end_offsets_history). `pin(name, df)` materialises the state several tables read (default:
    persist it); `run` pins it to files in the sink's staging area. `ready(name, df)` receives each table that
    does not read the commit history as soon as it is defined, before the history is computed (`run` writes them
    then: the history may wait for the source's tasks). `group_fold` and `offset_state`: give the group fold and the
    offsets when the source's tasks computed them (jobs.replay.replay). `apart(name)`: a writer of the
    member-level table `name` (jobs.task_groups.NAMED_TABLES), which `run` writes from the pinned fold without
    Spark; the tables then hold it instead of a frame (TableSink.stage takes either), and the replay does not
    name their partitions."""
    pin = pin or _persist
    as_of_ms = (as_of - _EPOCH) // timedelta(milliseconds=1)  # exact, unlike float seconds
    as_of_col = F.lit(as_of).cast("timestamp").alias("as_of")
    in_window = F.col("record_timestamp").isNull() | (F.col("record_timestamp") <= F.lit(as_of).cast("timestamp"))
    valid = checked.where(F.col("error").isNull() & in_window)
    # Started first: tasks that run outside Spark work while the replay does.
    started = start_history_tasks(valid, history_tasks, pin) if history and history_tasks is not None else None

    state = replay(valid, pin, topic_ids, transactions, modern, events=history, group_fold=group_fold,
                   offset_state=offset_state, named=apart is None)
    offsets, pending = state.offsets, state.pending
    # The tables that need no expiry, handed to `ready` now: they are staged while the groups are pinned.
    # (A group that expiry deletes is Empty, and an Empty group has no members: every member's group exists.)
    unexpired = {
        "group_members": apart("group_members") if apart else state.members.select("*", as_of_col),
        "quarantine": quarantine_rows(checked),
        "pending_transactions": pending.select(
            "*", F.col("committed_offset").alias("offset"),
            ms_to_timestamp(F.col("commit_timestamp_ms")).alias("commit_timestamp"), as_of_col),
    }
    if ready is not None:
        for name, table in unexpired.items():
            ready(name, table)
    groups = pin("groups", state.groups)
    expiry = apply_expiry(offsets, groups, as_of_ms, retention_ms, pending, pin)

    committed = _offset_rows(expiry.offsets, as_of_col)
    expired = _offset_rows(expiry.expired, as_of_col).withColumn("expired_at", ms_to_timestamp(F.col("expired_at_ms")))

    # The groups that exist decide which assignments and topologies are kept: the table, computed once.
    consumer_groups = pin("consumer_groups", expiry.groups.join(state.activity, GROUP_KEY, "left").select(
        "*", ms_to_timestamp(F.col("current_state_timestamp_ms")).alias("current_state_timestamp"), as_of_col))

    def of_existing_groups(rows: DataFrame) -> DataFrame:
        return rows.join(consumer_groups.select(*GROUP_KEY), GROUP_KEY, "left_semi").select("*", as_of_col)

    spark = checked.sparkSession
    ends = None
    if end_offsets is not None:  # snapshots up to as_of (one without a timestamp is the snapshot of as_of)
        ends = end_offsets if "observed_at" in end_offsets.columns else end_offsets_history(end_offsets, as_of_col)
    state_tables = {
        "committed_offsets": committed,
        "expired_offsets": expired,
        "consumer_groups": consumer_groups,
        **({name: apart(name) for name in ("group_target_assignments", "streams_topologies")} if apart else {
            "group_target_assignments": of_existing_groups(state.targets),
            "streams_topologies": of_existing_groups(state.topologies)}),
        **unexpired,
        "segment_errors": segment_errors if segment_errors is not None else spark.createDataFrame(
            [], spark_schema("segment_errors")),
    }
    if ends is None:
        state_tables["consumer_lag"] = spark.createDataFrame([], spark_schema("consumer_lag"))
    if history:
        state_tables["group_events"] = group_events(state.events)
    if ready is not None:  # now: the history below may wait for the source's tasks
        for name, table in state_tables.items():
            ready(name, table)
    # The commit history grows with the log and lag and status read it: computed once (a table, pinned).
    commits = pin("offset_commits", offset_commits(valid, as_of, transactions, log, state.fates, started)
                  ) if history else None
    history_tables = {
        "offset_commits": commits,
        "group_status": group_status(recent_commits(commits, status_window), ends, as_of, status_window),
    } if commits is not None else {}
    if ends is not None:
        state_tables["consumer_lag"] = consumer_lag(committed, ends, as_of, commits, rate_window_ms)
    return {
        **history_tables,
        **state_tables,
        # Not a table: groups whose records Kafka's strict replay would have refused (for the run summary).
        "replay_violations": state.violations,
    }


def quarantine_rows(checked: DataFrame) -> DataFrame:
    """The records that failed their check, whole, with the reason."""
    return checked.where(F.col("error").isNotNull()).select(
        "coordinator_partition", "record_offset", "record_timestamp", "key", "value", "error", "record_type")


def _persist(_name: str, df: DataFrame) -> DataFrame:
    return df.persist(StorageLevel.MEMORY_AND_DISK)


def _offset_rows(offsets: DataFrame, as_of_col: Column) -> DataFrame:
    return offsets.select(
        "*",
        ms_to_timestamp(F.col("commit_timestamp_ms")).alias("commit_timestamp"),
        ms_to_timestamp(F.col("expire_timestamp_ms")).alias("expire_timestamp"),
        ms_to_timestamp(F.col("expires_at_ms")).alias("expires_at"),
        as_of_col,
    )


def record_counts(checked: DataFrame, as_of: datetime | None, counted: list[dict] | None = None) -> dict[str, Any]:
    """Counts for the summary and the newest record timestamp, in one small aggregation.

    `checked` is a checked log, or the reduced log whose rows stand for `records` log records each. `counted`: the
    aggregation's rows, when the source's tasks counted them (jobs.partial_reduce.count_rows); then Spark runs
    no job here.
    """
    rows = counted if counted is not None else _count_rows(checked, as_of)
    by_type: dict[str, int] = {}
    read = decoded = after_as_of = transactional_records = scattered = 0
    newest_seen = None
    for r in rows:
        read += r["count"]
        transactional_records += r["transactional"] or 0
        scattered += r["scattered"]
        if r["newest"] is not None and (newest_seen is None or r["newest"] > newest_seen):
            newest_seen = r["newest"]
        if r["ok"]:
            decoded += r["count"]
            name = (REGISTRY[r["record_type"]].name if r["record_type"] in REGISTRY
                    else "TransactionMarker" if r["record_type"] is None else str(r["record_type"]))
            by_type[name] = by_type.get(name, 0) + r["count"]
            after_as_of += r["after"] or 0
    modern = sum(n for name, n in by_type.items() if _family(name) in ("consumer", "share", "streams"))
    return {
        "records_read": read,
        "records_decoded": decoded,
        "records_quarantined": read - decoded,
        "records_after_as_of": after_as_of,
        "transactional_records": transactional_records,
        "records_by_type": dict(sorted(by_type.items())),
        "modern_group_records": modern,
        "scattered_bad_keys": scattered,
        "newest": None if newest_seen is None else newest_seen.replace(tzinfo=timezone.utc),
    }


def _count_rows(checked: DataFrame, as_of: datetime | None) -> list[Any]:
    """`record_counts`' aggregation, by Spark: per (record_type, ok) count, after, newest, transactional and
    scattered."""
    present = set(checked.columns)
    weight = F.col("records") if "records" in present else F.lit(1)
    newest = F.col("newest_timestamp") if "newest_timestamp" in present else F.col("record_timestamp")
    late = F.lit(False) if as_of is None else F.coalesce(F.col("record_timestamp") > F.lit(as_of), F.lit(False))
    transactional = (F.col("producer_id") != -1) | F.col("transaction_marker").isNotNull()
    return (
        checked.groupBy("record_type", F.col("error").isNull().alias("ok"))
        .agg(F.sum(weight).alias("count"), F.sum(F.when(late, weight)).alias("after"), F.max(newest).alias("newest"),
             F.sum(F.when(transactional, weight)).alias("transactional"),
             F.count_if(F.col("error").isNotNull() & (weight > 1)).alias("scattered"))
        .collect()
    )


def _family(name: str) -> str | None:
    return next((rt.group_family for rt in REGISTRY.values() if rt.name == name), None)


def run(spark: SparkSession, cfg: RebuildConfig, source_bytes: int | None = None,
        early: EarlyReduction | None = None, lock: OutputLock | None = None) -> dict[str, Any]:
    """Read, rebuild and write every table; returns the run summary (the CLI prints it as JSON).

    `source_bytes`: the size of the source (jobs.sources.input_bytes), when the caller has measured it; `early`:
    the source's reduction, started before Spark (jobs.sources.early_reduction); `lock`: the run's hold on the
    output, when the caller took it (jobs.output_lock; else it is taken and given up here)."""
    with sized_for(spark, input_bytes(cfg.source) if source_bytes is None else source_bytes):
        if lock is not None:
            return _run(spark, cfg, early, lock.run_id)
        with OutputLock.acquire(cfg.output, new_run_id()) as own:
            return _run(spark, cfg, early, own.run_id)


def _run(spark: SparkSession, cfg: RebuildConfig, early: EarlyReduction | None, run_id: str) -> dict[str, Any]:
    started = time.monotonic()
    # Live end offsets (--end-offsets kafka[:HOST:PORT]) are fetched after the rebuild, for its committed offsets.
    live_ends = live_cluster(cfg.end_offsets, cfg.source, cfg.kafka) if cfg.end_offsets and is_live(cfg.end_offsets) else None
    source = read_source(spark, cfg.source, cfg.kafka, early)
    end_offsets = read_end_offsets(spark, cfg.end_offsets) if cfg.end_offsets and live_ends is None else None
    # Modern groups' assignments name topics by id; classic groups and offset commits name them directly.
    topic_ids = read_topic_ids(cfg.topic_ids) if cfg.topic_ids else {}
    sink = TableSink(spark, cfg.output, snapshots=cfg.snapshot,
                     staging=early.staging if early else new_staging(cfg.output, run_id))
    work = SparkWork(spark, f"offsetlake rebuild {cfg.source}")
    try:
        log.info("reading %s", cfg.source)
        kill_point("read")
        records = log_records(source.records)
        reduced = reduce_log(records, cfg.as_of, sink.pin, _reduced_by_tasks(source.tasks, sink))
        counts = record_counts(reduced, cfg.as_of, source.tasks.counted() if source.tasks else None)
        # Default as_of: the newest record (an empty input has none: then now, and every table is empty).
        as_of = cfg.as_of or counts["newest"] or datetime.now(timezone.utc)
        log.info("read %d records: %d decoded, %d quarantined; rebuilding as of %s (retention %d min)",
                 counts["records_read"], counts["records_decoded"], counts["records_quarantined"],
                 as_of.isoformat(), cfg.retention_minutes)
        kill_point("replayed")
        segment_errors = sink.pin("segment_errors", source.segment_errors) if source.segment_errors is not None else None
        transactions, modern = counts["transactional_records"] > 0, counts["modern_group_records"] > 0
        # The end-offset history is kept across runs: earlier runs' snapshots plus this one's.
        previous_ends = _previous_end_offsets(spark, cfg.output)
        new_ends = None if end_offsets is None else end_offsets_history(end_offsets, F.lit(as_of))
        ends = previous_ends if new_ends is None else merge_history(previous_ends, new_ends)
        # What the counts prove empty is written without a Spark job.
        empty = {"consumer_lag": ends is None and live_ends is None, "segment_errors": segment_errors is None,
                 "end_offsets_history": ends is None and live_ends is None,
                 "quarantine": counts["records_quarantined"] == 0, "pending_transactions": not transactions,
                 "group_target_assignments": not modern, "streams_topologies": not modern}

        # The member-level group tables are written without Spark, from the pinned group fold and offsets.
        offset_state = source.tasks.offset_state(as_of) if source.tasks else None
        pinned_fold = PinnedFold(sink.pinned(GROUP_FOLD), sink.pinned(OFFSET_STATE if offset_state else OFFSETS),
                                 topic_ids, as_of)

        def apart(name: str) -> TableWriter:
            return partial(pinned_fold.write, name, sink.staged("consumer_groups"))

        def stage(name: str, table: DataFrame | TableWriter) -> None:  # on the sink's threads, several at once
            if name == "quarantine" and counts["scattered_bad_keys"]:  # a corrupt key whose values looked right
                whole = reduced.where(~(F.col("reduced") & (F.col("records") > 1)))  # all its records, whole
                table = quarantine_rows(whole).unionByName(quarantine_rows(scattered_bad_keys(reduced, records)))
            sink.stage_soon(name, None if empty.get(name) else table)

        def ready(name: str, table: DataFrame | TableWriter) -> None:
            if live_ends is None or name != "consumer_lag":  # with live end offsets, replaced below
                stage(name, table)

        tables = rebuild(reduced, as_of, cfg.retention_ms, ends, None, segment_errors,
                         transactions=transactions, pin=sink.pin, modern=modern, history=cfg.history, log=records,
                         rate_window_ms=cfg.rate_window_ms, status_window=cfg.status_window,
                         history_tasks=_history_tasks(source.tasks, as_of, sink, cfg.status_window)
                         if source.tasks and cfg.history else None, ready=ready,
                         group_fold=source.tasks.group_fold(as_of, cfg.history) if source.tasks else None,
                         offset_state=offset_state, apart=apart)
        tables["end_offsets_history"] = ends  # written every run, unchanged by a run without end offsets
        if live_ends is not None:  # fetched now, for the offsets just rebuilt
            committed = tables["committed_offsets"]
            fetched = sink.pin("live_end_offsets", live_end_offsets(spark, committed, live_ends))
            tables["consumer_lag"] = consumer_lag(committed, fetched)
            tables["end_offsets_history"] = merge_history(previous_ends, end_offsets_history(fetched, F.lit(as_of)))
            if tables.get("offset_commits") is not None:  # Burrow's rules take the fetch as the log end at as_of
                at_as_of = end_offsets_history(fetched.drop("fetched_at"), F.lit(as_of))
                tables["group_status"] = group_status(recent_commits(tables["offset_commits"], cfg.status_window),
                                                      merge_history(previous_ends, at_as_of), as_of, cfg.status_window)
        for name in TABLES:
            if name in tables:  # every table but the history ones with --no-history; those `ready` had are skipped
                stage(name, tables[name])
        sink.wait()
        kill_point("staged")
        source.release()
        orphans = _orphan_groups(sink)
        violations = _replay_violations(sink)
        unresolved = _unresolved_topic_ids(sink)
        damage = _segment_damage(sink)
        written = sink.commit(as_of, str(cfg.source))
        vacuumed = keep_runs(cfg.output, cfg.keep_runs) if cfg.keep_runs else None
    except BaseException:
        if early is not None:  # its workers may still be writing into the staging area
            early.close()
        sink.discard()
        raise
    finally:
        spark.catalog.clearCache()
    log.info("wrote %d tables under %s with %s", len(written), cfg.output, sink.engine)
    return {
        **{k: counts[k] for k in ("records_read", "records_decoded", "records_quarantined")},
        "groups": sink.rows["consumer_groups"],
        "committed_offsets": sink.rows["committed_offsets"],
        "expired_offsets": sink.rows["expired_offsets"],
        "members": sink.rows["group_members"],
        "consumer_lag": sink.rows["consumer_lag"],
        "pending_transactions": sink.rows["pending_transactions"],
        "segment_errors": sink.rows["segment_errors"],
        **{t: sink.rows[t] for t in ("offset_commits", "group_events", "group_status", "end_offsets_history")
           if t in sink.rows},
        "segment_damage": damage,
        "as_of": as_of.isoformat().replace("+00:00", "Z"),
        "orphan_groups": orphans,
        "replay_violations": violations,
        "unresolved_topic_ids": unresolved,
        "records_after_as_of": counts["records_after_as_of"],
        "transactional_records": counts["transactional_records"],
        "records_by_type": counts["records_by_type"],
        "modern_group_records": counts["modern_group_records"],
        "retention_minutes": cfg.retention_minutes,
        "topic_ids": len(topic_ids),
        "delta_engine": sink.engine,
        "output": str(cfg.output),
        "run_id": run_id,
        **({"vacuumed_files": vacuumed} if vacuumed is not None else {}),
        "seconds": round(time.monotonic() - started, 2),
        **work.counts(),
        **peak_rss_mb(spark),
    }


def _reduced_by_tasks(tasks: DumpTasks | None, sink: TableSink) -> Callable[[datetime | None], DataFrame] | None:
    """The dump's tasks reducing it (jobs.reduce.reduce_log's `partial`), when the source has them, folding
    transactional commits too (the history's tasks read them from the dump themselves)."""
    if tasks is None:
        return None
    return lambda as_of: tasks.reduced_log(as_of, sink.pin, sink.pinned(TASK_SPANS))


def _history_tasks(tasks: DumpTasks, as_of: datetime, sink: TableSink, status_window: int) -> HistoryTasks:
    """The dump's tasks writing offset_commits rows straight into the table's staging folder, beside Spark's;
    the rows group_status reads in files of their own."""
    return lambda keys: tasks.offset_history(as_of, keys, sink.staged("offset_commits"), sink.pin, status_window)


def _orphan_groups(sink: TableSink) -> list[str]:
    """Group ids shown as simple groups because a type-2 tombstone left their offsets behind."""
    staged = pads.dataset(sink.staged("consumer_groups"), format="parquet")
    ids = staged.to_table(columns=["group_id"], filter=pc.field("is_orphan")).column("group_id").to_pylist()
    return sorted(ids)


def _previous_end_offsets(spark: SparkSession, output: Path) -> DataFrame | None:
    """end_offsets_history as the newest complete run left it (read with delta-rs: small), or None."""
    from deltalake import DeltaTable

    from jobs.runs import snapshot

    version = snapshot(output, ["end_offsets_history"]).versions.get("end_offsets_history")
    if version is None:
        return None
    rows = DeltaTable(str(output / "end_offsets_history"), version=version).to_pyarrow_table()
    return spark.createDataFrame(rows) if rows.num_rows else None


def _replay_violations(sink: TableSink, most: int = 1000) -> list[dict[str, Any]]:
    """Groups whose records Kafka's strict replay would have refused, from the pinned group fold."""
    fold = pads.dataset(sink.pinned(GROUP_FOLD), format="parquet")
    rows = fold.to_table(columns=["group_id", "violation"], filter=pc.field("kind") == "violation").to_pylist()
    return sorted(({"group_id": r["group_id"], "reason": r["violation"]["reason"]} for r in rows),
                  key=lambda v: v["group_id"])[:most]


def _segment_damage(sink: TableSink, most: int = 100) -> list[dict[str, Any]]:
    """The first damaged segments and ignored files (all of them are in the segment_errors table)."""
    staged = pads.dataset(sink.staged("segment_errors"), format="parquet")
    rows = staged.head(most, columns=["file", "position", "action", "reason"]).to_pylist()
    if len(rows) == most:
        log.warning("segment_errors has more rows than the summary lists (%d); see the table", most)
    return rows


def _unresolved_topic_ids(sink: TableSink) -> int:
    """Assigned partitions (current and target) whose topic id no mapping could name."""
    members = pads.dataset(sink.staged("group_members"), format="parquet").to_table(columns=["assigned_partitions"])
    current = pc.list_flatten(members.column("assigned_partitions"))
    targets = pads.dataset(sink.staged("group_target_assignments"), format="parquet").to_table(columns=["topic", "topic_id"])
    unnamed = 0
    for topic, topic_id in ((pc.struct_field(current, "topic"), pc.struct_field(current, "topic_id")),
                            (targets.column("topic"), targets.column("topic_id"))):
        unnamed += pc.sum(pc.and_(pc.is_null(topic), pc.is_valid(topic_id))).as_py() or 0
    return unnamed
