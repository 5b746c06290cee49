"""Consumer Protocol payloads inside GroupMetadata members (spec §5), spelled out byte by byte."""

import pytest

from offsets_codec import DecodeError
from offsets_codec.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    subscribed_topics_v0,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace("|", " "))


TOPICS = "00000002 0001 61 0001 62"  # ["a", "b"]
USER_DATA = "00000002 cafe"
OWNED = "00000001 0001 61 00000002 00000000 00000003"  # a: [0, 3]
GEN = "00000009"
RACK = "0002 7231"  # "r1"

BASE = {"topics": ["a", "b"], "userData": b"\xca\xfe", "ownedPartitions": [], "generationId": -1, "rackId": None,
        "truncated": False}
FULL_OWNED = [{"topic": "a", "partitions": [0, 3]}]

SUBSCRIPTIONS = [
    (0, f"0000 | {TOPICS} | {USER_DATA}", {}),
    (1, f"0001 | {TOPICS} | {USER_DATA} | {OWNED}", {"ownedPartitions": FULL_OWNED}),
    (2, f"0002 | {TOPICS} | {USER_DATA} | {OWNED} | {GEN}", {"ownedPartitions": FULL_OWNED, "generationId": 9}),
    (3, f"0003 | {TOPICS} | {USER_DATA} | {OWNED} | {GEN} | {RACK}",
     {"ownedPartitions": FULL_OWNED, "generationId": 9, "rackId": "r1"}),
]


@pytest.mark.parametrize("version, wire, fields", SUBSCRIPTIONS)
def test_subscription_versions(version, wire, fields):
    expected = {"version": version, **BASE, **fields}
    assert decode_subscription(h(wire)) == expected
    assert encode_subscription(expected) == h(wire)
    assert subscribed_topics_v0(h(wire)) == ["a", "b"]


def test_newer_subscription_versions_are_read_with_the_v3_layout_and_trailing_bytes_ignored():
    sub = decode_subscription(h(f"0007 | {TOPICS} | {USER_DATA} | {OWNED} | {GEN} | {RACK} | 01020304"))
    assert sub == {"version": 7, **BASE, "ownedPartitions": FULL_OWNED, "generationId": 9, "rackId": "r1"}
    assert encode_subscription(sub)[:2] == h("0003")  # written back as v3, as Kafka's serializer clamps


def test_null_user_data_and_null_rack():
    sub = decode_subscription(h(f"0003 | {TOPICS} | ffffffff | 00000000 | {GEN} | ffff"))
    assert (sub["userData"], sub["rackId"], sub["ownedPartitions"]) == (None, None, [])


@pytest.mark.parametrize(
    "wire, version, fields",
    [
        # kafka-go / sarama-cluster: claims v1, ends right after UserData
        (f"0001 | {TOPICS} | {USER_DATA}", 1, {}),
        (f"0003 | {TOPICS} | {USER_DATA}", 3, {}),
        # ends after OwnedPartitions although it says v2
        (f"0002 | {TOPICS} | {USER_DATA} | {OWNED}", 2, {"ownedPartitions": FULL_OWNED}),
        (f"0003 | {TOPICS} | {USER_DATA} | {OWNED} | {GEN}", 3, {"ownedPartitions": FULL_OWNED, "generationId": 9}),
    ],
)
def test_subscription_that_stops_after_an_older_versions_fields_is_read_as_far_as_it_goes(wire, version, fields):
    assert decode_subscription(h(wire)) == {"version": version, **BASE, **fields, "truncated": True}


def test_subscription_with_garbage_after_the_v0_fields_is_still_an_error():
    with pytest.raises(DecodeError) as e:
        decode_subscription(h(f"0001 | {TOPICS} | {USER_DATA} | 0000"))
    assert e.value.reason == "truncated at byte 18 reading array OwnedPartitions"  # 2 + 10 + 6


def test_broker_parse_reads_only_the_v0_fields_whatever_the_version_says():
    assert subscribed_topics_v0(h(f"ffff | {TOPICS} | {USER_DATA}")) == ["a", "b"]  # Kafka ignores the version
    assert subscribed_topics_v0(h(f"0001 | {TOPICS} | {USER_DATA}")) == ["a", "b"]  # the kafka-go shape too
    with pytest.raises(DecodeError, match="truncated at byte 2 reading array Topics"):
        subscribed_topics_v0(h("0000 0000"))
    with pytest.raises(DecodeError, match="truncated at byte 12 reading bytes UserData"):
        subscribed_topics_v0(h(f"0000 | {TOPICS}"))


ASSIGNED = "00000001 0001 61 00000002 00000000 00000003"


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_layout_is_the_same_in_every_version(version):
    wire = h(f"{version:04x} | {ASSIGNED} | {USER_DATA}")
    expected = {"version": version, "assignedPartitions": FULL_OWNED, "userData": b"\xca\xfe"}
    assert decode_assignment(wire) == expected
    assert encode_assignment(expected) == wire


def test_newer_assignment_versions_are_clamped():
    assert decode_assignment(h(f"0009 | {ASSIGNED} | ffffffff | 00"))["assignedPartitions"] == FULL_OWNED


def test_encoders_validate_their_input():
    with pytest.raises(ValueError, match="unsupported subscription version -1"):
        encode_subscription({"topics": []}, -1)
    with pytest.raises(ValueError, match="unknown field"):
        encode_assignment({"assigned": []})
    assert encode_assignment({"assignedPartitions": []}, 0) == h("0000 00000000 ffffffff")
