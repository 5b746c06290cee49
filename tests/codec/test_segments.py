"""Real broker segments (../shared/testdata/broker-segments): the segment reader finds no damage
(every batch CRC verifies) and the batch and record counts of the manifest; every record decodes to
its last byte, re-encodes to the same bytes, and the record mix matches the histogram in the
manifest, which was counted by an independent tool."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from codec_testdata import TESTDATA

from offsets_codec import Batch, decode_key, decode_value, encode_key, encode_value, to_kafka_json
from offsets_codec.compression import CODEC_NAMES
from offsets_codec.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    subscribed_topics_v0,
)
from offsets_codec.segments import read_segment_file

MANIFEST = TESTDATA / "broker-segments" / "MANIFEST.json"
GROUP_METADATA = 2


def _entries() -> list[int]:
    return list(range(len(json.loads(MANIFEST.read_text())))) if MANIFEST.is_file() else [0]


@pytest.fixture(scope="module")
def manifest(testdata):
    path = testdata / "broker-segments" / "MANIFEST.json"
    if not path.is_file():
        pytest.skip(f"../shared/testdata not found: missing {path}")
    return json.loads(path.read_text())


def _member_counts(members: list[dict], histogram: Counter) -> None:
    for m in members:
        sub = decode_subscription(m["subscription"])
        # the manifest marks the kafka-go "v1 without OwnedPartitions" subscriptions as errors
        histogram[f"subscription.v{sub['version']}" + ("(ERR)" if sub["truncated"] else "")] += 1
        assert subscribed_topics_v0(m["subscription"]) == sub["topics"]
        if not sub["truncated"]:
            assert encode_subscription(sub) == m["subscription"]
        asg = decode_assignment(m["assignment"])
        histogram[f"assignment.v{asg['version']}"] += 1
        assert encode_assignment(asg) == m["assignment"]


@pytest.mark.parametrize("i", _entries())
def test_segment_decodes_completely_and_matches_the_manifest(manifest, testdata, i):
    entry = manifest[i]
    items = list(read_segment_file(testdata / "broker-segments" / entry["file"]))  # CRCs verified
    damage = [x for x in items if not isinstance(x, Batch)]
    assert damage == []
    assert len(items) == entry["batches"]
    assert sorted({b.magic for b in items}) == entry["magic"]
    assert sorted({b.compression for b in items}) == sorted({CODEC_NAMES[c] for c in entry["codecs"]})
    histogram: Counter = Counter()
    # transaction markers are not records of this topic
    for record in (r for b in items if not b.is_control for r in b.records):
        key = decode_key(record.key)
        assert key.consumed == len(record.key)
        assert encode_key(key.record_type, key.data) == record.key
        to_kafka_json(record.key, record.value)  # formats without error
        if record.value is None:
            histogram[f"k{key.record_type}/tombstone"] += 1
            continue
        value = decode_value(key.record_type, record.value)
        assert value.consumed == len(record.value), f"offset {record.offset}: trailing bytes"
        assert encode_value(key.record_type, value.version, value.data) == record.value
        histogram[f"k{key.record_type}/v{value.version}"] += 1
        if key.record_type == GROUP_METADATA:
            histogram[f"protocolType={value.data['protocolType']}"] += 1
            if value.data["protocolType"] == "consumer":
                _member_counts(value.data["members"], histogram)
    assert dict(histogram) == entry["record_histogram"]
    assert sum(v for k, v in histogram.items() if k.startswith("k")) == entry["records"]
