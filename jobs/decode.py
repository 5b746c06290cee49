"""Bytes -> columns: the only place Python touches records, through vectorised Arrow UDFs.

Each UDF has a plain per-record function beside it (usable and tested without Spark):
* `check_record` runs on every record: it validates key and value and extracts what the native steps
  need (record type, group id) and the error that sends a record to quarantine;
* `offset_commit_columns` and `group_metadata_columns` run only on the winners of a last-write-wins
  reduction, so the bulk of the log is never decoded into rich values.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Iterable

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql.functions import arrow_udf
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import DataType

from jobs.types import parse_columns

from offsets_codec import DecodeError, decode_key, decode_value
from offsets_codec.consumer_protocol import decode_assignment, decode_subscription, subscribed_topics_v0

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
CONSUMER_PROTOCOL = "consumer"
_INT16 = struct.Struct(">h")

CHECK_DDL = "record_type smallint, group_id string, error string"
OFFSET_COMMIT_DDL = (
    "topic string, partition int, committed_offset bigint, leader_epoch int, metadata string, "
    "commit_timestamp_ms bigint, expire_timestamp_ms bigint, topic_id string, value_version smallint"
)
ASSIGNED_PARTITIONS_DDL = "array<struct<topic:string,partition:int,topic_id:string>>"
MEMBER_DDL = (
    "struct<member_id:string, group_instance_id:string, client_id:string, client_host:string, "
    "session_timeout_ms:int, rebalance_timeout_ms:int, subscribed_topics:array<string>, "
    f"assigned_partitions:{ASSIGNED_PARTITIONS_DDL}, subscription_version:smallint, member_payload_error:string>"
)
GROUP_METADATA_DDL = (
    "protocol_type string, generation int, protocol string, leader_id string, "
    "current_state_timestamp_ms bigint, value_version smallint, "
    f"members array<{MEMBER_DDL}>, subscribed_topics array<string>"
)


# --- per-record functions (plain Python) -------------------------------------------------------


def group_id_of(key_data: dict[str, Any]) -> str | None:
    """Every key starts with its group id: `group` for types 0-2, `GroupId` for the KIP-848 family."""
    return key_data.get("group", key_data.get("GroupId"))


# An offsets topic rewrites the same few keys (one per group, topic and partition) over and over, so a
# worker remembers what each key decoded to. Bounded: cleared when full.
_KEY_CACHE: dict[bytes, tuple[int, str | None, str | None]] = {}
_KEY_CACHE_SIZE = 100_000


def check_record(key: bytes | None, value: bytes | None) -> tuple[int | None, str | None, str | None]:
    """(record type, group id, error): error is None when key and value both decode."""
    checked_key = _KEY_CACHE.get(key) if key is not None else None
    if checked_key is None:
        checked_key = _check_key(key)
        if key is not None:
            if len(_KEY_CACHE) >= _KEY_CACHE_SIZE:
                _KEY_CACHE.clear()
            _KEY_CACHE[key] = checked_key
    record_type, group_id, error = checked_key
    if error is not None or value is None:
        return checked_key
    try:
        decode_value(record_type, value)
    except DecodeError as e:
        return record_type, None, str(e)
    return checked_key


def _check_key(key: bytes | None) -> tuple[int | None, str | None, str | None]:
    record_type = _INT16.unpack_from(key)[0] if key is not None and len(key) >= 2 else None
    try:
        decoded = decode_key(key)
    except DecodeError as e:
        return record_type, None, str(e)
    return decoded.record_type, group_id_of(decoded.data), None


def offset_commit_columns(key: bytes, value: bytes) -> dict[str, Any]:
    """An offset-commit record (type 0 or 1, not a tombstone) as committed_offsets columns."""
    k = decode_key(key).data
    v = decode_value(_INT16.unpack_from(key)[0], value)
    d = v.data
    topic_id = d.get("topicId")
    return {
        "topic": k["topic"],
        "partition": k["partition"],
        "committed_offset": d["offset"],
        "leader_epoch": _sentinel(d.get("leaderEpoch", -1)),
        "metadata": d["metadata"] if d["metadata"] is not None else "",
        "commit_timestamp_ms": d["commitTimestamp"],
        "expire_timestamp_ms": _sentinel(d.get("expireTimestamp", -1)),
        "topic_id": None if topic_id in (None, ZERO_UUID) else topic_id,
        "value_version": v.version,
    }


def group_metadata_columns(record_type: int, value: bytes) -> dict[str, Any]:
    """A classic group's metadata value (type 2) as group columns, with decoded members.

    `subscribed_topics` is the broker's view used by offset expiry (ClassicGroup.computeSubscribedTopics):
    None (unknown) unless the protocol type is `consumer` and every member's subscription parses.
    """
    v = decode_value(record_type, value)
    d = v.data
    protocol_type = d["protocolType"] or None  # "" (a new coordinator's brand-new group) means none
    is_consumer = protocol_type == CONSUMER_PROTOCOL
    members = [_member_columns(m, is_consumer) for m in d["members"]]
    return {
        "protocol_type": protocol_type,
        "generation": d["generation"],
        "protocol": d["protocol"],
        "leader_id": d["leader"],
        "current_state_timestamp_ms": _sentinel(d.get("currentStateTimestamp", -1)),
        "value_version": v.version,
        "members": members,
        "subscribed_topics": _broker_subscribed_topics(d, is_consumer),
    }


def _member_columns(m: dict[str, Any], is_consumer: bool) -> dict[str, Any]:
    row = {
        "member_id": m["memberId"],
        "group_instance_id": m.get("groupInstanceId"),
        "client_id": m["clientId"],
        "client_host": m["clientHost"],
        "session_timeout_ms": m["sessionTimeout"],
        "rebalance_timeout_ms": _sentinel(m.get("rebalanceTimeout", -1)),
        "subscribed_topics": [],
        "assigned_partitions": [],
        "subscription_version": None,
        "member_payload_error": None,
    }
    if not is_consumer:
        return row  # connect, sr, ...: the member bytes are not the consumer protocol
    errors = []
    try:
        subscription = decode_subscription(m["subscription"])
        row["subscribed_topics"] = subscription["topics"]
        row["subscription_version"] = subscription["version"]
    except DecodeError as e:
        errors.append(f"subscription: {e}")
    if m["assignment"]:  # like Kafka's admin client, an empty assignment means "none yet"
        try:
            row["assigned_partitions"] = [
                {"topic": tp["topic"], "partition": p, "topic_id": None}
                for tp in decode_assignment(m["assignment"])["assignedPartitions"]
                for p in tp["partitions"]
            ]
        except DecodeError as e:
            errors.append(f"assignment: {e}")
    row["member_payload_error"] = "; ".join(errors) or None
    return row


def _broker_subscribed_topics(d: dict[str, Any], is_consumer: bool) -> list[str] | None:
    if not is_consumer:
        return None
    if not d["members"]:
        return []
    if d["protocol"] is None:
        return None
    topics: set[str] = set()
    for m in d["members"]:
        try:
            topics.update(subscribed_topics_v0(m["subscription"]))
        except DecodeError:
            return None
    return sorted(topics)


def _sentinel(n: int) -> int | None:
    """Kafka's Utils.ofSentinel: -1 means absent."""
    return None if n == -1 else n


# --- Arrow UDF wrappers ------------------------------------------------------------------------


def _arrow_type(ddl: str) -> tuple[DataType, pa.DataType]:
    spark_type = parse_columns(ddl)
    return spark_type, to_arrow_type(spark_type)


_CHECK_SPARK, _CHECK_ARROW = _arrow_type(CHECK_DDL)
_OFFSET_SPARK, _OFFSET_ARROW = _arrow_type(OFFSET_COMMIT_DDL)
_GROUP_SPARK, _GROUP_ARROW = _arrow_type(GROUP_METADATA_DDL)


def _rows_to_struct(rows: Iterable[dict[str, Any] | None], arrow_type: pa.DataType) -> pa.Array:
    return pa.array(list(rows), type=arrow_type)


@arrow_udf(_CHECK_SPARK)
def _check_udf(keys: pa.Array, values: pa.Array) -> pa.Array:
    types, groups, errors = [], [], []
    for key, value in zip(keys.to_pylist(), values.to_pylist()):
        t, g, e = check_record(key, value)
        types.append(t)
        groups.append(g)
        errors.append(e)
    return pa.StructArray.from_arrays(
        [pa.array(types, pa.int16()), pa.array(groups, pa.string()), pa.array(errors, pa.string())],
        fields=list(_CHECK_ARROW),
    )


def _decode_udf(fn: Callable[..., dict[str, Any]], arrow_type: pa.DataType, spark_type: DataType):
    """Wrap a per-record decoder whose last argument is the value; a tombstone gives a null struct.

    (Spark evaluates a Python UDF on every row it is handed, whatever CASE WHEN surrounds it, so the
    wrapper itself must not trip over tombstones.)
    """

    @arrow_udf(spark_type)
    def udf(*columns: pa.Array) -> pa.Array:
        rows = zip(*(c.to_pylist() for c in columns))
        return _rows_to_struct((None if args[-1] is None else fn(*args) for args in rows), arrow_type)

    return udf


_offset_udf = _decode_udf(offset_commit_columns, _OFFSET_ARROW, _OFFSET_SPARK)
_group_udf = _decode_udf(group_metadata_columns, _GROUP_ARROW, _GROUP_SPARK)


def check(key: Column, value: Column) -> Column:
    """struct<record_type, group_id, error> for every record."""
    return _check_udf(key, value)


def offset_commit(key: Column, value: Column) -> Column:
    """Decoded offset-commit columns; only for valid, non-tombstone offset records."""
    return _offset_udf(key, value)


def group_metadata(record_type: Column, value: Column) -> Column:
    """Decoded classic group columns; only for valid, non-tombstone type-2 records."""
    return _group_udf(record_type, value)
