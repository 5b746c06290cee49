"""A minimal reader of Kafka log segments (magic v2, uncompressed), for tests only.

Just enough of the record-batch format to get keys and values out of the broker segments in the shared
test data; CRCs are not checked here (the manifest says they all verify).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # baseOffset … recordsCount: 61 bytes


class LogRecord(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    is_control: bool


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint (record fields), up to 10 bytes."""
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def read_segment(path: Path) -> Iterator[LogRecord]:
    data = path.read_bytes()
    pos = 0
    while pos + _BATCH_HEADER.size <= len(data):
        (base_offset, batch_length, _leader_epoch, magic, _crc, attributes, _last_delta, _first_ts, _max_ts,
         _producer_id, _producer_epoch, _base_seq, count) = _BATCH_HEADER.unpack_from(data, pos)
        end = pos + 12 + batch_length
        if end > len(data):
            return  # a batch cut off at the end of the file
        if magic != 2 or attributes & 0x07:
            raise ValueError(f"{path}: unsupported batch at {pos} (magic {magic}, attributes {attributes:#x})")
        p = pos + _BATCH_HEADER.size
        for _ in range(count):
            length, p = _varint(data, p)
            record_end = p + length
            p += 1  # record attributes
            _, p = _varint(data, p)  # timestamp delta
            offset_delta, p = _varint(data, p)
            key_len, p = _varint(data, p)
            key = None if key_len < 0 else data[p:p + key_len]
            p += max(key_len, 0)
            value_len, p = _varint(data, p)
            value = None if value_len < 0 else data[p:p + value_len]
            yield LogRecord(base_offset + offset_delta, key, value, bool(attributes & 0x20))
            p = record_end
        pos = end
