"""The worked examples of offsets-format-spec.md, decoded and encoded byte for byte (§4.6, §5, §9, §11.2)."""

import pytest

from offsets_codec import decode_key, decode_value, encode_key, encode_value, java_string_hash, partition_for, to_kafka_json
from offsets_codec.consumer_protocol import decode_assignment, decode_subscription, encode_assignment, encode_subscription


def h(text: str) -> bytes:
    """Hex with spaces and '|' separators, as the spec writes it."""
    return bytes.fromhex(text.replace("|", " "))


UUID_01_TO_10 = "AQIDBAUGBwgJCgsMDQ4PEA"  # bytes 01..10
T = "00 00 01 8b cf e5 68 00"  # 1700000000000
OFFSET_42 = "00 00 00 00 00 00 00 2a"

# (record type, value version or None for a key, data, spec bytes)
SPEC_4_6 = [
    ("key type 1", 1, None, {"group": "my-group", "topic": "orders", "partition": 3},
     "00 01 | 00 08 6d 79 2d 67 72 6f 75 70 | 00 06 6f 72 64 65 72 73 | 00 00 00 03"),
    ("value v3", 1, 3, {"offset": 42, "leaderEpoch": 5, "metadata": "", "commitTimestamp": 1700000000000},
     f"00 03 | {OFFSET_42} | 00 00 00 05 | 00 00 | {T}"),
    ("value v1", 1, 1, {"offset": 42, "metadata": "", "commitTimestamp": 1700000000000, "expireTimestamp": 1700086400000},
     f"00 01 | {OFFSET_42} | 00 00 | {T} | 00 00 01 8b d5 0b c4 00"),
    ("value v4 with topicId", 1, 4,
     {"offset": 42, "leaderEpoch": 5, "metadata": "", "commitTimestamp": 1700000000000, "topicId": UUID_01_TO_10},
     f"00 04 | {OFFSET_42} | 00 00 00 05 | 01 | {T} | 01 00 10 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10"),
    ("value v4 without topicId", 1, 4,
     {"offset": 42, "leaderEpoch": -1, "metadata": "", "commitTimestamp": 1700000000000,
      "topicId": "AAAAAAAAAAAAAAAAAAAAAA"},
     f"00 04 | {OFFSET_42} | ff ff ff ff | 01 | {T} | 00"),
    ("consumer group key", 3, None, {"GroupId": "cg1"}, "00 03 00 03 63 67 31"),
    ("consumer group value with hash", 3, 0, {"Epoch": 5, "MetadataHash": 0x1122334455667788},
     "00 00 | 00 00 00 05 | 01 00 08 11 22 33 44 55 66 77 88"),
    ("consumer group value without hash", 3, 0, {"Epoch": 5, "MetadataHash": 0}, "00 00 00 00 00 05 00"),
    ("current member assignment", 8, 0,
     {"MemberEpoch": 5, "PreviousMemberEpoch": 4, "State": 0,
      "AssignedPartitions": [{"TopicId": UUID_01_TO_10, "Partitions": [0, 1], "AssignmentEpochs": []}],
      "PartitionsPendingRevocation": []},
     "00 00 | 00 00 00 05 | 00 00 00 04 | 00 | 02 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10"
     " 03 00 00 00 00 00 00 00 01 00 | 01 | 00"),
]


@pytest.mark.parametrize("label, record_type, version, data, wire", SPEC_4_6, ids=[c[0] for c in SPEC_4_6])
def test_spec_4_6_worked_examples_decode_and_encode(label, record_type, version, data, wire):
    raw = h(wire)
    if version is None:
        key = decode_key(raw)
        assert (key.record_type, key.data, key.consumed) == (record_type, data, len(raw))
        assert encode_key(record_type, data) == raw
    else:
        value = decode_value(record_type, raw)
        assert (value.version, value.data, value.consumed) == (version, data, len(raw))
        assert encode_value(record_type, version, data) == raw


SUBSCRIPTION_V3 = ("00 03 | 00 00 00 01 00 06 6f 72 64 65 72 73 | ff ff ff ff | 00 00 00 01 00 06 6f 72 64 65 72 73"
                   " 00 00 00 02 00 00 00 00 00 00 00 01 | 00 00 00 07 | ff ff")
ASSIGNMENT_V3 = "00 03 | 00 00 00 01 00 06 6f 72 64 65 72 73 00 00 00 02 00 00 00 00 00 00 00 01 | ff ff ff ff"


def test_spec_5_subscription_example():
    expected = {"version": 3, "topics": ["orders"], "userData": None,
                "ownedPartitions": [{"topic": "orders", "partitions": [0, 1]}], "generationId": 7, "rackId": None,
                "truncated": False}
    assert decode_subscription(h(SUBSCRIPTION_V3)) == expected
    assert encode_subscription(expected) == h(SUBSCRIPTION_V3)


def test_spec_5_assignment_example():
    expected = {"version": 3, "assignedPartitions": [{"topic": "orders", "partitions": [0, 1]}], "userData": None}
    assert decode_assignment(h(ASSIGNMENT_V3)) == expected
    assert encode_assignment(expected) == h(ASSIGNMENT_V3)


# spec §9, checked there against a real JVM
SPEC_9 = [
    ("hello", 99162322, 22),
    ("test", 3556498, 48),
    ("", 0, 0),
    ("polygenelubricants", -2147483648, 0),
    ("my-group", -1906497762, 12),
    ("groupé", -1237460406, 6),
    ("grp-\U0001F600", -1235730613, 13),
]


@pytest.mark.parametrize("group_id, hash_code, partition", SPEC_9)
def test_spec_9_hash_and_partition(group_id, hash_code, partition):
    assert java_string_hash(group_id) == hash_code
    assert partition_for(group_id) == partition
    assert partition_for(group_id, 50) == partition


def test_partition_for_uses_the_given_partition_count():
    assert partition_for("hello", 7) == 99162322 % 7
    assert partition_for("my-group", 1) == 0
    with pytest.raises(ValueError):
        partition_for("g", 0)


def test_java_hash_counts_lone_surrogates_as_code_units():
    assert java_string_hash("\ud83d") == 0xD83D


OC_KEY = {"group": "group-id", "topic": "foo", "partition": 1}
OC_VALUE = {"offset": 100, "leaderEpoch": 10, "metadata": "metadata", "commitTimestamp": 1234}


def test_spec_11_2_offset_commit_v3():
    out = to_kafka_json(encode_key(1, OC_KEY), encode_value(1, 3, OC_VALUE))
    assert out == ('{"key":{"type":1,"data":{"group":"group-id","topic":"foo","partition":1}},'
                   '"value":{"version":3,"data":{"offset":100,"leaderEpoch":10,"metadata":"metadata",'
                   '"commitTimestamp":1234}}}')


def test_spec_11_2_offset_commit_v4_with_topic_id():
    out = to_kafka_json(encode_key(1, OC_KEY), encode_value(1, 4, {**OC_VALUE, "topicId": "MKXx1fIkQy2J9jXHhK8m1w"}))
    assert out.endswith(',"value":{"version":4,"data":{"offset":100,"leaderEpoch":10,"metadata":"metadata",'
                        '"commitTimestamp":1234,"topicId":"MKXx1fIkQy2J9jXHhK8m1w"}}}')
    assert out.startswith('{"key":{"type":1,"data":{"group":"group-id","topic":"foo","partition":1}}')


def test_spec_11_2_group_metadata_v3():
    member = {"memberId": "member-1", "groupInstanceId": "group-instance-1", "clientId": "client-1",
              "clientHost": "host-1", "rebalanceTimeout": 1000, "sessionTimeout": 1500,
              "subscription": b"\x00\x01", "assignment": b"\x01\x02"}
    value = {"protocolType": "consumer", "generation": 1, "protocol": "range", "leader": "leader",
             "currentStateTimestamp": 1234, "members": [member]}
    out = to_kafka_json(encode_key(2, {"group": "group-id"}), encode_value(2, 3, value))
    assert out == ('{"key":{"type":2,"data":{"group":"group-id"}},"value":{"version":3,"data":{"protocolType":"consumer",'
                   '"generation":1,"protocol":"range","leader":"leader","currentStateTimestamp":1234,"members":'
                   '[{"memberId":"member-1","groupInstanceId":"group-instance-1","clientId":"client-1","clientHost":'
                   '"host-1","rebalanceTimeout":1000,"sessionTimeout":1500,"subscription":"AAE=","assignment":"AQI="}]}}}')


def test_spec_11_2_tombstone_prints_null_value():
    assert to_kafka_json(encode_key(1, OC_KEY), None) == (
        '{"key":{"type":1,"data":{"group":"group-id","topic":"foo","partition":1}},"value":null}')
