"""The per-record decoding into the replay's columns (jobs.decode.columns): Kafka's sentinels, and the subscribed
topics the broker's offset expiry reads."""
from __future__ import annotations

from offsets_log import T0, member

from jobs.decode.columns import group_metadata_columns, offset_commit_columns
from offsets_codec import encode_key, encode_value

KEY = encode_key(1, {"group": "g", "topic": "t", "partition": 0})


def test_offset_commit_columns_apply_kafka_sentinels():
    v1 = encode_value(1, 1, {"offset": 5, "metadata": "m", "commitTimestamp": T0, "expireTimestamp": -1})
    assert offset_commit_columns(KEY, v1) == {
        "topic": "t", "partition": 0, "committed_offset": 5, "leader_epoch": None, "metadata": "m",
        "commit_timestamp_ms": T0, "expire_timestamp_ms": None, "topic_id": None, "value_version": 1}


def test_broker_subscribed_topics_follow_compute_subscribed_topics():
    def group(members, protocol_type="consumer", protocol="range"):
        value = encode_value(2, 3, {"protocolType": protocol_type, "generation": 1, "protocol": protocol,
                                    "leader": None, "currentStateTimestamp": T0, "members": members})
        return group_metadata_columns(2, value)

    assert group([member("a", ["x", "y"]), member("b", ["y", "z"])])["subscribed_topics"] == ["x", "y", "z"]
    assert group([])["subscribed_topics"] == []
    assert group([member("a", ["x"])], protocol=None)["subscribed_topics"] is None  # members but no protocol
    assert group([member("a", ["x"])], protocol_type="connect")["subscribed_topics"] is None
    broken = group([member("a", ["x"]), member("b", [], subscription=b"\x00")])
    assert broken["subscribed_topics"] is None  # one unparsable member makes the set unknown
    assert broken["members"][1]["member_payload_error"].startswith("subscription: ")
