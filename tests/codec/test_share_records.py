"""The share coordinator's records (``__share_group_state``): every declared version of ShareSnapshot and
ShareUpdate round-trips with the encoder, with its own registry, never the offsets topic's."""

import pytest
from codec_samples import rich_sample, struct_strategy
from hypothesis import given, settings

from offsets_codec import REGISTRY, SHARE_STATE, SHARE_STATE_REGISTRY, DecodeError, decode_key
from offsets_codec.plan import plan_for
from offsets_codec.registry import SHARE_SNAPSHOT, SHARE_UPDATE

CASES = [(t, v) for t, rt in sorted(SHARE_STATE_REGISTRY.items()) for v in rt.value.versions]
KEY = {"GroupId": "share-g", "TopicId": "AAAAAAAAAAAAAAAAAAAAAQ", "Partition": 7}
SNAPSHOT = {"SnapshotEpoch": 3, "StateEpoch": 1, "LeaderEpoch": 5, "StartOffset": 100, "DeliveryCompleteCount": 2,
            "CreateTimestamp": 1_700_000_000_000, "WriteTimestamp": 1_700_000_001_000,
            "StateBatches": [{"FirstOffset": 100, "LastOffset": 104, "DeliveryState": 0, "DeliveryCount": 1},
                             {"FirstOffset": 105, "LastOffset": 106, "DeliveryState": 2, "DeliveryCount": 1}]}


def test_the_types_are_kafkas():
    assert (SHARE_SNAPSHOT, SHARE_UPDATE) == (0, 1)
    assert [SHARE_STATE_REGISTRY[t].value.name for t in (0, 1)] == ["ShareSnapshotValue", "ShareUpdateValue"]


@pytest.mark.parametrize("record_type, version", CASES)
def test_every_version_round_trips(record_type, version):
    rt = SHARE_STATE_REGISTRY[record_type]
    data = rich_sample(plan_for(rt.value, version))
    raw = SHARE_STATE.encode_value(record_type, version, data)
    value = SHARE_STATE.decode_value(record_type, raw)
    assert (value.version, value.name, value.data, value.consumed) == (version, rt.value.name, data, len(raw))
    assert SHARE_STATE.encode_value(record_type, version, value.data) == raw


@pytest.mark.parametrize("record_type, version", CASES)
def test_any_value_round_trips(record_type, version):
    plan = plan_for(SHARE_STATE_REGISTRY[record_type].value, version)

    @settings(max_examples=50, deadline=None)
    @given(struct_strategy(plan))
    def round_trip(data):
        raw = SHARE_STATE.encode_value(record_type, version, data)
        assert SHARE_STATE.decode_value(record_type, raw).data == data

    round_trip()


@pytest.mark.parametrize("record_type", sorted(SHARE_STATE_REGISTRY))
def test_both_keys_round_trip(record_type):
    raw = SHARE_STATE.encode_key(record_type, KEY)
    assert raw[:2] == record_type.to_bytes(2, "big")
    key = SHARE_STATE.decode_key(raw)
    assert (key.record_type, key.data, key.consumed) == (record_type, KEY, len(raw))


def test_a_snapshot_decodes_field_by_field():
    value = SHARE_STATE.decode_value(SHARE_SNAPSHOT, SHARE_STATE.encode_value(SHARE_SNAPSHOT, 0, SNAPSHOT))
    assert value.data == SNAPSHOT


def test_delivery_complete_count_is_a_tag_absent_before_4_2():
    """KIP-1226's DeliveryCompleteCount is tagged: a 4.1 record has no tag and reads as -1."""
    update = {"SnapshotEpoch": 0, "LeaderEpoch": 1, "StartOffset": -1, "StateBatches": []}
    raw = SHARE_STATE.encode_value(SHARE_UPDATE, 0, update)
    assert raw.endswith(b"\x00")  # no tagged fields
    assert SHARE_STATE.decode_value(SHARE_UPDATE, raw).data == {**update, "DeliveryCompleteCount": -1}
    tagged = SHARE_STATE.encode_value(SHARE_UPDATE, 0, {**update, "DeliveryCompleteCount": 4})
    assert len(tagged) == len(raw) + 6  # tag, size, int32
    assert SHARE_STATE.decode_value(SHARE_UPDATE, tagged).data["DeliveryCompleteCount"] == 4


def test_the_offsets_registry_never_reads_share_records():
    key = SHARE_STATE.encode_key(SHARE_SNAPSHOT, KEY)
    # Type 0 of __consumer_offsets is a legacy offset commit: the same bytes mean something else there.
    assert REGISTRY[SHARE_SNAPSHOT].name == "LegacyOffsetCommit"
    assert decode_key(key).name != "ShareSnapshotKey"


def test_an_early_access_snapshot_does_not_decode():
    """4.0 wrote SnapshotEpoch as uint16 and no timestamps: read with today's layout it runs short."""
    old = bytes.fromhex("0000" "0003" "00000001" "00000005" "0000000000000064" "01" "00")
    with pytest.raises(DecodeError):
        SHARE_STATE.decode_value(SHARE_SNAPSHOT, old)
