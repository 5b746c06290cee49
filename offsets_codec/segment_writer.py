"""Write Kafka log segments, for test fixtures: batches encoded the way Kafka's Java client writes them.

``encode_batch`` writes a magic-v2 record batch, ``encode_control_batch`` a transaction marker,
``encode_message_set`` legacy v0/v1 messages (one wrapper message when compressed);
``write_segment`` concatenates encoded batches into a segment file.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from .compression import CODEC_IDS, compress
from .crc import crc32c
from .errors import EncodeError
from .segments import LogRecord

_NO_TIMESTAMP = -1
_CONTROL_TYPE_IDS = {"ABORT": 0, "COMMIT": 1}

_V2_HEAD = struct.Struct(">qiib")  # baseOffset, length, partitionLeaderEpoch, magic (the CRC follows)
_V2_CRC = struct.Struct(">I")
_V2_REST = struct.Struct(">hiqqqhii")  # attributes … recordsCount: the CRC covers these and the records
_OFFSET_SIZE = struct.Struct(">qi")
_LEGACY_V0 = struct.Struct(">bbi")  # magic, attributes, key length
_LEGACY_V1 = struct.Struct(">bbqi")  # magic, attributes, timestamp, key length
_I32 = struct.Struct(">i")
_CRC32 = struct.Struct(">I")


def segment_file_name(base_offset: int) -> str:
    """The file name Kafka gives the segment whose first offset is ``base_offset``."""
    return f"{base_offset:020d}.log"


def write_segment(path: str | os.PathLike, chunks: Iterable[bytes]) -> Path:
    """Write the encoded batches ``chunks`` one after another into ``path``."""
    path = Path(path)
    with open(path, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
    return path


def _codec(compression: str) -> int:
    try:
        return CODEC_IDS[compression]
    except KeyError:
        raise EncodeError(f"unknown compression {compression!r}") from None


# --- magic 2 --------------------------------------------------------------------------------------


def _write_varint(out: bytearray, value: int) -> None:
    """Append a zigzag varint / varlong."""
    z = value << 1 if value >= 0 else ((-value) << 1) - 1
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _write_varbytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


def _encode_record(offset_delta: int, timestamp_delta: int, record: LogRecord) -> bytes:
    body = bytearray(b"\x00")  # attributes: unused
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    _write_varbytes(body, record.key)
    _write_varbytes(body, record.value)
    _write_varint(body, len(record.headers))
    for name, value in record.headers:
        _write_varbytes(body, name.encode())
        _write_varbytes(body, value)
    out = bytearray()
    _write_varint(out, len(body))
    return bytes(out + body)


def encode_batch(
    records: Sequence[LogRecord],
    *,
    compression: str = "none",
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = 0,
    timestamp_type: int = 0,
) -> bytes:
    """A magic-v2 record batch of ``records`` (offsets taken from the records; gaps allowed).

    The base timestamp is the first record's and the max timestamp the largest (for LogAppendTime
    that stands for the broker's append time, which readers give every record).
    """
    if not records:
        raise EncodeError("a record batch needs at least one record")
    codec = _codec(compression)
    base_offset = records[0].offset
    timestamps = [_NO_TIMESTAMP if r.timestamp is None else r.timestamp for r in records]
    base_ts = timestamps[0]
    raw = bytearray()
    last_delta = -1
    for record, ts in zip(records, timestamps):
        delta = record.offset - base_offset
        if delta <= last_delta or delta > 0x7FFFFFFF:
            raise EncodeError(f"offset {record.offset} does not follow {base_offset + last_delta} in one batch")
        last_delta = delta
        raw += _encode_record(delta, ts - base_ts, record)
    attributes = codec | (timestamp_type & 1) << 3 | is_transactional << 4 | is_control << 5
    rest = _V2_REST.pack(attributes, last_delta, base_ts, max(timestamps), producer_id, producer_epoch,
                         base_sequence, len(records)) + compress(codec, raw, magic=2)
    crc = crc32c(rest)
    length = 4 + 1 + _V2_CRC.size + len(rest)  # partitionLeaderEpoch, magic, crc, rest
    return _V2_HEAD.pack(base_offset, length, partition_leader_epoch, 2) + _V2_CRC.pack(crc) + rest


def control_record(marker: str, coordinator_epoch: int = 0) -> tuple[bytes, bytes]:
    """(key, value) of a transaction marker's control record: "COMMIT" or "ABORT"."""
    try:
        type_id = _CONTROL_TYPE_IDS[marker]
    except KeyError:
        raise EncodeError(f"unknown transaction marker {marker!r}") from None
    # ControlRecordType key (version 0, type); EndTxnMarker value (version 0, coordinatorEpoch)
    return struct.pack(">hh", 0, type_id), struct.pack(">hi", 0, coordinator_epoch)


def encode_control_batch(
    offset: int,
    marker: str,
    *,
    producer_id: int,
    producer_epoch: int = 0,
    coordinator_epoch: int = 0,
    timestamp: int = 0,
) -> bytes:
    """A transaction marker ("COMMIT" or "ABORT") as the coordinator writes it: one control record."""
    key, value = control_record(marker, coordinator_epoch)
    record = LogRecord(offset, timestamp, 0, key, value)
    return encode_batch([record], producer_id=producer_id, producer_epoch=producer_epoch,
                        is_transactional=True, is_control=True)


# --- magic 0 and 1 --------------------------------------------------------------------------------


def _legacy_message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
                    value: bytes | None) -> bytes:
    if magic == 0:
        body = bytearray(_LEGACY_V0.pack(0, attributes, -1 if key is None else len(key)))
    else:
        body = bytearray(_LEGACY_V1.pack(1, attributes, timestamp, -1 if key is None else len(key)))
    if key is not None:
        body += key
    body += _I32.pack(-1 if value is None else len(value))
    if value is not None:
        body += value
    crc = zlib.crc32(body)  # CRC-32 over magic .. end
    return _OFFSET_SIZE.pack(offset, _CRC32.size + len(body)) + _CRC32.pack(crc) + body


def encode_message_set(
    records: Sequence[LogRecord],
    *,
    magic: int,
    compression: str = "none",
    timestamp_type: int = 0,
) -> bytes:
    """Legacy (magic 0 or 1) messages: one per record, or, compressed, one wrapper message.

    As Kafka writes them: a v1 wrapper's inner offsets are relative to the first record and the
    wrapper's offset is the last record's; v0 inner offsets are absolute. The v1 wrapper's timestamp
    is the largest (standing for the append time with LogAppendTime, ``timestamp_type=1``).
    Records must have no headers (the legacy formats have none).
    """
    if magic not in (0, 1):
        raise EncodeError(f"legacy message sets have magic 0 or 1, not {magic}")
    if not records:
        raise EncodeError("a message set needs at least one record")
    if any(r.headers for r in records):
        raise EncodeError(f"magic {magic} messages cannot carry headers")
    codec = _codec(compression)
    type_bit = (timestamp_type & 1) << 3 if magic == 1 else 0
    timestamps = [_NO_TIMESTAMP if r.timestamp is None else r.timestamp for r in records]
    if codec == 0:
        return b"".join(_legacy_message(r.offset, magic, type_bit, ts, r.key, r.value)
                        for r, ts in zip(records, timestamps))
    first = records[0].offset
    inner = b"".join(
        _legacy_message(r.offset - first if magic == 1 else r.offset, magic, type_bit, ts, r.key, r.value)
        for r, ts in zip(records, timestamps)
    )
    wrapped = compress(codec, inner, magic=magic)
    return _legacy_message(records[-1].offset, magic, codec | type_bit, max(timestamps), None, wrapped)
