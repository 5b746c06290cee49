"""Exact DecodeError messages and attributes: they end up verbatim in quarantine rows."""

import pickle
import time

import pytest

from offsets_codec import DecodeError, decode_key, decode_record, decode_value, encode_value
from offsets_codec.consumer_protocol import decode_assignment, decode_subscription, subscribed_topics_v0


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace("|", " "))


def error_of(fn, *args) -> DecodeError:
    with pytest.raises(DecodeError) as e:
        fn(*args)
    assert str(e.value) == e.value.reason
    assert "\n" not in e.value.reason
    return e.value


def test_unknown_record_type_in_key_and_value():
    e = error_of(decode_key, h("002a 0001 61"))
    assert (e.reason, e.record_type, e.field, e.position) == ("unknown record type 42", 42, "type", 0)
    assert error_of(decode_value, 42, h("0000")).reason == "unknown record type 42"
    assert error_of(decode_key, h("ffff")).reason == "unknown record type -1"


def test_unknown_value_version():
    e = error_of(decode_value, 1, h("0009 00000000"))
    assert (e.reason, e.record_type, e.version) == ("unknown value version 9 for record type 1", 1, 9)
    assert error_of(decode_value, 3, h("0001 00")).reason == "unknown value version 1 for record type 3"
    assert error_of(decode_value, 1, h("ffff")).reason == "unknown value version -1 for record type 1"


def test_truncated_int64_names_the_byte_and_field():
    # v1: offset (8) | metadata "ab" (2+2) | commitTimestamp starts at byte 2+8+4 = 14, only 3 bytes left
    e = error_of(decode_value, 1, h("0001 000000000000002a 0002 6162 000000"))
    assert e.reason == "truncated at byte 14 reading int64 commitTimestamp"
    assert (e.record_type, e.version, e.field, e.position) == (1, 1, "commitTimestamp", 14)


def test_truncated_nested_string_uses_the_dotted_path():
    # v0: protocolType "consumer" -> 12 | generation -> 16 | protocol null -> 18 | leader null -> 20
    # | members count -> 24 | memberId (2 + 14) -> 40 | clientId claims 5 bytes, has 1
    value = h("0000 0008 636f6e73756d6572 00000001 ffff ffff 00000001") + h("000e") + b"member-1234567" + h("0005 61")
    e = error_of(decode_value, 2, value)
    assert e.reason == "truncated at byte 40 reading string members[0].clientId"
    assert (e.field, e.position) == ("members[0].clientId", 40)


def test_error_in_a_later_array_element_names_its_index():
    member = h("0001 61 0001 62 0001 63 00000001 00000000 00000000")  # v0 member: ids a, b, c
    # members start at byte 16 and take 21 bytes each; the third one's clientHost (at 58 + 6) claims 256 bytes
    value = h("0000 0000 00000001 ffff ffff 00000003") + member + member + h("0001 61 0001 62 0100") + bytes(20)
    assert error_of(decode_value, 2, value).reason == "truncated at byte 64 reading string members[2].clientHost"


def test_invalid_utf8():
    e = error_of(decode_key, h("0002 0002 fffe"))
    assert (e.reason, e.field, e.position) == ("invalid UTF-8 in string group", "group", 2)


def test_null_and_empty_and_short_keys():
    assert error_of(decode_key, None).reason == "null key"
    assert error_of(decode_key, b"").reason == "empty key"
    assert error_of(decode_key, b"\x00").reason == "truncated at byte 0 reading int16 type"
    assert error_of(decode_key, "0001").reason == "key must be bytes, got str"


def test_null_empty_and_short_values():
    assert error_of(decode_value, 1, None).reason == "null value"
    assert error_of(decode_value, 1, b"").reason == "empty value"
    assert error_of(decode_value, 1, b"\x00").reason == "truncated at byte 0 reading int16 version"
    assert error_of(decode_value, [1], b"\x00\x00").reason == "unknown record type [1]"


def test_null_string_in_non_nullable_fields():
    assert error_of(decode_key, h("0001 ffff")).reason == "null string in non-nullable field group"
    member = h("0001 61 ffff") + bytes(16)  # padded so the array count passes its minimum-size check
    value = h("0000 0000 00000001 ffff ffff 00000001") + member
    assert error_of(decode_value, 2, value).reason == "null string in non-nullable field members[0].clientId"
    # flexible: compact null (0x00) in ShareGroupMemberMetadataValue.ClientId
    assert error_of(decode_value, 10, h("0000 00 00")).reason == "null string in non-nullable field ClientId"


def test_negative_lengths_other_than_minus_one():
    assert error_of(decode_key, h("0001 0001 61 fffb")).reason == "invalid length -5 for string topic"
    # also for nullable fields, where Kafka would read any negative length as null
    value = h("0000 0000 00000001 fffe")
    assert error_of(decode_value, 2, value).reason == "invalid length -2 for string protocol"
    value = h("0000 0000 00000001 ffff ffff 00000001 0001 61 0001 62 0001 63 00000001 fffffffe") + bytes(4)
    assert error_of(decode_value, 2, value).reason == "invalid length -2 for bytes members[0].subscription"
    assert error_of(decode_value, 2, h("0000 0000 00000001 ffff ffff fffffff0")).reason == (
        "invalid length -16 for array members")
    assert error_of(decode_value, 2, h("0000 0000 00000001 ffff ffff ffffffff")).reason == (
        "null array in non-nullable field members")


def test_huge_array_count_fails_fast_without_allocating():
    value = h("0000 0000 00000001 ffff ffff 7fffffff") + bytes(10)
    start = time.perf_counter()
    e = error_of(decode_value, 2, value)
    assert time.perf_counter() - start < 0.5
    # a v0 member takes at least 18 bytes: three empty strings, an int32 and two empty byte arrays
    assert e.reason == (
        "truncated at byte 12 reading array members: 2147483647 elements need at least 38654705646 bytes, 10 remain")
    # compact counts are bounded the same way
    e = error_of(decode_value, 7, h("0000 ffffffff07"))
    assert e.reason.startswith("truncated at byte 2 reading array TopicPartitions: 2147483646 elements need")


def test_tagged_field_whose_size_disagrees_with_its_value():
    base = "0004 000000000000002a 00000005 01 0000018bcfe56800"
    e = error_of(decode_value, 1, h(base + "01 00 11" + "01" * 17))
    assert e.reason == "tagged field topicId (tag 0) declares 17 bytes but its value used 16"
    e = error_of(decode_value, 1, h(base + "01 00 08" + "01" * 8))
    assert e.reason == "truncated at byte 26 reading uuid topicId"  # count 23, tag 24, size 25, payload 26
    e = error_of(decode_value, 1, h(base + "01 00 10" + "01" * 4))
    assert e.reason == "truncated at byte 24 reading tagged field topicId"
    e = error_of(decode_value, 1, h(base + "02 07 05 0102"))
    assert e.reason == "truncated at byte 24 reading tagged field <tag 7>"
    e = error_of(decode_value, 1, h(base))
    assert e.reason == "truncated at byte 23 reading uvarint _tagged_fields"


def test_unknown_tags_are_skipped_by_size_and_known_ones_still_read():
    base = "0004 000000000000002a 00000005 01 0000018bcfe56800"
    value = decode_value(1, h(base + "02 00 10" + "01" * 16 + "05 03 aabbcc"))
    assert value.data["topicId"] == "AQEBAQEBAQEBAQEBAQEBAQ"
    assert value.consumed == len(h(base)) + 1 + 18 + 5
    assert decode_value(1, h(base + "01 05 00")).data["topicId"] == "AAAAAAAAAAAAAAAAAAAAAA"


def test_nested_tagged_errors_point_into_the_whole_value():
    # ConsumerGroupCurrentMemberAssignment, one topic whose AssignmentEpochs tag claims 2 ints but has 1
    uuid = "0102030405060708090a0b0c0d0e0f10"
    value = h(f"0000 00000001 00000000 00 02 {uuid} 02 00000005 01 00 05 03 00000009 01 00")
    e = error_of(decode_value, 8, value)
    # tag payload starts at byte 36: 2 + 4 + 4 + 1 + 1 (count) + 16 (uuid) + 1 + 4 + 1 (tags) + 1 + 1
    assert e.reason == ("truncated at byte 36 reading array AssignedPartitions[0].AssignmentEpochs: "
                        "2 elements need at least 8 bytes, 4 remain")
    assert e.position == 36


def test_invalid_presence_marker():
    # StreamsGroupMemberMetadataValue: InstanceId null, RackId null, ClientId "", ClientHost "", 2 ints,
    # ProcessId "", then UserEndpoint marker 2
    value = h("0000 00 00 01 01 ffffffff 00000000 01 02")
    e = error_of(decode_value, 19, value)
    assert e.reason == "invalid presence marker 2 at byte 15 for struct UserEndpoint"


def test_overlong_varint():
    assert error_of(decode_value, 3, h("0000 00000005 ffffffffff01")).reason == (
        "invalid varint at byte 6 reading uvarint _tagged_fields: more than 5 bytes")


def test_trailing_bytes_are_accepted_and_reported_through_consumed():
    raw = encode_value(1, 3, {"offset": 1, "metadata": "", "commitTimestamp": 2})
    value = decode_value(1, raw + b"\x00\x01\x02")
    assert (value.consumed, len(raw)) == (len(raw), len(raw) + 3 - 3)


def test_decode_record_errors_carry_the_record_type():
    e = error_of(decode_record, h("0001 0001 61 0001 62 00000001"), b"\x00\x03")
    assert (e.reason, e.record_type, e.version) == ("truncated at byte 2 reading int64 offset", 1, 3)
    assert error_of(decode_record, h("0001 0001 61 0001 62 00000001"), b"").reason == "empty value"


def test_decode_error_survives_pickling_with_its_attributes():
    e = error_of(decode_value, 1, h("0001 000000000000002a 0002 6162 000000"))
    e2 = pickle.loads(pickle.dumps(e))
    assert isinstance(e2, DecodeError) and isinstance(e2, ValueError)
    assert (e2.reason, e2.record_type, e2.version, e2.field, e2.position) == (
        e.reason, e.record_type, e.version, e.field, e.position)


def test_consumer_protocol_errors():
    assert error_of(decode_subscription, b"").reason == "empty subscription"
    assert error_of(decode_assignment, b"").reason == "empty assignment"
    assert error_of(decode_subscription, b"\x00").reason == "truncated at byte 0 reading int16 version"
    e = error_of(decode_subscription, h("ffff 00000000 ffffffff"))
    assert (e.reason, e.version) == ("unsupported subscription version -1", -1)
    assert error_of(decode_assignment, h("fffe 00000000 ffffffff")).reason == "unsupported assignment version -2"
    assert error_of(decode_assignment, h("0000 00000001 0009 616263 00000000")).reason == (
        "truncated at byte 6 reading string AssignedPartitions[0].Topic")
    assert error_of(subscribed_topics_v0, h("0000 00000001")).reason == (
        "truncated at byte 2 reading array Topics: 1 elements need at least 2 bytes, 0 remain")
    assert error_of(decode_subscription, None).reason == "null subscription"
