"""The bulk reader of offset commits (jobs.decode.arrow_reader) against the codec: it proves no more than the codec
accepts, proves the shapes brokers write, and reads the values the codec reads. On a corpus of valid, damaged and
random keys and values (offset_corpus), as plain Arrow arrays."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest
from offset_corpus import TEXTS, codec_accepts, commit_values, damaged_values

from jobs.base.arrow import TIMESTAMP
from jobs.decode.arrow_reader import proven, read
from jobs.decode.check import OFFSET_KEY, OFFSET_KEY_HEADS, OFFSET_VALUE
from jobs.decode.columns import offset_commit_columns
from jobs.replay.offsets import OFFSET_FIELDS, decoded
from offsets_codec import DecodeError, decode_key, decode_value, encode_key, encode_value
from offsets_codec.wire import ZERO_UUID

VALUE_FIELDS = ("offset", "leaderEpoch", "metadata", "commitTimestamp", "expireTimestamp", "topicId")
KEY_FIELDS = ("group", "topic", "partition")


def test_proven_values_are_ones_the_codec_reads():
    rng = random.Random(6)
    good = commit_values(rng)
    corpus = good + damaged_values(rng, good) + [None]
    verdict = proven(pa.array(corpus, pa.binary()), OFFSET_VALUE)
    assert [v for v, ok in zip(corpus, verdict) if ok and not codec_accepts(v)] == []
    # ...and it proves the shapes brokers write: ASCII text (with a one-byte compact length in v4).
    texts = [TEXTS[i % len(TEXTS)] for i in range(len(good))]  # commit_values writes each text per version
    common = [v for v, text in zip(good, texts) if text.isascii() and (v[:2] != b"\x00\x04" or len(text) < 127)]
    assert len(common) == 5 * 4 - 1 and all(proven(pa.array(common, pa.binary()), OFFSET_VALUE))


def test_proven_reads_sliced_and_large_binary_arrays():
    values = [encode_value(1, 3, {"offset": i, "leaderEpoch": 1, "metadata": "", "commitTimestamp": 5})
              for i in range(6)] + [b"\x00\x03junk"]
    whole = pa.array(values, pa.binary())
    assert list(proven(whole.slice(3), OFFSET_VALUE)) == [True, True, True, False]
    assert list(proven(pa.array(values, pa.large_binary()), OFFSET_VALUE)) == [True] * 6 + [False]
    # The fields of a slice are its own rows', not the first rows of the buffer.
    assert read(whole.slice(3), OFFSET_VALUE, ("offset",)).fields["offset"].to_pylist() == [3, 4, 5, None]
    chunked = pa.chunked_array([whole.slice(0, 2), whole.slice(5)])
    assert read(chunked, OFFSET_VALUE, ("offset",)).fields["offset"].to_pylist() == [0, 1, 5, None]


def test_the_tagged_topic_id_is_read_as_the_codec_reads_it():
    """Every v4 value the bulk reader proves: its topicId as the codec decodes it (the codec's ZERO_UUID where
    the tag is absent, where the reader gives null), among valid, damaged and random values."""
    rng = random.Random(4)
    good = commit_values(rng)
    corpus = good + damaged_values(rng, good)
    got = read(pa.array(corpus, pa.binary()), OFFSET_VALUE, ("topicId",))
    v4 = [(value, topic_id) for value, ok, topic_id in zip(corpus, got.ok, got.fields["topicId"].to_pylist())
          if ok and value[:2] == b"\x00\x04"]
    assert len(v4) > 10 and None in {t for _, t in v4} and len({t for _, t in v4}) > 3
    assert [t or ZERO_UUID for _, t in v4] == [decode_value(1, v).data["topicId"] for v, _ in v4]


# --- the corpus: every shape, against the codec -----------------------------------------------------------


def _keys(rng: random.Random) -> list[bytes]:
    good = [encode_key(t, {"group": g, "topic": topic, "partition": p})
            for t in (0, 1) for g, topic, p in [("g", "t", 0), ("grp-é", "orders", 2**31 - 1), ("", "", -5)]]
    bad = [k[:n] for k in good[:2] for n in range(len(k))]
    bad += [good[0] + b"\x01", good[1] + b"\x01", b"\x00\x01\x00\x02\xc3\x28\x00\x01t\x00\x00\x00\x00",
            b"\x00\x02\x00\x01g", b"\x00\x01\xff\xff\x00\x01t\x00\x00\x00\x00"]
    bad += [bytes(rng.randrange(256) for _ in range(rng.randrange(20))) for _ in range(100)]
    return good + bad


@pytest.fixture(scope="module")
def corpus() -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(848)
    values = commit_values(rng)
    values += damaged_values(rng, values)
    return values, _keys(rng)


def _codec_key(key: bytes):
    try:
        found = decode_key(key)
    except DecodeError:
        return None
    return found if found.record_type in (0, 1) else None


def _value_left_to_the_codec(value: bytes) -> str | None:
    """Why the bulk reader leaves a value the codec reads to the codec (None: it must prove it): text that is not
    ASCII, a compact length of more than one byte (v4 text of 127 bytes or more), or bytes the codec's own
    encoding of what it read would not write (trailing bytes, unknown or repeated tags)."""
    found = decode_value(1, value)
    text = found.data["metadata"]
    if not text.isascii():
        return "text"
    if found.version == 4 and len(text) >= 127:
        return "length"
    if encode_value(1, found.version, found.data) != value:
        return "bytes"
    return None


def _key_left_to_the_codec(key: bytes) -> str | None:
    found = _codec_key(key)
    if not (found.data["group"].isascii() and found.data["topic"].isascii()):
        return "text"
    if encode_key(found.record_type, found.data) != key:
        return "bytes"
    return None


def test_the_bulk_reader_proves_exactly_the_values_the_codec_reads_in_the_shapes_brokers_write(corpus):
    values, _ = corpus
    got = proven(pa.array(values, pa.binary()), OFFSET_VALUE)
    assert len(values) > 600
    left = []
    for value, ok in zip(values, got):
        if not codec_accepts(value):
            assert not ok, value.hex()
            continue
        reason = _value_left_to_the_codec(value)
        assert ok == (reason is None), (value.hex(), reason)
        left.append(reason)
    # The corpus is not all junk, and has every shape left to the codec.
    assert left.count(None) > 60 and {"text", "length", "bytes"} <= set(left)


def test_the_bulk_reader_proves_exactly_the_keys_the_codec_reads_as_offset_commit_keys(corpus):
    _, keys = corpus
    got = read(pa.array(keys, pa.binary()), OFFSET_KEY, KEY_FIELDS, heads=OFFSET_KEY_HEADS)
    reasons = []
    for key, ok in zip(keys, got.ok):
        if _codec_key(key) is None:
            assert not ok, key.hex()
            continue
        reason = _key_left_to_the_codec(key)
        assert ok == (reason is None), (key.hex(), reason)
        reasons.append(reason)
    assert reasons.count(None) == 4 and {"text", "bytes"} <= set(reasons)  # both types' "g" and "" keys


def test_proven_fields_are_the_codec_values(corpus):
    """Every field of every proven value and key, as the codec decodes it; a field the version lacks is null (and
    a topicId whose tag is absent, which the codec reads as ZERO_UUID)."""
    values, keys = corpus
    got = read(pa.array(values, pa.binary()), OFFSET_VALUE, VALUE_FIELDS)
    fields = {name: got.fields[name].to_pylist() for name in VALUE_FIELDS}
    checked = 0
    for i, (value, ok) in enumerate(zip(values, got.ok)):
        if not ok:
            continue
        want = decode_value(1, value)
        ours = {name: fields[name][i] for name in VALUE_FIELDS if fields[name][i] is not None}
        if want.version == 4 and "topicId" not in ours:
            ours["topicId"] = ZERO_UUID
        assert ours == want.data and got.prefix[i] == want.version, value.hex()
        checked += 1
    assert checked > 60
    got = read(pa.array(keys, pa.binary()), OFFSET_KEY, KEY_FIELDS, heads=OFFSET_KEY_HEADS)
    names = {name: got.fields[name].to_pylist() for name in KEY_FIELDS}
    read_keys = [(key, {name: names[name][i] for name in KEY_FIELDS}) for i, key in enumerate(keys) if got.ok[i]]
    assert [fields for _, fields in read_keys] == [decode_key(key).data for key, _ in read_keys]
    assert {fields["partition"] for _, fields in read_keys} == {0, -5}


def test_committed_offsets_read_in_bulk_are_the_codecs_columns(corpus):
    """jobs.replay.offsets.decoded (the bulk reader, the codec where it is unsure) gives each commit the columns
    offset_commit_columns gives it, Kafka's sentinels applied: for every value the codec reads, under every key
    the codec reads."""
    values, keys = corpus
    good_values = [v for v in values if codec_accepts(v)]
    good_keys = [k for k in keys if _codec_key(k) is not None]
    pairs = [(good_keys[0], v) for v in good_values] + [(k, good_values[0]) for k in good_keys]
    n = len(pairs)
    rows = pa.table({"coordinator_partition": pa.array([0] * n, pa.int32()), "group_id": pa.array(["g"] * n),
                     "record_offset": pa.array(range(n), pa.int64()), "record_timestamp": pa.nulls(n, TIMESTAMP),
                     "producer_id": pa.array([-1] * n, pa.int64()), "producer_epoch": pa.nulls(n, pa.int16()),
                     "key": pa.array([k for k, _ in pairs], pa.binary()),
                     "value": pa.array([v for _, v in pairs], pa.binary())})
    got = decoded(rows).select([name for name, _ in OFFSET_FIELDS]).to_pylist()
    assert got == [offset_commit_columns(k, v) for k, v in pairs]
    bulk = proven(rows.column("value").combine_chunks(), OFFSET_VALUE)
    assert bulk.sum() > 60 and (~bulk).sum() > 10  # both ways of reading took part
    assert any(r["topic_id"] is not None for r in got) and any(r["leader_epoch"] is None for r in got)
