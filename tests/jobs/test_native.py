"""The native offset-commit reader (jobs.native) against the codec: it accepts only what the codec accepts,
and reads the same values. One Spark job over a corpus of valid, damaged and random records."""
from __future__ import annotations

import random

import pytest
from pyspark.sql import functions as F

from jobs import decode, native
from offsets_codec import DecodeError, decode_key, decode_value, encode_key, encode_value
from offsets_codec.wire import uvarint_bytes

UUIDS = ["AQIDBAUGBwgJCgsMDQ4PEA", "AAAAAAAAAAAAAAAAAAAAAA", "_____________________w"]
TEXTS = ["", "m", "metadata-é", "😀" * 3, "x" * 200, "\u0000"]


def _values(rng: random.Random) -> list[bytes]:
    out = []
    for version in range(5):
        for text in TEXTS:
            data = {"offset": rng.choice([0, 1, 2**40, -1, 2**63 - 1, -(2**63)]), "metadata": text,
                    "commitTimestamp": rng.choice([0, 1_700_000_000_000, -1]), "leaderEpoch": rng.choice([-1, 0, 7]),
                    "expireTimestamp": rng.choice([-1, 1_800_000_000_000])}
            if version == 4:
                data["topicId"] = rng.choice(UUIDS)
            out.append(encode_value(1, version, {k: v for k, v in data.items() if _has(version, k)}))
    return out


def _has(version: int, name: str) -> bool:
    return {"leaderEpoch": version >= 3, "expireTimestamp": version == 1, "topicId": version >= 4}.get(name, True)


def _damaged(rng: random.Random, good: list[bytes]) -> list[bytes]:
    out = []
    for raw in good:
        out += [raw[:n] for n in range(0, len(raw), max(1, len(raw) // 6))]  # truncations
        out.append(raw + b"\x00\x07")  # trailing bytes: accepted, as Kafka does
        for _ in range(4):  # flipped bytes
            b = bytearray(raw)
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
            out.append(bytes(b))
    v4 = encode_value(1, 4, {"offset": 5, "metadata": "", "commitTimestamp": 9})
    body = v4[:-1]  # everything before the tagged-field section
    out += [
        body + b"\x01\x00\x10" + bytes(range(16)),  # the topicId tag
        body + b"\x01\x00\x0f" + bytes(range(15)),  # a uuid tag of the wrong size
        body + b"\x01\x05\x02ab",  # an unknown tag: the codec skips it
        body + b"\x02\x00\x10" + bytes(16) + b"\x05\x00",  # two tags
        body[:14] + uvarint_bytes(201) + b"y" * 200 + body[15:] + b"\x00",  # a two-byte varint length
        body[:14] + b"\x00" + body[15:] + b"\x00",  # a null compact string (metadata is not nullable)
        body[:14] + b"\x03\xc3\x28" + body[15:] + b"\x00",  # invalid UTF-8
        b"\x00\x03" + bytes(8) + bytes(4) + b"\xff\xff" + bytes(8),  # v3 with a -1 (null) metadata length
        b"\x00\x03" + bytes(8) + bytes(4) + b"\xff\xfe" + bytes(8),  # a negative length
        b"\x00\x03" + bytes(8) + bytes(4) + b"\x00\x02\xed\xa0" + bytes(8),  # a UTF-16 surrogate in UTF-8
        b"\x00\x05" + bytes(30), b"\xff\xff" + bytes(30), b"", b"\x00",
    ]
    out += [bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(300)]
    return out


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
    values = _values(rng)
    values += _damaged(rng, values)
    keys = _keys(rng)
    good_key = keys[0]
    rows = [(good_key, v) for v in values] + [(k, values[0]) for k in keys]
    df = spark.createDataFrame(rows, "key binary, value binary")
    key, value = native.offset_key(), native.offset_value()
    return native.with_read(df, [key, value], {
        "key_ok": key.ok, "value_ok": value.ok, "c": native.offset_commit_struct(key, value)}).collect()


def _codec_value_ok(value: bytes) -> bool:
    try:
        decode_value(1, value)
        return True
    except DecodeError:
        return False


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
        codec_ok = _codec_value_ok(r.value)
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
