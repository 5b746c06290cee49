"""Streaming reader of Kafka log segment files (``00000000000000000000.log``).

A segment is a sequence of batches, each starting with ``offset int64, size int32`` and with the
magic byte at position 16. Magic 2 is a record batch (CRC-32C, varint records, optional compression
of the records section); magic 0 and 1 are the legacy message sets, where a compressed "wrapper"
message holds a compressed message set of inner messages.

``read_segment`` yields one `Batch` per batch (per legacy message or wrapper) and follows the
broker's log recovery (``LogSegment.recover``, ``FileLogInputStream.nextBatch``, ``ensureValid``)
on damage: anything that makes the broker truncate the segment yields one fatal `SegmentDamage`
and ends the iteration. A batch that passes the broker's checks (sizes and CRC) but whose records
cannot be decompressed or parsed yields a non-fatal `SegmentDamage` and reading goes on, since the
broker keeps such a batch in the log.

It reads batch by batch from the stream and never holds more than one batch (plus its decompressed
records) in memory.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from .compression import CODEC_NAMES, decompress
from .crc import crc32c


NO_PRODUCER_ID = -1  # a batch written outside any transaction or idempotent producer (RecordBatch.NO_PRODUCER_ID)


@dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int
    timestamp: int | None  # epoch millis (-1 when the producer set none); None for magic-0 messages
    timestamp_type: int | None  # 0 CreateTime, 1 LogAppendTime; None for magic 0
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class Batch:
    position: int  # byte position of the batch (or outer message) in the file
    size: int  # bytes it occupies in the file
    magic: int
    base_offset: int
    last_offset: int
    compression: str  # "none" | "gzip" | "snappy" | "lz4" | "zstd"
    producer_id: int  # -1 when absent
    producer_epoch: int  # -1 when absent
    is_transactional: bool
    is_control: bool
    partition_leader_epoch: int  # -1 for magic < 2
    records: tuple[LogRecord, ...]

    @property
    def control_type(self) -> str | None:
        """"COMMIT" / "ABORT" (or "UNKNOWN") for a control batch, from its first record's key; None for data."""
        if not self.is_control:
            return None
        return (control_marker(self.records[0].key) if self.records else None) or "UNKNOWN"


@dataclass(frozen=True, slots=True)
class SegmentDamage:
    position: int  # byte position where the problem starts
    reason: str  # one line
    bytes_skipped: int  # bytes not read because of it: to the end of the file when fatal, else the batch
    fatal: bool  # True: reading stopped here; False: only this batch was skipped


_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}


def control_marker(key: bytes | None) -> str | None:
    """"COMMIT" / "ABORT" / "UNKNOWN" from a control record key; None if it is not a control key.

    Like Kafka's ``ControlRecordType.parseTypeId``: at least 4 bytes, a non-negative version (a newer
    version is read as the current one), then the int16 type.
    """
    if key is None or len(key) < _CONTROL_KEY.size:
        return None
    version, type_id = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        return None
    return _CONTROL_TYPES.get(type_id, "UNKNOWN")


# --- layout ---------------------------------------------------------------------------------------

# offset, size, then int32 partitionLeaderEpoch (v2) or uint32 CRC (v0/v1), then the magic byte
_PREFIX = struct.Struct(">qiib")
PREFIX_SIZE = _PREFIX.size  # 17
LOG_OVERHEAD = 12  # offset + size: the batch occupies 12 + size bytes
_OFFSET_SIZE = struct.Struct(">qi")
# after the prefix, v2: crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId,
# producerEpoch, baseSequence, recordsCount
_V2_HEADER = struct.Struct(">Ihiqqqhii")
V2_OVERHEAD = PREFIX_SIZE + _V2_HEADER.size  # 61
LEGACY_MIN_SIZE = 14  # crc, magic, attributes, key length, value length: the v0 minimum, checked first
_LEGACY_V0 = struct.Struct(">bi")  # attributes, key length
_LEGACY_V1 = struct.Struct(">bqi")  # attributes, timestamp, key length
_I32 = struct.Struct(">i")

_COMPRESSION_BITS = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

_READ_CHUNK = 1 << 20  # never ask the stream for more at once: a corrupt size must not allocate 2 GB


class _Malformed(ValueError):
    """Records that cannot be parsed (turned into a non-fatal SegmentDamage)."""


# --- reading --------------------------------------------------------------------------------------


def read_segment_file(path: str | os.PathLike) -> Iterator[Batch | SegmentDamage]:
    """`read_segment` over a file, with CRC verification; the file is closed when iteration ends."""
    with open(path, "rb") as f:
        yield from read_segment(f)


def read_segment(stream: BinaryIO, *, verify_crc: bool = True) -> Iterator[Batch | SegmentDamage]:
    """Yield the batches of a segment read from ``stream``, and any damage (see the module docstring).

    Positions count from where the stream was when called (its ``tell()`` if seekable). Only
    ``OSError`` from the stream escapes; bad bytes become `SegmentDamage`.
    """
    start, file_end = _extent(stream)
    pos = start
    while True:
        head = _read(stream, PREFIX_SIZE)
        if not head:
            return
        if len(head) < PREFIX_SIZE:
            if not any(head):
                yield SegmentDamage(pos, f"zero-filled tail (preallocated segment): {len(head)} bytes", len(head), True)
            else:
                yield SegmentDamage(pos, f"truncated batch header: {len(head)} bytes remain, {PREFIX_SIZE} needed",
                                    len(head), True)
            return
        base_offset, size, epoch_or_crc, magic = _PREFIX.unpack(head)
        if size < LEGACY_MIN_SIZE:
            if not any(head):  # a preallocated segment is zero-filled after its last batch
                rest, zeros = _rest(stream, check_zero=True)
                if zeros:
                    after = PREFIX_SIZE + rest
                    yield SegmentDamage(pos, f"zero-filled tail (preallocated segment): {after} bytes", after, True)
                    return
                after = PREFIX_SIZE + rest
            else:
                after = _bytes_after(stream, pos, PREFIX_SIZE, file_end)
            yield SegmentDamage(pos, f"corrupt batch: size {size} is below the minimum {LEGACY_MIN_SIZE}", after, True)
            return
        total = LOG_OVERHEAD + size
        if file_end is not None and pos + total > file_end:
            file_end = _extent(stream)[1]  # the file may have grown since
        if file_end is not None and pos + total > file_end:
            body = b""  # known short: do not read (a corrupt size could claim 2 GB)
            remain = file_end - pos
        else:
            body = _read(stream, size - (PREFIX_SIZE - LOG_OVERHEAD))
            remain = PREFIX_SIZE + len(body)
        if remain < total:
            yield SegmentDamage(pos, f"truncated batch: header says {total} bytes, {remain} remain", remain, True)
            return

        fatal = _check(magic, size, epoch_or_crc, body, verify_crc)
        if fatal is not None:
            yield SegmentDamage(pos, fatal, _bytes_after(stream, pos, total, file_end), True)
            return
        item: Batch | SegmentDamage
        try:
            if magic == 2:
                item = _v2_batch(pos, base_offset, epoch_or_crc, body)
            else:
                item = _legacy_batch(pos, base_offset, magic, body, verify_crc)
        except (ValueError, IndexError, struct.error, OverflowError) as e:  # CompressionError is a ValueError
            attributes = body[5] if magic == 2 else body[0]  # v2: the low byte of the int16 attributes
            compression = CODEC_NAMES.get(attributes & _COMPRESSION_BITS, "unknown codec")
            detail = " ".join(str(e).split()) or type(e).__name__
            item = SegmentDamage(pos, f"unreadable batch (magic {magic}, {compression}): {detail}", total, False)
        yield item
        pos += total


def _check(magic: int, size: int, epoch_or_crc: int, body: bytes, verify_crc: bool) -> str | None:
    """The broker's ``ensureValid``: the reason this batch makes recovery truncate the segment, or None."""
    if magic == 2:
        if LOG_OVERHEAD + size < V2_OVERHEAD:
            return f"corrupt batch: size {size} is below the minimum {V2_OVERHEAD - LOG_OVERHEAD} for magic 2"
        if verify_crc:
            stored = _I32.unpack_from(body)[0] & 0xFFFFFFFF
            computed = crc32c(memoryview(body)[4:])
            if stored != computed:
                return f"batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
        return None
    if magic not in (0, 1):
        return f"corrupt batch: unknown magic {magic}"
    if verify_crc:
        stored = epoch_or_crc & 0xFFFFFFFF
        computed = zlib.crc32(body, zlib.crc32(bytes((magic,))))  # CRC-32 over magic .. end
        if stored != computed:
            return f"batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
    return None


# --- magic 2 --------------------------------------------------------------------------------------


def _v2_batch(pos: int, base_offset: int, leader_epoch: int, body: bytes) -> Batch:
    (_crc, attributes, last_delta, base_ts, max_ts, producer_id, producer_epoch, _base_seq,
     count) = _V2_HEADER.unpack_from(body)
    codec = attributes & _COMPRESSION_BITS
    if codec not in CODEC_NAMES:
        raise _Malformed(f"unknown compression codec {codec}")
    if count < 0:
        raise _Malformed(f"invalid record count {count}")
    log_append = bool(attributes & _TIMESTAMP_TYPE_BIT)
    records_at = _V2_HEADER.size
    if codec:
        data = decompress(codec, memoryview(body)[records_at:], magic=2)
        records = _v2_records(data, 0, len(data), count, base_offset, base_ts, max_ts if log_append else None)
    else:
        records = _v2_records(body, records_at, len(body), count, base_offset, base_ts, max_ts if log_append else None)
    return Batch(pos, PREFIX_SIZE + len(body), 2, base_offset, base_offset + last_delta,
                 CODEC_NAMES[codec], producer_id, producer_epoch, bool(attributes & _TRANSACTIONAL_BIT),
                 bool(attributes & _CONTROL_BIT), leader_epoch, records)


def _zigzag(buf: bytes, p: int, max_bytes: int) -> tuple[int, int]:
    """A zigzag varint (``max_bytes`` 5) or varlong (10) at ``p``, as Kafka's ByteUtils reads them."""
    value = shift = 0
    for i in range(max_bytes):
        b = buf[p + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), p + i + 1
        shift += 7
    raise _Malformed(f"varint at byte {p} is longer than {max_bytes} bytes")


def _v2_records(buf: bytes, p: int, end: int, count: int, base_offset: int, base_ts: int,
                log_append_ts: int | None) -> tuple[LogRecord, ...]:
    """Parse ``count`` records from ``buf[p:end]``; every byte must belong to a record, as Kafka checks."""
    try:
        return _v2_parse(buf, p, end, count, base_offset, base_ts, log_append_ts)
    except IndexError:
        raise _Malformed(f"the records end inside one of the {count} records") from None


def _v2_parse(buf: bytes, p: int, end: int, count: int, base_offset: int, base_ts: int,
              log_append_ts: int | None) -> tuple[LogRecord, ...]:
    ts_type = 0 if log_append_ts is None else 1
    out = []
    append = out.append
    zigzag = _zigzag
    # Most varints here are one byte; the inline fast path (b < 0x80) keeps the loop quick.
    for _ in range(count):
        b = buf[p]
        if b < 0x80:
            length, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            length, p = zigzag(buf, p, 5)
        body_start, record_end = p, p + length
        if length < 0 or record_end > end:
            raise _Malformed(f"record at byte {p} declares {length} bytes, {end - p} remain")
        p += 1  # attributes: unused
        b = buf[p]
        if b < 0x80:
            ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            ts_delta, p = zigzag(buf, p, 10)
        b = buf[p]
        if b < 0x80:
            offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            offset_delta, p = zigzag(buf, p, 5)
        b = buf[p]
        if b < 0x80:
            n, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            n, p = zigzag(buf, p, 5)
        if n < 0:
            key = None
        else:
            if p + n > record_end:
                raise _Malformed(f"key of {n} bytes overruns its record at byte {p}")
            key = buf[p:p + n]
            p += n
        b = buf[p]
        if b < 0x80:
            n, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            n, p = zigzag(buf, p, 5)
        if n < 0:
            value = None
        else:
            if p + n > record_end:
                raise _Malformed(f"value of {n} bytes overruns its record at byte {p}")
            value = buf[p:p + n]
            p += n
        b = buf[p]
        if b == 0:
            headers: tuple = ()
            p += 1
        else:
            headers, p = _headers(buf, p, record_end)
        if p != record_end:
            raise _Malformed(f"record at offset {base_offset + offset_delta} declares {length} bytes "
                             f"but its fields take {p - body_start}")
        append(LogRecord(base_offset + offset_delta, base_ts + ts_delta if log_append_ts is None else log_append_ts,
                         ts_type, key, value, headers))
    if p != end:
        raise _Malformed(f"{end - p} bytes after the last of {count} records")
    return tuple(out)


def _headers(buf: bytes, p: int, end: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, p = _zigzag(buf, p, 5)
    if count < 0 or count > end - p:
        raise _Malformed(f"invalid header count {count}")
    headers = []
    for _ in range(count):
        n, p = _zigzag(buf, p, 5)
        if n < 0 or p + n > end:
            raise _Malformed(f"invalid header key length {n}")
        # Java decodes header keys as UTF-8 with replacement characters, never failing
        name = bytes(buf[p:p + n]).decode("utf-8", "replace")
        p += n
        n, p = _zigzag(buf, p, 5)
        if n < 0:
            headers.append((name, None))
        else:
            if p + n > end:
                raise _Malformed(f"header value of {n} bytes overruns its record")
            headers.append((name, bytes(buf[p:p + n])))
            p += n
    return tuple(headers), p


# --- magic 0 and 1 --------------------------------------------------------------------------------


def _legacy_message(buf: bytes, p: int, end: int, magic: int) -> tuple[int, int | None, bytes | None, bytes | None]:
    """(attributes, timestamp or None for v0, key, value) of the message whose attributes byte is at ``p``.

    Like Kafka's LegacyRecord, bytes after the value are not looked at.
    """
    if magic == 0:
        attributes, key_len = _LEGACY_V0.unpack_from(buf, p)
        timestamp = None
        p += _LEGACY_V0.size
    else:
        attributes, timestamp, key_len = _LEGACY_V1.unpack_from(buf, p)
        p += _LEGACY_V1.size
    key = None
    if key_len >= 0:
        if p + key_len > end:
            raise _Malformed(f"key of {key_len} bytes overruns its message")
        key = bytes(buf[p:p + key_len])
        p += key_len
    if p + 4 > end:
        raise _Malformed("message ends before its value length")
    (value_len,) = _I32.unpack_from(buf, p)
    p += 4
    value = None
    if value_len >= 0:
        if p + value_len > end:
            raise _Malformed(f"value of {value_len} bytes overruns its message")
        value = bytes(buf[p:p + value_len])
    return attributes, timestamp, key, value


def _legacy_batch(pos: int, offset: int, magic: int, body: bytes, verify_crc: bool) -> Batch:
    attributes, timestamp, key, value = _legacy_message(body, 0, len(body), magic)
    codec = attributes & _COMPRESSION_BITS
    ts_type = None if magic == 0 else (attributes & _TIMESTAMP_TYPE_BIT) >> 3
    size = PREFIX_SIZE + len(body)
    if codec == 0:
        records = (LogRecord(offset, timestamp, ts_type, key, value),)
        return Batch(pos, size, magic, offset, offset, "none", -1, -1, False, False, -1, records)
    if value is None:
        raise _Malformed("compressed wrapper message with a null value")
    inner = decompress(codec, value, magic=magic)  # rejects zstd below magic 2, as Kafka does
    records = _inner_records(inner, offset, magic, timestamp if ts_type == 1 else None, ts_type, verify_crc)
    return Batch(pos, size, magic, records[0].offset, offset, CODEC_NAMES[codec], -1, -1, False, False, -1, records)


def _inner_records(data: bytes, wrapper_offset: int, wrapper_magic: int, log_append_ts: int | None,
                   wrapper_ts_type: int | None, verify_crc: bool) -> tuple[LogRecord, ...]:
    """The messages of a decompressed wrapper value (Kafka's AbstractLegacyRecordBatch.DeepRecordsIterator)."""
    parsed = []
    p, n = 0, len(data)
    while n - p >= LOG_OVERHEAD:
        offset, size = _OFFSET_SIZE.unpack_from(data, p)
        if size < LEGACY_MIN_SIZE:
            raise _Malformed(f"inner message at byte {p} has size {size}, below the minimum {LEGACY_MIN_SIZE}")
        end = p + LOG_OVERHEAD + size
        if end > n:
            break  # Kafka's DataLogInputStream stops silently at a partial last message
        stored_crc = _I32.unpack_from(data, p + LOG_OVERHEAD)[0] & 0xFFFFFFFF
        magic = data[p + 16]
        if magic > 1:
            raise _Malformed(f"inner message at byte {p} has magic {magic}")
        if verify_crc:
            computed = zlib.crc32(memoryview(data)[p + 16:end])
            if computed != stored_crc:
                raise _Malformed(f"inner message CRC mismatch at byte {p}: stored {stored_crc:#010x}, "
                                 f"computed {computed:#010x}")
        attributes, timestamp, key, value = _legacy_message(data, p + PREFIX_SIZE, end, magic)
        if attributes & _COMPRESSION_BITS:
            raise _Malformed("inner messages must not be compressed")
        if magic == 0:
            timestamp, ts_type = None, None
        else:
            ts_type = wrapper_ts_type
            if log_append_ts is not None:
                timestamp = log_append_ts
        parsed.append((offset, timestamp, ts_type, key, value))
        p = end
    if not parsed:
        raise _Malformed("compressed message set with no inner messages")
    base = 0
    if wrapper_magic == 1:
        # Inner offsets are relative; the wrapper carries the absolute offset of the last one
        # (0 from some librdkafka versions, then the relative offsets are used as they are).
        last_inner = parsed[-1][0]
        if wrapper_offset != 0:
            if wrapper_offset < last_inner:
                raise _Malformed(f"wrapper offset {wrapper_offset} is below the last inner offset {last_inner}")
            base = wrapper_offset - last_inner
    return tuple(LogRecord(base + o, t, tt, k, v) for o, t, tt, k, v in parsed)


# --- stream helpers -------------------------------------------------------------------------------


def _extent(stream: BinaryIO) -> tuple[int, int | None]:
    """(current position, end of the stream) when seekable, else (0, None)."""
    try:
        if stream.seekable():
            here = stream.tell()
            end = stream.seek(0, os.SEEK_END)
            stream.seek(here)
            return here, end
    except (AttributeError, ValueError, OSError):
        pass
    return 0, None


def _read(stream: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at the end of the stream), asking for at most _READ_CHUNK at a time."""
    first = stream.read(min(n, _READ_CHUNK)) or b""
    if len(first) == n or not first:
        return first
    parts = [first]
    got = len(first)
    while got < n:
        more = stream.read(min(n - got, _READ_CHUNK))
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _bytes_after(stream: BinaryIO, pos: int, consumed: int, file_end: int | None) -> int:
    """Bytes from ``pos`` to the end of the stream, ``consumed`` of which were already read."""
    if file_end is not None:
        return max(file_end - pos, consumed)
    return consumed + _rest(stream, check_zero=False)[0]


def _rest(stream: BinaryIO, *, check_zero: bool) -> tuple[int, bool]:
    """Consume the rest of the stream: (bytes, whether they are all zero when ``check_zero``)."""
    zeros = check_zero
    total = 0
    while True:
        chunk = stream.read(_READ_CHUNK)
        if not chunk:
            return total, zeros
        total += len(chunk)
        if zeros and chunk.count(0) != len(chunk):
            zeros = False
