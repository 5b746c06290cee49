"""The native offset-commit reader (jobs.native) against the codec: it accepts only what the codec accepts,
and reads the same values. One Spark job over a corpus of valid, damaged and random records."""
from __future__ import annotations

import random

import pytest
from pyspark.sql import functions as F

from jobs import decode, native
from offsets_codec import DecodeError, decode_key, encode_key
from offset_corpus import codec_accepts, commit_values, damaged_values

def _keys(rng: random.Random) -> list[bytes]:
    good = [encode_key(t, {"group": g, "topic": topic, "partition": p})
            for t in (0, 1) for g, topic, p in [("g", "t", 0), ("grp-é", "orders", 2**31 - 1), ("", "", -5)]]
    bad = [k[:n] for k in good[:2] for n in range(len(k))]
    bad += [good[1] + b"\x01", b"\x00\x01\x00\x02\xc3\x28\x00\x01t\x00\x00\x00\x00", b"\x00\x02\x00\x01g",
            b"\x00\x01\xff\xff\x00\x01t\x00\x00\x00\x00"]
    bad += [bytes(rng.randrange(256) for _ in range(rng.randrange(20))) for _ in range(100)]
    return good + bad


@pytest.fixture(scope="module")
def corpus(spark):
    rng = random.Random(848)
    values = commit_values(rng)
    values += damaged_values(rng, values)
    keys = _keys(rng)
    good_key = keys[0]
    rows = [(good_key, v) for v in values] + [(k, values[0]) for k in keys]
    df = spark.createDataFrame(rows, "key binary, value binary")
    key, value = native.offset_key(), native.offset_value()
    return native.with_read(df, [key, value], {
        "key_ok": key.ok, "value_ok": value.ok, "c": native.offset_commit_struct(key, value)}).collect()


def _codec_key_ok(key: bytes) -> bool:
    try:
        return decode_key(key).record_type in (0, 1)
    except DecodeError:
        return False


def _left_to_the_codec(value: bytes) -> bool:
    """Shapes the native reader leaves to the Python check: v4 with a metadata length needing a multi-byte
    varint, or tagged fields other than none or exactly the topicId."""
    if value[:2] != b"\x00\x04" or len(value) < 15:
        return False
    if value[14] >= 0x80:
        return True
    tags = value[14 + value[14] + 8:]
    return tags[:1] not in (b"\x00", b"") and tags[:3] != b"\x01\x00\x10"


def test_native_accepts_only_what_the_codec_accepts_and_all_common_shapes(corpus):
    assert len(corpus) > 800
    accepted = left = 0
    for r in corpus:
        codec_ok = codec_accepts(r.value)
        if r.value_ok != codec_ok:
            assert codec_ok and _left_to_the_codec(r.value), r.value.hex()
            left += 1
        assert r.key_ok == _codec_key_ok(r.key), r.key.hex()
        accepted += r.value_ok
    assert accepted > 60 and left >= 3  # the corpus is not all junk, and has the shapes left to the codec


def test_native_values_are_the_codec_values(corpus):
    checked = 0
    for r in corpus:
        if r.key_ok and r.value_ok:
            assert r.c.asDict() == decode.offset_commit_columns(r.key, r.value), r.value.hex()
            checked += 1
    assert checked > 60
