"""Bounds-checked primitive readers and writers for Kafka's message encoding (spec §2).

Readers are built once per field by small factories and then called as ``read(buf, pos) -> (value, pos)``
on ``bytes``; the field name is baked in so that a failure can say what it was reading. Every length
and count is checked against the bytes that remain before anything is allocated.
"""

from __future__ import annotations

import base64
import struct
from typing import Any, Callable

from .errors import DecodeError, EncodeError, WireError

Reader = Callable[[Any, int], "tuple[Any, int]"]

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UUID_BYTES = 16
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID in its text form

MAX_STRING_LENGTH = 0x7FFF  # Kafka rejects longer strings, compact or not

_TRUNCATED = WireError.TRUNCATED


def as_bytes(data: Any, what: str) -> bytes:
    """Accept any bytes-like input as ``bytes``; anything else (None included) is a `DecodeError`.

    pyarrow hands out ``bytes``; callers may also have ``bytearray`` or ``memoryview``.
    """
    if data is None:
        raise DecodeError(f"null {what}")
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            return bytes(data)
        except (TypeError, ValueError, BufferError) as e:
            raise DecodeError(f"{what} is not a readable buffer: {e}") from None
    raise DecodeError(f"{what} must be bytes, got {type(data).__name__}")


# --- unsigned varints -----------------------------------------------------------------------------


def read_uvarint(buf: Any, pos: int, type_name: str, field: str, start: int) -> tuple[int, int]:
    """Read an unsigned varint at ``pos``; errors name ``type_name field`` at ``start``.

    Like Kafka's ``ByteUtils.readUnsignedVarint`` it accepts at most 5 bytes.
    """
    try:
        b = buf[pos]
    except IndexError:
        raise WireError(_TRUNCATED, type_name, start, field) from None
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    for i in range(1, 5):
        try:
            b = buf[pos + i]
        except IndexError:
            raise WireError(_TRUNCATED, type_name, start, field) from None
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + i + 1
        shift += 7
    raise WireError(WireError.VARINT, type_name, start, field)


def write_uvarint(out: bytearray, value: int) -> None:
    """Append ``value`` (0 … 2**32-1) as an unsigned varint."""
    if not 0 <= value <= 0xFFFFFFFF:
        raise EncodeError(f"unsigned varint out of range: {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


# --- uuid text form -------------------------------------------------------------------------------


def uuid_to_str(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: base64url without padding (22 characters)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_from_str(text: str) -> bytes:
    """Inverse of `uuid_to_str`; raises `EncodeError` unless the text decodes to exactly 16 bytes."""
    if not isinstance(text, str):
        raise EncodeError(f"uuid must be a base64url string, got {type(text).__name__}")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as e:
        raise EncodeError(f"invalid uuid {text!r}: {e}") from None
    if len(raw) != UUID_BYTES or uuid_to_str(raw) != text.rstrip("="):
        raise EncodeError(f"invalid uuid {text!r}: not 16 bytes of base64url")
    return raw


# --- reader factories -----------------------------------------------------------------------------


def fixed_reader(st: struct.Struct, type_name: str, field: str) -> Reader:
    """A reader for one int8/int16/uint16/int32/int64."""
    unpack = st.unpack_from
    size = st.size

    def read(buf: Any, pos: int) -> tuple[int, int]:
        try:
            return unpack(buf, pos)[0], pos + size
        except struct.error:
            raise WireError(_TRUNCATED, type_name, pos, field) from None

    return read


def uuid_reader(field: str) -> Reader:
    """16 raw bytes, returned in Kafka's text form."""

    def read(buf: Any, pos: int) -> tuple[str, int]:
        end = pos + UUID_BYTES
        if end > len(buf):
            raise WireError(_TRUNCATED, "uuid", pos, field)
        return uuid_to_str(buf[pos:end]), end

    return read


def _length_reader(compact: bool, prefix: struct.Struct, type_name: str, field: str) -> Reader:
    """Read a length/count prefix; returns the length (``-1`` = null, possibly other negatives)."""
    if compact:

        def read_len(buf: Any, pos: int) -> tuple[int, int]:
            try:
                b = buf[pos]
            except IndexError:
                raise WireError(_TRUNCATED, type_name, pos, field) from None
            if b < 0x80:
                return b - 1, pos + 1
            n, p = read_uvarint(buf, pos, type_name, field, pos)
            return n - 1, p

    else:
        unpack = prefix.unpack_from
        size = prefix.size

        def read_len(buf: Any, pos: int) -> tuple[int, int]:
            try:
                return unpack(buf, pos)[0], pos + size
            except struct.error:
                raise WireError(_TRUNCATED, type_name, pos, field) from None

    return read_len


def _bad_length(n: int, nullable: bool, type_name: str, pos: int, field: str) -> WireError | None:
    """The error for a negative length, or None when it is an allowed null."""
    if n == -1:
        return None if nullable else WireError(WireError.NULL, type_name, pos, field)
    return WireError(WireError.LENGTH, type_name, pos, field, n)


def string_reader(field: str, nullable: bool, compact: bool) -> Reader:
    """``string`` (int16 length, -1 = null) or compact string (uvarint length+1, 0 = null); strict UTF-8.

    Kafka reads any negative int16 length of a nullable string as null; other negatives are
    rejected here because Kafka never writes them.
    """

    def fail(kind: str, pos: int, detail: object = None) -> WireError:
        return WireError(kind, "string", pos, field, detail)

    def tail(buf: bytes, pos: int, start: int, n: int) -> tuple[str | None, int]:
        if n < 0:
            err = _bad_length(n, nullable, "string", pos, field)
            if err is None:
                return None, start
            raise err
        if n > MAX_STRING_LENGTH:  # only reachable with compact lengths; Kafka rejects these too
            raise fail(WireError.LENGTH, pos, n)
        end = start + n
        if end > len(buf):
            raise fail(_TRUNCATED, pos)
        try:
            return buf[start:end].decode(), end
        except UnicodeDecodeError:
            raise fail(WireError.UTF8, pos) from None

    if compact:

        def read_compact(buf: bytes, pos: int) -> tuple[str | None, int]:
            try:
                b = buf[pos]
            except IndexError:
                raise fail(_TRUNCATED, pos) from None
            if 0 < b < 0x80:  # the common case: a short non-null string
                start = pos + 1
                end = start + b - 1
                if end <= len(buf):
                    try:
                        return buf[start:end].decode(), end
                    except UnicodeDecodeError:
                        raise fail(WireError.UTF8, pos) from None
                raise fail(_TRUNCATED, pos)
            n, start = read_uvarint(buf, pos, "string", field, pos)
            return tail(buf, pos, start, n - 1)

        return read_compact

    unpack = INT16.unpack_from

    def read(buf: bytes, pos: int) -> tuple[str | None, int]:
        try:
            n = unpack(buf, pos)[0]
        except struct.error:
            raise fail(_TRUNCATED, pos) from None
        start = pos + 2
        end = start + n
        if n >= 0 and end <= len(buf):
            try:
                return buf[start:end].decode(), end
            except UnicodeDecodeError:
                raise fail(WireError.UTF8, pos) from None
        return tail(buf, pos, start, n)

    return read


def bytes_reader(field: str, nullable: bool, compact: bool) -> Reader:
    """``bytes`` (int32 length, -1 = null) or compact bytes (uvarint length+1, 0 = null)."""
    read_len = _length_reader(compact, INT32, "bytes", field)

    def read(buf: bytes, pos: int) -> tuple[bytes | None, int]:
        n, start = read_len(buf, pos)
        if n < 0:
            err = _bad_length(n, nullable, "bytes", pos, field)
            if err is None:
                return None, start
            raise err
        end = start + n
        if end > len(buf):
            raise WireError(_TRUNCATED, "bytes", pos, field)
        return buf[start:end], end

    return read


def array_reader(
    field: str,
    nullable: bool,
    compact: bool,
    element: Reader,
    element_min_size: int,
    element_code: str | None = None,
) -> Reader:
    """An array: int32 count (or compact uvarint count+1), then the elements.

    ``element_code`` (a `struct` code such as ``"i"``) reads an array of fixed-width ints in one call.
    The count is checked against ``element_min_size`` × count before any element is read, so a
    corrupt count of 2**31-1 fails at once instead of allocating.
    """
    read_len = _length_reader(compact, INT32, "array", field)

    def check(buf: Any, pos: int) -> tuple[int, int]:
        n, start = read_len(buf, pos)
        if n < 0:
            err = _bad_length(n, nullable, "array", pos, field)
            if err is None:
                return -1, start
            raise err
        need = n * element_min_size
        remain = len(buf) - start
        if need > remain:
            raise WireError(_TRUNCATED, "array", pos, field, f"{n} elements need at least {need} bytes, {remain} remain")
        return n, start

    if element_code is not None:
        cache: dict[int, struct.Struct] = {}

        def read(buf: Any, pos: int) -> tuple[list | None, int]:
            n, p = check(buf, pos)
            if n <= 0:
                return (None if n < 0 else []), p
            st = cache.get(n)
            if st is None:
                st = struct.Struct(f">{n}{element_code}")
                if len(cache) < 64:
                    cache[n] = st
            return list(st.unpack_from(buf, p)), p + st.size

        return read

    def read(buf: Any, pos: int) -> tuple[list | None, int]:
        n, p = check(buf, pos)
        if n < 0:
            return None, p
        items = []
        append = items.append
        i = 0
        try:
            for i in range(n):
                value, p = element(buf, p)
                append(value)
        except WireError as e:
            raise e.prefixed(f"{field}[{i}]") from None
        return items, p

    return read


# --- writers --------------------------------------------------------------------------------------


def write_fixed(out: bytearray, st: struct.Struct, value: Any, type_name: str, field: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise EncodeError(f"{type_name} field {field} needs an int, got {type(value).__name__}")
    try:
        out += st.pack(value)
    except struct.error:
        raise EncodeError(f"value {value} out of range for {type_name} field {field}") from None


def write_length(out: bytearray, n: int, compact: bool, prefix: struct.Struct) -> None:
    """Length/count prefix; ``n == -1`` writes null."""
    if compact:
        write_uvarint(out, n + 1)
    else:
        out += prefix.pack(n)


def write_string(out: bytearray, value: str | None, compact: bool, nullable: bool, field: str) -> None:
    if value is None:
        if not nullable:
            raise EncodeError(f"null string in non-nullable field {field}")
        write_length(out, -1, compact, INT16)
        return
    if not isinstance(value, str):
        raise EncodeError(f"string field {field} needs a str, got {type(value).__name__}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise EncodeError(f"string field {field} is not valid Unicode") from None
    if len(raw) > MAX_STRING_LENGTH:
        raise EncodeError(f"string field {field} is {len(raw)} bytes, more than {MAX_STRING_LENGTH}")
    write_length(out, len(raw), compact, INT16)
    out += raw


def write_bytes(out: bytearray, value: bytes | None, compact: bool, nullable: bool, field: str) -> None:
    if value is None:
        if not nullable:
            raise EncodeError(f"null bytes in non-nullable field {field}")
        write_length(out, -1, compact, INT32)
        return
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise EncodeError(f"bytes field {field} needs bytes, got {type(value).__name__}")
    raw = bytes(value)
    write_length(out, len(raw), compact, INT32)
    out += raw
