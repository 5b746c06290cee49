"""Round trips for every record type and version: encode -> decode gives the data back, and
decode -> encode gives the bytes back. Also the tagged-field rules of spec §2 and §4.3."""

import json

import pytest
from codec_samples import KEY_CASES, VALUE_CASES, key_plan, rich_sample, value_plan

from offsets_codec import REGISTRY, decode_key, decode_value, encode_key, encode_value, to_kafka_json
from offsets_codec.errors import EncodeError
from offsets_codec.formatter import json_name
from offsets_codec.writer import normalize


@pytest.mark.parametrize("nulls", [False, True], ids=["rich", "nulls"])
@pytest.mark.parametrize("record_type, version", VALUE_CASES)
def test_every_value_layout_round_trips(record_type, version, nulls):
    data = rich_sample(value_plan(record_type, version), nulls)
    raw = encode_value(record_type, version, data)
    value = decode_value(record_type, raw)
    assert (value.version, value.name, value.consumed) == (version, REGISTRY[record_type].value.name, len(raw))
    assert value.data == data
    assert encode_value(record_type, version, value.data) == raw


@pytest.mark.parametrize("record_type", KEY_CASES)
def test_every_key_layout_round_trips(record_type):
    data = rich_sample(key_plan(record_type))
    raw = encode_key(record_type, data)
    key = decode_key(raw)
    assert (key.record_type, key.name, key.data, key.consumed) == (
        record_type, REGISTRY[record_type].key.name, data, len(raw))
    assert raw[:2] == record_type.to_bytes(2, "big")


@pytest.mark.parametrize("record_type, version", VALUE_CASES)
def test_missing_fields_take_their_defaults(record_type, version):
    raw = encode_value(record_type, version, {})
    value = decode_value(record_type, raw)
    assert value.data == normalize(value_plan(record_type, version), {})
    assert encode_value(record_type, version, value.data) == raw


@pytest.mark.parametrize("record_type, version", VALUE_CASES)
def test_kafka_json_has_the_fields_of_the_version_in_schema_order(record_type, version):
    plan = value_plan(record_type, version)
    data = rich_sample(plan)
    key = encode_key(record_type, rich_sample(key_plan(record_type)))
    parsed = json.loads(to_kafka_json(key, encode_value(record_type, version, data)))
    assert parsed["key"]["type"] == record_type and parsed["value"]["version"] == version
    assert list(parsed["value"]["data"]) == [json_name(fp.name) for fp in plan.fields]


def test_fields_of_other_versions_are_dropped_and_unknown_ones_refused():
    v1 = {"offset": 1, "metadata": "", "commitTimestamp": 2, "expireTimestamp": 3}
    assert decode_value(1, encode_value(1, 3, v1)).data == {"offset": 1, "leaderEpoch": -1, "metadata": "",
                                                            "commitTimestamp": 2}
    with pytest.raises(EncodeError, match="unknown field"):
        encode_value(1, 3, {"ofset": 1})
    with pytest.raises(EncodeError, match="unknown value version 5"):
        encode_value(1, 5, {})
    with pytest.raises(EncodeError, match="unknown record type 42"):
        encode_key(42, {})


@pytest.mark.parametrize(
    "data, message",
    [
        ({"offset": "1"}, "needs an int"),
        ({"offset": 2**63}, "out of range"),
        ({"metadata": None}, "null string in non-nullable field metadata"),
        ({"metadata": 5}, "needs a str"),
    ],
)
def test_encoder_refuses_bad_values(data, message):
    with pytest.raises(EncodeError, match=message):
        encode_value(1, 3, data)


# --- tagged fields -------------------------------------------------------------------------------------

MEMBER = {"InstanceId": None, "RackId": None, "ClientId": "c", "ClientHost": "h", "SubscribedTopicNames": ["t"],
          "SubscribedTopicRegex": None, "RebalanceTimeoutMs": 1000, "ServerAssignor": None}
MEMBER_PREFIX = "0000 00 00 0263 0268 02 0274 00 000003e8 00"


def test_absent_tag_reads_as_the_empty_struct_not_null():
    value = decode_value(5, bytes.fromhex(MEMBER_PREFIX.replace(" ", "") + "00"))
    assert value.data["ClassicMemberMetadata"] == {"SessionTimeoutMs": 0, "SupportedProtocols": []}


def test_null_nullable_tagged_struct_is_written_as_a_zero_marker():
    raw = encode_value(5, 0, {**MEMBER, "ClassicMemberMetadata": None})
    assert raw.hex() == MEMBER_PREFIX.replace(" ", "") + "01" "00" "01" "00"
    assert decode_value(5, raw).data["ClassicMemberMetadata"] is None


def test_empty_nullable_tagged_struct_equals_its_default_and_is_not_written():
    raw = encode_value(5, 0, {**MEMBER, "ClassicMemberMetadata": {"SessionTimeoutMs": 0, "SupportedProtocols": []}})
    assert raw.hex() == MEMBER_PREFIX.replace(" ", "") + "00"
    assert encode_value(5, 0, {**MEMBER, "ClassicMemberMetadata": {}}) == raw  # defaults fill the struct first


def test_nullable_tagged_array_null_vs_empty_vs_values():
    base = {"Epoch": 1, "MetadataHash": 2}
    assert encode_value(17, 0, {**base, "LastAssignmentConfigs": []}).hex() == "0000" "00000001" "0000000000000002" "00"
    null = encode_value(17, 0, {**base, "LastAssignmentConfigs": None})
    assert null.hex() == "0000" "00000001" "0000000000000002" "01" "01" "01" "00"
    value = decode_value(17, null)
    assert value.data == {**base, "ValidatedTopologyEpoch": -1, "LastAssignmentConfigs": None,
                          "StoredDescriptionTopologyEpoch": -1, "FailedDescriptionTopologyEpoch": -1}
    two = encode_value(17, 0, {**base, "LastAssignmentConfigs": [{"Key": "a", "Value": "b"}], "ValidatedTopologyEpoch": 3,
                               "FailedDescriptionTopologyEpoch": 4})
    # tags in ascending order: 0 (int32), 1 (compact array of one struct), 3 (int32)
    assert two.hex().endswith("03" "00" "04" "00000003" "01" "06" "02" "0261" "0262" "00" "03" "04" "00000004")
    assert decode_value(17, two).data["LastAssignmentConfigs"] == [{"Key": "a", "Value": "b"}]


def test_tagged_fields_are_left_out_of_kafka_json_only_when_default():
    key = encode_key(17, {"GroupId": "g"})
    base = {"Epoch": 1, "MetadataHash": 2}
    assert to_kafka_json(key, encode_value(17, 0, base)).endswith('"data":{"epoch":1,"metadataHash":2}}}')
    out = to_kafka_json(key, encode_value(17, 0, {**base, "LastAssignmentConfigs": None, "ValidatedTopologyEpoch": 0}))
    assert out.endswith('"data":{"epoch":1,"metadataHash":2,"validatedTopologyEpoch":0,"lastAssignmentConfigs":null}}}')


def test_untagged_nullable_struct_uses_an_int8_marker():
    base = {"InstanceId": None, "RackId": None, "ClientId": "", "ClientHost": "", "RebalanceTimeoutMs": -1,
            "TopologyEpoch": 0, "ProcessId": "", "ClientTags": []}
    assert encode_value(19, 0, {**base, "UserEndpoint": None}).hex() == "0000" "00" "00" "01" "01" "ffffffff" "00000000" "01" "ff" "01" "00"
    raw = encode_value(19, 0, {**base, "UserEndpoint": {"Host": "h", "Port": 65535}})
    assert raw.hex() == "0000" "00" "00" "01" "01" "ffffffff" "00000000" "01" "01" "0268" "ffff" "00" "01" "00"
    assert decode_value(19, raw).data["UserEndpoint"] == {"Host": "h", "Port": 65535}


def test_kafka_json_escapes_like_jackson_and_keeps_non_ascii():
    key = encode_key(1, {"group": 'g"\\\n\x01é😀', "topic": "t", "partition": 0})
    out = to_kafka_json(key, None)
    assert out == '{"key":{"type":1,"data":{"group":"g\\"\\\\\\n\\u0001é😀","topic":"t","partition":0}},"value":null}'
    assert json.loads(out)["key"]["data"]["group"] == 'g"\\\n\x01é😀'


def test_type_0_is_formatted_like_kafka_formats_legacy_commits():
    key = encode_key(0, {"group": "group-id", "topic": "foo", "partition": 1})
    value = encode_value(0, 0, {"offset": 100, "metadata": "metadata", "commitTimestamp": 1234})
    assert to_kafka_json(key, value) == ('{"key":{"type":0,"data":{"group":"group-id","topic":"foo","partition":1}},'
                                         '"value":{"version":0,"data":{"offset":100,"metadata":"metadata",'
                                         '"commitTimestamp":1234}}}')
    assert decode_value(0, encode_value(0, 3, {"offset": 1})).version == 3  # any OffsetCommitValue version
