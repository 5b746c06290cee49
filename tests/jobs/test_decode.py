"""The per-record functions behind the Arrow UDFs, and the UDFs on rows a filter did not remove."""
from __future__ import annotations

from offsets_log import T0, member

from jobs import decode
from jobs.record_check import check_record
from offsets_codec import encode_key, encode_value

KEY = encode_key(1, {"group": "g", "topic": "t", "partition": 0})
VALUE = encode_value(1, 3, {"offset": 1, "leaderEpoch": -1, "metadata": "", "commitTimestamp": T0})


def test_check_record_reports_type_group_and_error():
    assert check_record(KEY, VALUE) == (1, "g", None)
    assert check_record(KEY, None) == (1, "g", None)  # a tombstone is a valid record
    assert check_record(KEY, b"\x00\x09" + VALUE[2:]) == (1, None, "unknown value version 9 for record type 1")
    # the key cache must not leak one record's value error into the next record with the same key
    assert check_record(KEY, VALUE) == (1, "g", None)
    assert check_record(b"\x00\x2a\x00\x01g", VALUE) == (42, None, "unknown record type 42")
    assert check_record(b"\x00\x2a\x00\x01g", None) == (42, None, "unknown record type 42")  # cached too
    assert check_record(None, VALUE)[2] is not None and check_record(b"\x00", None)[0] is None


def test_offset_commit_columns_apply_kafka_sentinels():
    v1 = encode_value(1, 1, {"offset": 5, "metadata": "m", "commitTimestamp": T0, "expireTimestamp": -1})
    assert decode.offset_commit_columns(KEY, v1) == {
        "topic": "t", "partition": 0, "committed_offset": 5, "leader_epoch": None, "metadata": "m",
        "commit_timestamp_ms": T0, "expire_timestamp_ms": None, "topic_id": None, "value_version": 1}


def test_broker_subscribed_topics_follow_compute_subscribed_topics():
    def group(members, protocol_type="consumer", protocol="range"):
        value = encode_value(2, 3, {"protocolType": protocol_type, "generation": 1, "protocol": protocol,
                                    "leader": None, "currentStateTimestamp": T0, "members": members})
        return decode.group_metadata_columns(2, value)

    assert group([member("a", ["x", "y"]), member("b", ["y", "z"])])["subscribed_topics"] == ["x", "y", "z"]
    assert group([])["subscribed_topics"] == []
    assert group([member("a", ["x"])], protocol=None)["subscribed_topics"] is None  # members but no protocol
    assert group([member("a", ["x"])], protocol_type="connect")["subscribed_topics"] is None
    broken = group([member("a", ["x"]), member("b", [], subscription=b"\x00")])
    assert broken["subscribed_topics"] is None  # one unparsable member makes the set unknown
    assert broken["members"][1]["member_payload_error"].startswith("subscription: ")


def test_decode_udfs_give_null_for_tombstones_without_a_filter(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(KEY, VALUE, 1), (KEY, None, 1)], "key binary, value binary, record_type smallint")
    rows = df.select(decode.offset_commit(F.col("key"), F.col("value")).alias("o"),
                     decode.group_metadata(F.col("record_type"), F.lit(None).cast("binary")).alias("g")).collect()
    assert rows[0].o.committed_offset == 1 and rows[1].o is None
    assert rows[0].g is None and rows[1].g is None
