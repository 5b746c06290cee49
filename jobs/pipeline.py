"""read -> check -> replay -> expiry -> lag -> write. `rebuild` is the pure transform; `run` does the I/O."""
from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as pads
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import decode
from jobs.config import RebuildConfig
from jobs.expiry import apply_expiry
from jobs.lag import consumer_lag
from jobs.replay import replay
from jobs.sink import TableSink
from jobs.sources import read_source
from jobs.sources.end_offsets import is_live, live_cluster, live_end_offsets, read_end_offsets
from jobs.sources.topic_ids import read_topic_ids
from jobs.tables import TABLES, spark_schema
from offsets_codec import REGISTRY

log = logging.getLogger("offsetlake")

# Timestamps Spark can hold (years 1-9999); a corrupt commitTimestamp outside them becomes null, not a crash.
_MIN_MS, _MAX_MS = -62135596800000, 253402300799999
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
GROUP_KEY = ["coordinator_partition", "group_id"]


def ms_to_timestamp(ms: Column) -> Column:
    return F.when(ms.between(_MIN_MS, _MAX_MS), F.timestamp_millis(ms))


def check_records(raw: DataFrame) -> DataFrame:
    """Every raw record with its coordinator partition, record type, group id and decode error (if any).

    Batch metadata (segment sources, or dumps that kept it) rides along: producer id and epoch, and the
    COMMIT/ABORT marker of a control record. Without it every record counts as non-transactional.
    """
    present = set(raw.columns)
    producer_id = F.coalesce(F.col("producer_id"), F.lit(-1)) if "producer_id" in present else F.lit(-1)
    producer_epoch = F.col("producer_epoch") if "producer_epoch" in present else F.lit(None)
    is_control = F.coalesce(F.col("is_control"), F.lit(False)) if "is_control" in present else F.lit(False)
    checked = raw.select(
        F.col("partition").alias("coordinator_partition"),
        F.col("offset").alias("record_offset"),
        F.col("timestamp").alias("record_timestamp"),
        "key",
        "value",
        producer_id.cast("bigint").alias("producer_id"),
        producer_epoch.cast("smallint").alias("producer_epoch"),
        is_control.alias("is_control"),
        decode.check(F.col("key"), F.col("value")).alias("check"),
    ).select("*", "check.*").drop("check")
    # A control record is a transaction marker, not an offsets-topic record: no type, no group, no decode error.
    marker = transaction_marker(F.col("key"))
    return checked.select(
        *[c for c in checked.columns if c not in ("record_type", "group_id", "error", "is_control")],
        F.when(~F.col("is_control"), F.col("record_type")).alias("record_type"),
        F.when(~F.col("is_control"), F.col("group_id")).alias("group_id"),
        F.when(~F.col("is_control"), F.col("error")).when(marker.isNull(), F.lit(
            "control record with a malformed key (expected int16 version >= 0, int16 type)")).alias("error"),
        F.when(F.col("is_control"), marker).alias("transaction_marker"),
    )


def transaction_marker(key: Column) -> Column:
    """COMMIT, ABORT or UNKNOWN from a control record key (int16 version, int16 type: ControlRecordType);
    null when the key is too short or its version negative, which Kafka rejects."""
    version, kind = F.hex(F.substring(key, 1, 2)), F.hex(F.substring(key, 3, 2))
    return F.when((F.length(key) >= 4) & (F.conv(version, 16, 10).cast("int") < 0x8000),
                  F.when(kind == "0000", "ABORT").when(kind == "0001", "COMMIT").otherwise("UNKNOWN"))


def rebuild(checked: DataFrame, as_of: datetime, retention_ms: int, end_offsets: DataFrame | None,
            topic_ids: DataFrame | None = None, segment_errors: DataFrame | None = None,
            transactions: bool = True) -> dict[str, DataFrame]:
    """All contract tables from checked records, as of `as_of` (records after it are not replayed).

    `transactions=False` says the records hold no transactional record or marker (record_counts knows),
    so the replay can skip resolving transactions."""
    as_of_ms = (as_of - _EPOCH) // timedelta(milliseconds=1)  # exact, unlike float seconds
    as_of_col = F.lit(as_of).cast("timestamp").alias("as_of")
    in_window = F.col("record_timestamp").isNull() | (F.col("record_timestamp") <= F.lit(as_of).cast("timestamp"))
    valid = checked.where(F.col("error").isNull() & in_window)

    state = replay(valid, topic_ids, transactions)
    # Winners are decoded once and then read by several tables.
    offsets = state.offsets.persist(StorageLevel.MEMORY_AND_DISK)
    groups = state.groups.persist(StorageLevel.MEMORY_AND_DISK)
    pending = state.pending.persist(StorageLevel.MEMORY_AND_DISK)
    expiry = apply_expiry(offsets, groups, as_of_ms, retention_ms, pending)

    committed = _offset_rows(expiry.offsets, as_of_col)
    expired = _offset_rows(expiry.expired, as_of_col).withColumn("expired_at", ms_to_timestamp(F.col("expired_at_ms")))

    existing = expiry.groups.join(state.activity, GROUP_KEY, "left")
    consumer_groups = existing.select(
        "*", ms_to_timestamp(F.col("current_state_timestamp_ms")).alias("current_state_timestamp"), as_of_col)

    def of_existing_groups(rows: DataFrame) -> DataFrame:
        return rows.join(existing.select(*GROUP_KEY), GROUP_KEY, "left_semi").select("*", as_of_col)

    spark = checked.sparkSession
    if end_offsets is None:
        lag = spark.createDataFrame([], spark_schema("consumer_lag"))
    else:
        lag = consumer_lag(committed, end_offsets)
    quarantine = checked.where(F.col("error").isNotNull()).select(
        "coordinator_partition", "record_offset", "record_timestamp", "key", "value", "error", "record_type"
    )
    return {
        "committed_offsets": committed,
        "expired_offsets": expired,
        "consumer_groups": consumer_groups,
        "group_members": of_existing_groups(state.members),
        "group_target_assignments": of_existing_groups(state.targets),
        "streams_topologies": of_existing_groups(state.topologies),
        "consumer_lag": lag,
        "quarantine": quarantine,
        "pending_transactions": pending.select(
            "*", F.col("committed_offset").alias("offset"),
            ms_to_timestamp(F.col("commit_timestamp_ms")).alias("commit_timestamp"), as_of_col),
        "segment_errors": segment_errors if segment_errors is not None else spark.createDataFrame(
            [], spark_schema("segment_errors")),
        # Not a table: groups whose records Kafka's strict replay would have refused (for the run summary).
        "replay_violations": state.violations,
    }


def _offset_rows(offsets: DataFrame, as_of_col: Column) -> DataFrame:
    return offsets.select(
        "*",
        ms_to_timestamp(F.col("commit_timestamp_ms")).alias("commit_timestamp"),
        ms_to_timestamp(F.col("expire_timestamp_ms")).alias("expire_timestamp"),
        ms_to_timestamp(F.col("expires_at_ms")).alias("expires_at"),
        as_of_col,
    )


def record_counts(checked: DataFrame, as_of: datetime | None) -> dict[str, Any]:
    """Counts for the summary and the newest record timestamp, in one small aggregation over all records."""
    after = F.lit(False) if as_of is None else F.coalesce(F.col("record_timestamp") > F.lit(as_of), F.lit(False))
    rows = (
        checked.groupBy("record_type", F.col("error").isNull().alias("ok"))
        .agg(F.count(F.lit(1)).alias("count"), F.count_if(after).alias("after"), F.max("record_timestamp").alias("newest"),
             F.count_if((F.col("producer_id") != -1) | F.col("transaction_marker").isNotNull()).alias("transactional"))
        .collect()
    )
    by_type: dict[str, int] = {}
    read = decoded = after_as_of = transactional = 0
    newest = None
    for r in rows:
        read += r["count"]
        transactional += r["transactional"]
        if r["newest"] is not None and (newest is None or r["newest"] > newest):
            newest = r["newest"]
        if r["ok"]:
            decoded += r["count"]
            name = (REGISTRY[r["record_type"]].name if r["record_type"] in REGISTRY
                    else "TransactionMarker" if r["record_type"] is None else str(r["record_type"]))
            by_type[name] = by_type.get(name, 0) + r["count"]
            after_as_of += r["after"]
    modern = sum(n for name, n in by_type.items() if _family(name) in ("consumer", "share", "streams"))
    return {
        "records_read": read,
        "records_decoded": decoded,
        "records_quarantined": read - decoded,
        "records_after_as_of": after_as_of,
        "transactional_records": transactional,
        "records_by_type": dict(sorted(by_type.items())),
        "modern_group_records": modern,
        "newest": None if newest is None else newest.replace(tzinfo=timezone.utc),
    }


def _family(name: str) -> str | None:
    return next((rt.group_family for rt in REGISTRY.values() if rt.name == name), None)


def run(spark: SparkSession, cfg: RebuildConfig) -> dict[str, Any]:
    """Read, rebuild and write every table; returns the run summary (the CLI prints it as JSON)."""
    started = time.monotonic()
    # Live end offsets (--end-offsets kafka[:HOST:PORT]) are fetched after the rebuild, for its committed offsets.
    live_ends = live_cluster(cfg.end_offsets, cfg.source, cfg.kafka) if cfg.end_offsets and is_live(cfg.end_offsets) else None
    source = read_source(spark, cfg.source, cfg.kafka)
    end_offsets = read_end_offsets(spark, cfg.end_offsets) if cfg.end_offsets and live_ends is None else None
    # Modern groups' assignments name topics by id; classic groups and offset commits name them directly.
    topic_ids = read_topic_ids(cfg.topic_ids) if cfg.topic_ids else {}
    topic_id_frame = spark.createDataFrame(sorted(topic_ids.items()), "topic_id string, topic string") if topic_ids else None
    log.info("checking every record of %s", cfg.source)
    checked = check_records(source.records).persist(StorageLevel.MEMORY_AND_DISK)
    counts = record_counts(checked, cfg.as_of)
    # The checked records and the (small) segment errors are materialised now: the source's own cache can go.
    segment_errors = source.segment_errors.localCheckpoint() if source.segment_errors is not None else None
    source.release()
    # Default as_of: the newest record (an empty input has none: then now, and every table is empty).
    as_of = cfg.as_of or counts["newest"] or datetime.now(timezone.utc)
    log.info("read %d records: %d decoded, %d quarantined; rebuilding as of %s (retention %d min)",
             counts["records_read"], counts["records_decoded"], counts["records_quarantined"],
             as_of.isoformat(), cfg.retention_minutes)

    tables = rebuild(checked, as_of, cfg.retention_ms, end_offsets, topic_id_frame, segment_errors,
                     transactions=counts["transactional_records"] > 0)
    if live_ends is not None:
        committed = tables["committed_offsets"]
        tables["consumer_lag"] = consumer_lag(committed, live_end_offsets(spark, committed, live_ends))
    sink = TableSink(spark, cfg.output)
    try:
        for name in TABLES:
            sink.stage(name, tables[name])
        orphans = _orphan_groups(sink)
        violations = [{"group_id": r.group_id, "reason": r.reason}
                      for r in tables["replay_violations"].orderBy("group_id").limit(1000).collect()]
        unresolved = _unresolved_topic_ids(sink)
        damage = _segment_damage(sink)
        written = sink.commit(as_of, str(cfg.source))
    except BaseException:
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
        "seconds": round(time.monotonic() - started, 2),
    }


def _orphan_groups(sink: TableSink) -> list[str]:
    """Group ids shown as simple groups because a type-2 tombstone left their offsets behind."""
    staged = pads.dataset(sink.staging / "consumer_groups", format="parquet")
    ids = staged.to_table(columns=["group_id"], filter=pc.field("is_orphan")).column("group_id").to_pylist()
    return sorted(ids)


def _segment_damage(sink: TableSink, most: int = 100) -> list[dict[str, Any]]:
    """The first damaged segments and ignored files (all of them are in the segment_errors table)."""
    staged = pads.dataset(sink.staging / "segment_errors", format="parquet")
    rows = staged.head(most, columns=["file", "position", "action", "reason"]).to_pylist()
    if len(rows) == most:
        log.warning("segment_errors has more rows than the summary lists (%d); see the table", most)
    return rows


def _unresolved_topic_ids(sink: TableSink) -> int:
    """Assigned partitions (current and target) whose topic id no mapping could name."""
    members = pads.dataset(sink.staging / "group_members", format="parquet").to_table(columns=["assigned_partitions"])
    current = pc.list_flatten(members.column("assigned_partitions"))
    targets = pads.dataset(sink.staging / "group_target_assignments", format="parquet").to_table(columns=["topic", "topic_id"])
    unnamed = 0
    for topic, topic_id in ((pc.struct_field(current, "topic"), pc.struct_field(current, "topic_id")),
                            (targets.column("topic"), targets.column("topic_id"))):
        unnamed += pc.sum(pc.and_(pc.is_null(topic), pc.is_valid(topic_id))).as_py() or 0
    return unnamed
