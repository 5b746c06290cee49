"""The public surface the Spark job relies on."""

import dataclasses

import pytest

import offsets_codec
from offsets_codec import REGISTRY, DecodeError, Key, Record, Value, decode_key, decode_record, decode_value


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


KEY = h("0001 0001 67 0001 74 00000007")
VALUE = h("0003 0000000000000005 ffffffff 0000 0000000000000009")


def test_public_names():
    from offsets_codec import encode_key, encode_value, java_string_hash, partition_for, to_kafka_json  # noqa: F401
    from offsets_codec.consumer_protocol import (  # noqa: F401
        decode_assignment,
        decode_subscription,
        encode_assignment,
        encode_subscription,
        subscribed_topics_v0,
    )

    assert issubclass(DecodeError, ValueError)
    assert set(offsets_codec.__all__) >= {"DecodeError", "decode_key", "decode_value", "decode_record", "encode_key",
                                          "encode_value", "Key", "Value", "Record", "REGISTRY", "to_kafka_json",
                                          "partition_for", "java_string_hash"}


def test_decoded_objects_are_frozen_dataclasses_equal_to_constructed_ones():
    record = decode_record(KEY, VALUE)
    assert record == Record(
        Key(1, "OffsetCommitKey", {"group": "g", "topic": "t", "partition": 7}, len(KEY)),
        Value(3, "OffsetCommitValue", {"offset": 5, "leaderEpoch": -1, "metadata": "", "commitTimestamp": 9}, len(VALUE)),
    )
    assert not record.tombstone and decode_record(KEY, None).tombstone
    for obj in (record, record.key, record.value):
        assert dataclasses.is_dataclass(obj)
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_any_bytes_like_input_is_accepted(wrap):
    assert decode_key(wrap(KEY)).data["partition"] == 7
    assert decode_value(1, wrap(VALUE)).data["offset"] == 5


def test_record_type_families_for_the_job():
    families = {}
    for t, rt in REGISTRY.items():
        families.setdefault(rt.group_family, []).append(t)
    assert families == {"offsets": [0, 1], "classic": [2], "consumer": [3, 4, 5, 6, 7, 8, 16],
                        "share": [9, 10, 11, 12, 13, 14, 15], "streams": [17, 18, 19, 20, 21, 22, 23]}


def test_results_and_errors_pickle_for_spark_workers():
    import pickle

    record = decode_record(KEY, VALUE)
    assert pickle.loads(pickle.dumps(record)) == record
    assert pickle.loads(pickle.dumps(REGISTRY[1])) == REGISTRY[1]
