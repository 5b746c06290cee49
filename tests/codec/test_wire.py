"""Primitive encodings, byte for byte (spec §2)."""

import pytest

from offsets_codec import wire
from offsets_codec.errors import WireError


@pytest.mark.parametrize(
    "value, hexed",
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (2**31 - 1, "ffffffff07"),  # int32 max
        (2**31, "8080808008"),  # int32 min, as the unsigned value Java writes
        (2**32 - 1, "ffffffff0f"),  # -1 as unsigned int32
    ],
)
def test_uvarint_encodes_and_decodes_exactly(value, hexed):
    assert wire.uvarint_bytes(value).hex() == hexed
    raw = bytes.fromhex(hexed)
    assert wire.read_uvarint(raw, 0, "uvarint", "x", 0) == (value, len(raw))


def test_uvarint_reads_from_an_offset_and_leaves_the_rest():
    assert wire.read_uvarint(bytes.fromhex("aaac02bb"), 1, "uvarint", "x", 1) == (300, 3)


def test_uvarint_longer_than_five_bytes_is_rejected():
    with pytest.raises(WireError) as e:
        wire.read_uvarint(bytes.fromhex("8080808080"), 0, "uvarint", "n", 0)
    assert e.value.message() == "invalid varint at byte 0 reading uvarint n: more than 5 bytes"


def test_uvarint_cut_short_is_truncated():
    with pytest.raises(WireError) as e:
        wire.read_uvarint(bytes.fromhex("8080"), 0, "uvarint", "n", 0)
    assert e.value.message() == "truncated at byte 0 reading uvarint n"


@pytest.mark.parametrize("value", [-1, 2**32])
def test_uvarint_writer_rejects_out_of_range(value):
    with pytest.raises(ValueError):
        wire.uvarint_bytes(value)


def test_uuid_text_form_is_base64url_without_padding():
    raw = bytes(range(1, 17))
    assert wire.uuid_to_str(raw) == "AQIDBAUGBwgJCgsMDQ4PEA"
    assert wire.uuid_to_str(bytes(16)) == wire.ZERO_UUID == "AAAAAAAAAAAAAAAAAAAAAA"
    assert wire.uuid_from_str("AQIDBAUGBwgJCgsMDQ4PEA") == raw
    assert wire.uuid_to_str(bytes.fromhex("30a5f1d5f224432d89f635c784af26d7")) == "MKXx1fIkQy2J9jXHhK8m1w"


@pytest.mark.parametrize("text", ["", "AQID", "AQIDBAUGBwgJCgsMDQ4PEAAA", "!!!!!!!!!!!!!!!!!!!!!!"])
def test_uuid_from_str_rejects_anything_but_16_bytes(text):
    with pytest.raises(ValueError):
        wire.uuid_from_str(text)


@pytest.mark.parametrize(
    "compact, hexed, value",
    [
        (False, "0003616263", "abc"),
        (False, "0000", ""),
        (False, "ffff", None),
        (True, "04616263", "abc"),
        (True, "01", ""),
        (True, "00", None),
        (False, "0002c3a9", "é"),
    ],
)
def test_strings_both_encodings(compact, hexed, value):
    read = wire.string_reader("s", nullable=True, compact=compact)
    raw = bytes.fromhex(hexed)
    assert read(raw, 0) == (value, len(raw))
    out = bytearray()
    wire.write_string(out, value, compact, True, "s")
    assert out.hex() == hexed


@pytest.mark.parametrize(
    "compact, hexed, value",
    [(False, "0000000201ff", b"\x01\xff"), (False, "ffffffff", None), (True, "0301ff", b"\x01\xff"), (True, "00", None)],
)
def test_bytes_both_encodings(compact, hexed, value):
    read = wire.bytes_reader("b", nullable=True, compact=compact)
    raw = bytes.fromhex(hexed)
    assert read(raw, 0) == (value, len(raw))
    out = bytearray()
    wire.write_bytes(out, value, compact, True, "b")
    assert out.hex() == hexed


def test_compact_string_longer_than_kafka_allows_is_an_invalid_length():
    raw = wire.uvarint_bytes(0x8000 + 1) + b"a" * 0x8000
    with pytest.raises(WireError) as e:
        wire.string_reader("s", False, True)(raw, 0)
    assert e.value.message() == "invalid length 32768 for string s"


def test_array_count_is_checked_against_the_remaining_bytes_before_reading():
    read = wire.array_reader("xs", False, False, wire.fixed_reader(wire.INT32, "int32", ""), 4, "i")
    raw = bytes.fromhex("7fffffff") + bytes(12)
    with pytest.raises(WireError) as e:
        read(raw, 0)
    assert e.value.message() == (
        "truncated at byte 0 reading array xs: 2147483647 elements need at least 8589934588 bytes, 12 remain"
    )


def test_flexible_int_array_is_a_compact_count_then_four_byte_ints():
    read = wire.array_reader("xs", False, True, wire.fixed_reader(wire.INT32, "int32", ""), 4, "i")
    assert read(bytes.fromhex("03000000000000000100"), 0) == ([0, 1], 9)
