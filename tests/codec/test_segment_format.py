"""Kafka log segments: the writer's batches read back by the streaming reader for every codec and
magic, the broker-recovery damage rules, and the codec quirks (Kafka's pre-0.10 lz4 header checksum,
raw vs xerial snappy, zstd frames without a content size)."""

from __future__ import annotations

import io
import os
import random
import struct
import sys
import tracemalloc
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offsets_codec import crc
from offsets_codec.compression import CODEC_IDS, CompressionError, MissingCodecError, compress, decompress, xxh32
from offsets_codec.crc import crc32c, crc32c_pure
from offsets_codec.segment_writer import (
    encode_batch,
    encode_control_batch,
    encode_message_set,
    segment_file_name,
    write_segment,
)
from offsets_codec.segments import Batch, LogRecord, SegmentDamage, control_marker, read_segment, read_segment_file

cramjam = pytest.importorskip("cramjam")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CASES = [(c, m) for m in (0, 1, 2) for c in CODECS if not (c == "zstd" and m < 2)]
EXAMPLES = int(os.environ.get("OFFSETS_CODEC_EXAMPLES", "60"))
FAST = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
T0 = 1_700_000_000_000


def read_all(data: bytes, **kw) -> list[Batch | SegmentDamage]:
    return list(read_segment(io.BytesIO(data), **kw))


def records_of(items) -> list[LogRecord]:
    return [r for b in items if isinstance(b, Batch) for r in b.records]


def sample_records(magic: int, first: int = 100, n: int = 7, timestamp_type: int = 0) -> list[LogRecord]:
    """Records with null keys and values, empty ones, offset gaps, and headers (v2 only)."""
    rng = random.Random(first * 1000 + n)  # incompressible bytes, the same on every call
    out = []
    offset = first
    for i in range(n):
        key = None if i == 2 else (b"" if i == 3 else f"key-{i}".encode())
        value = None if i == 4 else (b"" if i == 5 else rng.randbytes(20) + b"v" * (i * 50))
        headers = ((("trace", b"abc"), ("empty", b""), ("null", None), ("ünï", b"\x00")) if i % 2 and magic == 2
                   else ())
        ts = None if magic == 0 else T0 + 1000 * i - (i % 3) * 7  # not monotonic
        out.append(LogRecord(offset, ts, None if magic == 0 else timestamp_type, key, value, headers))
        offset += 1 + (i % 3) * 5  # gaps, as after compaction
    return out


def encode(records, *, magic, compression="none", timestamp_type=0) -> bytes:
    if magic == 2:
        return encode_batch(records, compression=compression, timestamp_type=timestamp_type)
    return encode_message_set(records, magic=magic, compression=compression, timestamp_type=timestamp_type)


def rebuild_v2(batch: bytes, *, attributes: int | None = None, count: int | None = None,
               records_section: bytes | None = None, fix_crc: bool = True) -> bytes:
    """Rewrite fields of an encoded v2 batch, fixing its length and (by default) its CRC."""
    b = bytearray(batch[:61])
    if attributes is not None:
        struct.pack_into(">h", b, 21, attributes)
    if count is not None:
        struct.pack_into(">i", b, 57, count)
    b += batch[61:] if records_section is None else records_section
    struct.pack_into(">i", b, 8, len(b) - 12)
    if fix_crc:
        struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def legacy_message(offset: int, magic: int, attributes: int, value: bytes | None, *, key: bytes | None = None,
                   timestamp: int = 0, crc_delta: int = 0) -> bytes:
    """One v0/v1 message built by hand (independent of the writer)."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp) if magic else b"")
    body += struct.pack(">i", -1 if key is None else len(key)) + (key or b"")
    body += struct.pack(">i", -1 if value is None else len(value)) + (value or b"")
    crc_value = (zlib.crc32(body) + crc_delta) & 0xFFFFFFFF
    return struct.pack(">qiI", offset, 4 + len(body), crc_value) + body


# --- round trips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec,magic", CASES)
def test_round_trip_every_codec_and_magic(codec, magic):
    records = sample_records(magic)
    data = encode(records, magic=magic, compression=codec)
    items = read_all(data)
    if magic == 2 or codec != "none":
        assert len(items) == 1
        (batch,) = items
        assert batch.position == 0 and batch.size == len(data)
        assert batch.records == tuple(records)
        assert batch.compression == codec and batch.magic == magic
        assert (batch.base_offset, batch.last_offset) == (records[0].offset, records[-1].offset)
    else:  # one batch per uncompressed legacy message
        assert len(items) == len(records)
        assert [b.records for b in items] == [(r,) for r in records]
        assert sum(b.size for b in items) == len(data)
        assert all(b.base_offset == b.last_offset == b.records[0].offset for b in items)
    for b in items:
        assert not b.is_control and not b.is_transactional and b.control_type is None
        if magic < 2:
            assert (b.producer_id, b.producer_epoch, b.partition_leader_epoch) == (-1, -1, -1)


@pytest.mark.parametrize("codec,magic", [(c, m) for c, m in CASES if m > 0])
def test_log_append_time_gives_every_record_the_append_time(codec, magic):
    records = sample_records(magic, timestamp_type=1)
    items = read_all(encode(records, magic=magic, compression=codec, timestamp_type=1))
    got = records_of(items)
    assert [r.timestamp_type for r in got] == [1] * len(records)
    if magic == 2 or codec != "none":  # the batch's (wrapper's) timestamp is the append time
        append_time = max(r.timestamp for r in records)
        assert [r.timestamp for r in got] == [append_time] * len(records)
    else:  # an uncompressed v1 message carries its own append time
        assert [r.timestamp for r in got] == [r.timestamp for r in records]
    assert [(r.offset, r.key, r.value) for r in got] == [(r.offset, r.key, r.value) for r in records]


def test_several_batches_positions_and_v2_header_fields():
    a = encode_batch(sample_records(2, first=0, n=3), producer_id=7, producer_epoch=3, base_sequence=0,
                     partition_leader_epoch=5)
    b = encode_batch(sample_records(2, first=50, n=4), compression="lz4", partition_leader_epoch=6)
    c = encode_message_set(sample_records(1, first=90, n=2), magic=1, compression="gzip")
    items = read_all(a + b + c)
    assert [(x.position, x.size) for x in items] == [(0, len(a)), (len(a), len(b)), (len(a) + len(b), len(c))]
    assert (items[0].producer_id, items[0].producer_epoch, items[0].partition_leader_epoch) == (7, 3, 5)
    assert (items[1].producer_id, items[1].producer_epoch, items[1].partition_leader_epoch) == (-1, -1, 6)
    assert items[2].magic == 1 and items[2].partition_leader_epoch == -1


def test_v1_wrapper_with_offset_zero_keeps_relative_offsets():
    """Some librdkafka versions leave the wrapper offset 0; Kafka then uses the inner offsets as they are."""
    data = bytearray(encode_message_set(sample_records(1, first=500, n=3), magic=1, compression="gzip"))
    struct.pack_into(">q", data, 0, 0)  # the offset is outside the message CRC
    (batch,) = read_all(bytes(data))
    assert [r.offset for r in batch.records] == [0, 1, 7]  # sample gaps: +1, +6


def test_v1_wrapper_offset_below_last_inner_offset_is_damage():
    data = bytearray(encode_message_set(sample_records(1, first=0, n=3), magic=1, compression="gzip"))
    struct.pack_into(">q", data, 0, 3)  # last inner relative offset is 7
    (damage,) = read_all(bytes(data))
    assert isinstance(damage, SegmentDamage) and not damage.fatal
    assert "wrapper offset 3 is below the last inner offset 7" in damage.reason


def test_v0_wrapper_inner_offsets_are_absolute():
    records = sample_records(0, first=1000, n=4)
    data = encode_message_set(records, magic=0, compression="snappy")
    inner = decompress(2, data[12 + 4 + 2 + 4 + 4:], magic=0)  # after offset/size, crc, magic+attrs, key, value len
    assert struct.unpack_from(">q", inner)[0] == 1000
    (batch,) = read_all(data)
    assert batch.last_offset == records[-1].offset and batch.records == tuple(records)


# --- transactions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("marker", ["COMMIT", "ABORT"])
def test_control_batch(marker):
    (batch,) = read_all(encode_control_batch(42, marker, producer_id=9, producer_epoch=2, coordinator_epoch=5,
                                             timestamp=T0))
    assert batch.is_control and batch.is_transactional and batch.control_type == marker
    assert (batch.producer_id, batch.producer_epoch, batch.base_offset, batch.last_offset) == (9, 2, 42, 42)
    (record,) = batch.records
    assert record.value == struct.pack(">hi", 0, 5) and record.timestamp == T0
    assert control_marker(record.key) == marker


def test_control_marker_parsing():
    assert control_marker(None) is None
    assert control_marker(b"\x00\x00\x00") is None  # shorter than version + type
    assert control_marker(b"\xff\xff\x00\x01") is None  # negative version: not a control key
    assert control_marker(b"\x00\x00\x00\x01") == "COMMIT"
    assert control_marker(b"\x00\x00\x00\x00") == "ABORT"
    assert control_marker(b"\x00\x07\x00\x01extra") == "COMMIT"  # newer version, read as the current one
    assert control_marker(b"\x00\x00\x00\x03") == "UNKNOWN"  # e.g. a KRaft snapshot header


def test_interleaved_transactional_producers():
    def txn_batch(first, pid, n=2):
        rs = [LogRecord(first + i, T0 + first, 0, b"k%d" % (first + i), b"v") for i in range(n)]
        return encode_batch(rs, producer_id=pid, producer_epoch=1, base_sequence=first, is_transactional=True)

    chunks = [
        txn_batch(0, 1),
        txn_batch(2, 2),
        encode_batch([LogRecord(4, T0, 0, b"plain", b"v")]),
        txn_batch(5, 1),
        encode_control_batch(7, "COMMIT", producer_id=1, producer_epoch=1),
        txn_batch(8, 2, n=3),
        encode_control_batch(11, "ABORT", producer_id=2, producer_epoch=1),
    ]
    items = read_all(b"".join(chunks))
    summary = [(b.producer_id, b.is_transactional, b.control_type, b.base_offset, b.last_offset) for b in items]
    assert summary == [
        (1, True, None, 0, 1),
        (2, True, None, 2, 3),
        (-1, False, None, 4, 4),
        (1, True, None, 5, 6),
        (1, True, "COMMIT", 7, 7),
        (2, True, None, 8, 10),
        (2, True, "ABORT", 11, 11),
    ]


def test_control_type_unknown_for_an_empty_control_batch():
    batch = encode_control_batch(3, "COMMIT", producer_id=1)
    (b,) = read_all(rebuild_v2(batch, count=0, records_section=b""))
    assert b.records == () and b.control_type == "UNKNOWN"


# --- damage ---------------------------------------------------------------------------------------


def three_batches() -> list[bytes]:
    return [encode_batch(sample_records(2, first=10 * i, n=3), compression=c) for i, c in enumerate(["none", "gzip", "none"])]


def test_truncated_last_batch_is_fatal_and_keeps_what_came_before():
    chunks = three_batches()
    data = b"".join(chunks)[:-10]
    *batches, damage = read_all(data)
    assert [b.base_offset for b in batches] == [0, 10]
    pos = len(chunks[0]) + len(chunks[1])
    remain = len(chunks[2]) - 10
    assert damage == SegmentDamage(pos, f"truncated batch: header says {len(chunks[2])} bytes, {remain} remain",
                                   remain, True)


def test_truncated_batch_header():
    chunks = three_batches()
    *batches, damage = read_all(chunks[0] + chunks[1][:9])
    assert len(batches) == 1
    assert damage == SegmentDamage(len(chunks[0]), "truncated batch header: 9 bytes remain, 17 needed", 9, True)


@pytest.mark.parametrize("where", [30, 70, -1])  # attributes/header field, records, last byte
def test_corrupted_byte_in_the_middle_batch_stops_reading_there(where):
    chunks = three_batches()
    data = bytearray(b"".join(chunks))
    pos = len(chunks[0])
    data[pos + (where % len(chunks[1]))] ^= 0x40
    items = read_all(bytes(data))
    assert len(items) == 2 and items[0].base_offset == 0
    damage = items[1]
    assert damage.position == pos and damage.fatal
    assert damage.bytes_skipped == len(data) - pos
    assert damage.reason.startswith("batch CRC mismatch: stored 0x") and ", computed 0x" in damage.reason


def test_corrupted_legacy_message_is_a_crc_mismatch():
    a = encode_message_set(sample_records(1, first=0, n=2), magic=1)
    b = bytearray(encode_message_set(sample_records(1, first=5, n=1), magic=1, compression="gzip"))
    b[-3] ^= 1
    items = read_all(a + bytes(b) + a)
    assert len(items) == 3 and items[2].position == len(a) and items[2].fatal
    assert items[2].reason.startswith("batch CRC mismatch")


def test_verify_crc_false_reads_a_batch_whose_crc_is_wrong():
    chunks = three_batches()
    bad = rebuild_v2(chunks[1], fix_crc=False)
    bad = bad[:17] + b"\x00\x00\x00\x00" + bad[21:]
    assert isinstance(read_all(chunks[0] + bad)[1], SegmentDamage)
    items = read_all(chunks[0] + bad + chunks[2], verify_crc=False)
    assert [b.base_offset for b in items] == [0, 10, 20]


@pytest.mark.parametrize("tail", [4096, 5])
def test_zero_filled_tail(tail):
    chunks = three_batches()
    data = b"".join(chunks) + bytes(tail)
    *batches, damage = read_all(data)
    assert len(batches) == 3
    assert damage == SegmentDamage(len(data) - tail, f"zero-filled tail (preallocated segment): {tail} bytes", tail,
                                   True)


def test_zeros_then_data_is_not_a_zero_tail():
    data = encode_batch(sample_records(2, n=2))
    *_, damage = read_all(data + bytes(40) + b"\x01")
    assert damage == SegmentDamage(len(data), "corrupt batch: size 0 is below the minimum 14", 41, True)


def test_size_below_minimum_and_unknown_magic_are_fatal():
    good = encode_batch(sample_records(2, n=2))
    small = struct.pack(">qi", 5, 13) + bytes(13)
    assert read_all(good + small + good)[1] == SegmentDamage(len(good), "corrupt batch: size 13 is below the minimum 14",
                                                             len(small) + len(good), True)
    v2_small = struct.pack(">qiib", 5, 30, 0, 2) + bytes(25)
    assert read_all(v2_small)[0].reason == "corrupt batch: size 30 is below the minimum 49 for magic 2"
    magic3 = bytearray(good)
    magic3[16] = 3
    assert read_all(good + bytes(magic3))[1] == SegmentDamage(len(good), "corrupt batch: unknown magic 3", len(good),
                                                              True)


def test_valid_crc_but_garbage_payload_is_skipped_and_reading_goes_on():
    chunks = three_batches()
    garbage = rebuild_v2(chunks[1], attributes=3, records_section=b"\x04\x22\x4d\x18garbage" * 5)  # lz4
    items = read_all(chunks[0] + garbage + chunks[2])
    assert [type(x).__name__ for x in items] == ["Batch", "SegmentDamage", "Batch"]
    damage = items[1]
    assert damage.position == len(chunks[0]) and not damage.fatal
    assert damage.bytes_skipped == len(garbage)
    assert damage.reason.startswith("unreadable batch (magic 2, lz4): lz4: ")
    assert items[2].base_offset == 20


def test_garbage_in_a_legacy_wrapper_is_skipped():
    bad = legacy_message(5, 1, CODEC_IDS["gzip"], b"\x1f\x8bnot really gzip")
    good = encode_message_set(sample_records(1, first=9, n=2), magic=1, compression="gzip")
    items = read_all(bad + good)
    assert not items[0].fatal and items[0].reason.startswith("unreadable batch (magic 1, gzip): gzip: ")
    assert items[1].base_offset == 9


@pytest.mark.parametrize("change,reason", [
    (dict(count=4), "unreadable batch (magic 2, none): "),  # says 4 records, holds 3
    (dict(count=2), "unreadable batch (magic 2, none): "),  # bytes left over after 2
    (dict(attributes=7), "unreadable batch (magic 2, unknown codec): unknown compression codec 7"),
])
def test_records_that_do_not_parse_are_skipped(change, reason):
    chunks = three_batches()
    items = read_all(chunks[0] + rebuild_v2(chunks[0], **change) + chunks[2])
    assert isinstance(items[1], SegmentDamage) and not items[1].fatal
    assert items[1].reason.startswith(reason) and "\n" not in items[1].reason
    assert items[2].base_offset == 20


def test_zstd_in_a_legacy_wrapper_is_skipped():
    inner = encode_message_set(sample_records(1, first=0, n=2), magic=1)
    zstd_value = bytes(cramjam.zstd.compress(inner))
    (damage,) = read_all(legacy_message(1, 1, CODEC_IDS["zstd"], zstd_value))
    assert damage.reason == "unreadable batch (magic 1, zstd): zstd compression needs magic v2, not v1"


def test_inner_message_crc_is_checked():
    inner = legacy_message(0, 1, 0, b"a") + legacy_message(1, 1, 0, b"b", crc_delta=1)
    data = legacy_message(1, 1, CODEC_IDS["gzip"], compress(1, inner, magic=1))
    (damage,) = read_all(data)
    assert not damage.fatal and "inner message CRC mismatch" in damage.reason
    (batch,) = read_all(data, verify_crc=False)
    assert [r.value for r in batch.records] == [b"a", b"b"]


def test_inner_messages_inherit_the_wrapper_timestamp_type():
    inner = legacy_message(0, 1, 0, b"a", timestamp=5) + legacy_message(1, 0, 0, b"b")  # a v0 inner message too
    wrapper = legacy_message(1, 1, CODEC_IDS["gzip"] | 0x08, compress(1, inner, magic=1), timestamp=99)
    (batch,) = read_all(wrapper)
    assert [(r.timestamp, r.timestamp_type) for r in batch.records] == [(99, 1), (None, None)]
    wrapper = legacy_message(1, 1, CODEC_IDS["gzip"], compress(1, inner, magic=1), timestamp=99)
    (batch,) = read_all(wrapper)
    assert [(r.timestamp, r.timestamp_type) for r in batch.records] == [(5, 0), (None, None)]


@FAST
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(data):
    items = read_all(data)
    assert all(isinstance(x, (Batch, SegmentDamage)) for x in items)
    assert sum(1 for x in items if isinstance(x, SegmentDamage) and x.fatal) <= 1
    assert all("\n" not in x.reason for x in items if isinstance(x, SegmentDamage))


@FAST
@given(st.data())
def test_damaged_segments_never_raise(data):
    codec, magic = data.draw(st.sampled_from(CASES))
    segment = bytearray(encode(sample_records(magic, n=3), magic=magic, compression=codec) * 2)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(segment) - 1))
        segment[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(segment)))
    for verify in (True, False):
        items = read_all(bytes(segment[:cut]), verify_crc=verify)
        assert all(isinstance(x, (Batch, SegmentDamage)) for x in items)


# --- codecs ---------------------------------------------------------------------------------------


def test_lz4_magic0_frame_has_kafkas_old_header_checksum_and_is_accepted():
    payload = b"offsets " * 5000
    frame = compress(CODEC_IDS["lz4"], payload, magic=0)
    hc = frame[6]
    assert hc == (xxh32(frame[:6]) >> 8) & 0xFF  # over the magic number too (KAFKA-3160)
    assert hc != (xxh32(frame[4:6]) >> 8) & 0xFF
    assert decompress(3, frame, magic=0) == payload
    with pytest.raises(CompressionError, match="descriptor checksum"):
        decompress(3, frame, magic=1)
    # Kafka ignores that byte for magic 0, so a correct one is accepted too
    standard = compress(CODEC_IDS["lz4"], payload, magic=1)
    assert decompress(3, standard, magic=0) == payload
    records = sample_records(0)
    assert records_of(read_all(encode_message_set(records, magic=0, compression="lz4"))) == records


def test_lz4_frames_from_the_standard_writer():
    payload = os.urandom(70_000) + b"z" * 70_000  # an incompressible block, then compressible ones
    c = cramjam.lz4.Compressor(block_linked=False)
    c.compress(payload)
    frame = bytes(c.finish())  # block and content checksums set
    assert frame[4] & 0x14 == 0x14
    assert decompress(3, frame, magic=2) == payload
    broken = bytearray(frame)
    broken[20] ^= 1  # inside the first block: its checksum no longer matches
    with pytest.raises(CompressionError, match="block checksum"):
        decompress(3, bytes(broken), magic=2)
    # linked blocks (cramjam's default frame) are refused, as Kafka refuses them
    with pytest.raises(CompressionError, match="dependent blocks"):
        decompress(3, bytes(cramjam.lz4.compress(payload)), magic=2)


def test_an_lz4_frame_claiming_4mb_blocks_does_not_allocate_them():
    # Found by python -m offsets_codec.fuzz: the reader allocated the block maximum that the frame
    # descriptor (BD byte) claims, 4 MB for a segment of a few hundred bytes.
    records = sample_records(0, n=3)
    segment = bytearray(encode_message_set(records, magic=0, compression="lz4"))  # magic 0: no descriptor checksum
    at = segment.index(b"\x04\x22\x4d\x18") + 5
    assert segment[at] == 0x40  # 64 KB blocks, as Kafka writes them
    segment[at] = 0x70  # 4 MB blocks: still a valid frame
    tracemalloc.start()
    try:
        items = read_all(bytes(segment), verify_crc=False)  # the wrapper CRC covers the changed byte
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert records_of(items) == records
    assert peak < 64 * 1024 + 256 * len(segment), (peak, len(segment))


def test_raw_snappy_is_accepted_and_xerial_is_written():
    records = sample_records(2)
    plain = encode_batch(records)
    raw = bytes(cramjam.snappy.compress_raw(plain[61:]))
    (batch,) = read_all(rebuild_v2(plain, attributes=2, records_section=raw))
    assert batch.compression == "snappy" and batch.records == tuple(records)
    xerial = encode_batch(records, compression="snappy")
    assert xerial[61:69] == b"\x82SNAPPY\x00" and struct.unpack_from(">ii", xerial, 69) == (1, 1)


def test_xerial_snappy_blocks_and_concatenated_streams():
    payload = os.urandom(40_000) + b"s" * 60_000
    framed = compress(2, payload, magic=2)
    assert decompress(2, framed + framed, magic=2) == payload * 2  # snappy-java reads concatenated streams
    with pytest.raises(CompressionError):
        decompress(2, framed[:-5], magic=2)


def test_zstd_without_content_size_is_accepted():
    records = sample_records(2)
    batch = encode_batch(records, compression="zstd")
    frame = batch[61:]
    assert frame[:4] == b"\x28\xb5\x2f\xfd"
    assert frame[4] & 0xE0 == 0  # frame header descriptor: no content size, not single-segment
    assert records_of(read_all(batch)) == records
    plain = encode_batch(records)
    with_size = bytes(cramjam.zstd.compress(plain[61:]))  # a frame that does say its content size
    assert records_of(read_all(rebuild_v2(plain, attributes=4, records_section=with_size))) == records


def test_gzip_members_and_trailing_bytes():
    a, b = b"first " * 100, b"second " * 100
    assert decompress(1, compress(1, a, magic=2) + compress(1, b, magic=2) + b"\x00junk", magic=2) == a + b
    with pytest.raises(CompressionError):
        decompress(1, compress(1, a, magic=2)[:-9], magic=2)


def test_missing_cramjam_is_reported_not_treated_as_damage(monkeypatch):
    monkeypatch.setitem(sys.modules, "cramjam", None)  # makes `import cramjam` fail
    with pytest.raises(MissingCodecError, match="snappy needs the cramjam package"):
        decompress(2, b"anything", magic=2)
    with pytest.raises(MissingCodecError, match="lz4 needs the cramjam package"):
        compress(3, b"anything", magic=1)


def test_missing_cramjam_escapes_read_segment(monkeypatch):
    segment = encode_batch(sample_records(2), compression="zstd")
    monkeypatch.setitem(sys.modules, "cramjam", None)
    with pytest.raises(MissingCodecError, match="zstd needs the cramjam package"):
        read_all(segment)
    assert read_all(encode_batch(sample_records(2), compression="gzip"))  # gzip needs no package


def test_unknown_codec_and_xxh32_vectors():
    with pytest.raises(CompressionError, match="unknown compression codec 5"):
        decompress(5, b"", magic=2)
    assert [xxh32(b""), xxh32(b"a"), xxh32(b"abc")] == [0x02CC5D05, 0x550D7456, 0x32D153FF]
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


# --- CRC-32C --------------------------------------------------------------------------------------


def test_crc32c_vector_and_pure_python_fallback_agree():
    assert crc32c(b"123456789") == crc32c_pure(b"123456789") == 0xE3069283  # RFC 3720 B.4
    rng = random.Random(7)
    for n in [0, 1, 3, 64, 1000, 4099]:
        data = rng.randbytes(n)
        assert crc32c_pure(data) == crc32c(data)
        assert crc32c_pure(data[n // 2:], crc32c_pure(data[:n // 2])) == crc32c(data)
        assert crc32c_pure(memoryview(data)[1:]) == crc32c(memoryview(data)[1:])


def test_crc32c_falls_back_without_the_package(monkeypatch):
    pytest.importorskip("crc32c")
    monkeypatch.setattr(crc, "_impl", None)
    monkeypatch.setitem(sys.modules, "crc32c", None)
    assert crc.crc32c(b"123456789") == 0xE3069283
    assert crc._impl is crc32c_pure
    records = sample_records(2)
    assert records_of(read_all(encode_batch(records))) == records  # the reader and writer use it too


# --- streaming ------------------------------------------------------------------------------------


class BoundedReads(io.RawIOBase):
    """A file object that fails when asked for everything or for more than ``bound`` bytes at once."""

    def __init__(self, data: bytes, bound: int, seekable: bool = True):
        self._f = io.BytesIO(data)
        self._bound = bound
        self._seekable = seekable
        self.largest = 0

    def readable(self):
        return True

    def seekable(self):
        return self._seekable

    def tell(self):
        return self._f.tell()

    def seek(self, pos, whence=0):
        if not self._seekable:
            raise io.UnsupportedOperation("seek")
        return self._f.seek(pos, whence)

    def read(self, size=-1):
        assert size is not None and 0 <= size <= self._bound, f"read({size})"
        self.largest = max(self.largest, size)
        return self._f.read(min(size, 1000))  # short reads, as from a pipe

    def readall(self):
        raise AssertionError("readall()")


def test_reader_streams_batch_by_batch():
    chunks = [encode_batch(sample_records(2, first=100 * i, n=20)) for i in range(30)]
    data = b"".join(chunks)
    stream = BoundedReads(data, bound=max(map(len, chunks)))
    items = read_segment(stream)
    first = next(items)
    assert first.base_offset == 0 and stream.tell() == len(chunks[0])  # nothing read ahead
    assert len([first, *items]) == 30
    assert stream.largest <= max(map(len, chunks))


@pytest.mark.parametrize("seekable", [True, False])
def test_a_corrupt_size_does_not_allocate_it(seekable):
    head = struct.pack(">qiib", 0, 0x7FFFFFF0, 0, 2)
    stream = BoundedReads(head + b"x" * 5000, bound=1 << 20, seekable=seekable)
    (damage,) = read_segment(stream)
    assert damage.reason == f"truncated batch: header says {0x7FFFFFF0 + 12} bytes, 5017 remain"


def test_non_seekable_stream():
    chunks = three_batches()
    garbage = rebuild_v2(chunks[1], attributes=3, records_section=b"junk")
    bad_crc = bytearray(chunks[2])
    bad_crc[-1] ^= 1
    stream = BoundedReads(chunks[0] + garbage + bytes(bad_crc) + chunks[0], bound=1 << 20, seekable=False)
    items = list(read_segment(stream))
    assert [type(x).__name__ for x in items] == ["Batch", "SegmentDamage", "SegmentDamage"]
    assert items[1].bytes_skipped == len(garbage) and not items[1].fatal
    assert items[2].fatal and items[2].bytes_skipped == len(bad_crc) + len(chunks[0])


def test_read_segment_file_and_writer_helpers(tmp_path):
    assert segment_file_name(1234) == "00000000000000001234.log"
    chunks = [encode_batch(sample_records(2, first=0, n=3)), encode_control_batch(20, "COMMIT", producer_id=4)]
    path = write_segment(tmp_path / segment_file_name(0), chunks)
    assert path.read_bytes() == b"".join(chunks)
    items = list(read_segment_file(str(path)))
    assert [b.control_type for b in items] == [None, "COMMIT"]


def test_positions_count_from_where_the_stream_was():
    chunks = three_batches()
    f = io.BytesIO(chunks[0] + chunks[1])
    f.seek(len(chunks[0]))
    (batch,) = read_segment(f)
    assert batch.position == len(chunks[0]) and batch.base_offset == 10


# --- property: random records round-trip ----------------------------------------------------------

_BYTES = st.one_of(st.none(), st.binary(max_size=40))
_HEADERS = st.lists(st.tuples(st.text(max_size=8), _BYTES), max_size=3).map(tuple)


@FAST
@given(st.data())
def test_random_records_round_trip(data):
    codec, magic = data.draw(st.sampled_from(CASES))
    ts_type = 0 if magic == 0 else data.draw(st.integers(0, 1))
    n = data.draw(st.integers(1, 12))
    gaps = data.draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n))
    first = data.draw(st.integers(0, 2**40))
    records = []
    offset = first
    for gap in gaps:
        ts = None if magic == 0 else data.draw(st.integers(0, 2**42))
        headers = data.draw(_HEADERS) if magic == 2 else ()
        records.append(LogRecord(offset, ts, None if magic == 0 else ts_type, data.draw(_BYTES), data.draw(_BYTES),
                                 headers))
        offset += gap
    got = records_of(read_all(encode(records, magic=magic, compression=codec, timestamp_type=ts_type)))
    if ts_type == 1 and (magic == 2 or codec != "none"):
        append_time = max(r.timestamp for r in records)
        records = [LogRecord(r.offset, append_time, 1, r.key, r.value, r.headers) for r in records]
    assert got == records
