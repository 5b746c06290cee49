"""Offsets-topic records in the coordinator's terms, and the check that sorts them into replayable records and
quarantine.

`log_records` names the raw frame's columns as the replay speaks of them (coordinator partition, record
offset) and reads the batch metadata when the source has it. `check` adds each record's type, group id and
decode error: offset commits are checked natively (jobs.native, compiled from the codec's layouts), every
other record by the Python codec (jobs.decode), so Python sees only what native code cannot prove.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs import decode, native
from offsets_codec.segments import NO_PRODUCER_ID as NO_PRODUCER

RECORD_COLUMNS = ["coordinator_partition", "record_offset", "record_timestamp", "key", "value", "producer_id",
                  "producer_epoch", "is_control", "transaction_marker"]
CHECK_COLUMNS = ["record_type", "group_id", "error"]
MALFORMED_CONTROL_KEY = "control record with a malformed key (expected int16 version >= 0, int16 type)"


def log_records(raw: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
    """The contract's raw frame (jobs.raw.normalise) as records: RECORD_COLUMNS, then `keep` (more columns of
    `raw`, as they are).

    Without batch metadata every record counts as non-transactional and none is a transaction marker.
    """
    present = set(raw.columns)
    producer_id = F.coalesce(F.col("producer_id"), F.lit(NO_PRODUCER)) if "producer_id" in present else F.lit(NO_PRODUCER)
    producer_epoch = F.col("producer_epoch") if "producer_epoch" in present else F.lit(None)
    is_control = F.coalesce(F.col("is_control"), F.lit(False)) if "is_control" in present else F.lit(False)
    return raw.select(
        F.col("partition").alias("coordinator_partition"),
        F.col("offset").alias("record_offset"),
        F.col("timestamp").alias("record_timestamp"),
        "key",
        "value",
        producer_id.cast("bigint").alias("producer_id"),
        producer_epoch.cast("smallint").alias("producer_epoch"),
        is_control.alias("is_control"),
        F.when(is_control, transaction_marker(F.col("key"))).alias("transaction_marker"),
        *keep,
    )


def transaction_marker(key: Column) -> Column:
    """COMMIT, ABORT or UNKNOWN from a control record key (int16 version, int16 type: ControlRecordType);
    null when the key is too short or its version negative, which Kafka rejects."""
    version, kind = F.substring(key, 1, 2), F.hex(F.substring(key, 3, 2))
    valid = (F.length(key) >= 4) & (version < F.lit(b"\x80\x00"))  # binary order: a set top bit is negative
    return F.when(valid, F.when(kind == "0000", "ABORT").when(kind == "0001", "COMMIT").otherwise("UNKNOWN"))


def with_native_check(records: DataFrame) -> DataFrame:
    """`records` plus natively_valid (an offset commit, or its tombstone, whose key and value the native
    reader proves valid) and native_group_id (its group)."""
    key, value = native.offset_key(), native.offset_value()
    proven = ~F.col("is_control") & key.ok & (F.col("value").isNull() | value.ok)
    return native.with_read(records, [key, value], {"natively_valid": proven,
                                                    "native_group_id": key.fields["group"]})


def check(records: DataFrame) -> DataFrame:
    """`records` plus record_type, group_id and error (null when the record decodes).

    Transaction markers have no type and no group; their error says when the control key is malformed.
    """
    proven, control = F.col("natively_valid"), F.col("is_control")
    # The Python codec sees what native code cannot prove, but no control record: its key is read here.
    needed = ~proven & ~control
    python = decode.check(F.when(needed, F.col("key")), F.when(needed, F.col("value")), needed)
    checked = with_native_check(records).select("*", python.alias("check"))
    return checked.select(
        *records.columns,
        F.when(proven, native.signed(F.col("key"), 0, 2)).when(~control, F.col("check.record_type"))
        .cast("smallint").alias("record_type"),
        F.when(proven, F.col("native_group_id")).when(~control, F.col("check.group_id")).alias("group_id"),
        F.when(proven, F.lit(None)).when(~control, F.col("check.error")).otherwise(control_error()).cast("string")
        .alias("error"),
    )


def control_error() -> Column:
    """A control record's error: none for a transaction marker, else its key is malformed."""
    return F.when(F.col("transaction_marker").isNull(), F.lit(MALFORMED_CONTROL_KEY))
