"""The Python codec's verdict on a record: (record type, group id, error). No Spark import.

It serves two callers: the check's Arrow UDF (jobs.decode, for what the native reader cannot prove) and a
source task that checks the records it keeps before Spark sees them (jobs.partial_reduce).
"""
from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa

from offsets_codec import REGISTRY, DecodeError, decode_key, decode_value

_INT16 = struct.Struct(">h")
Verdict = tuple[int | None, str | None, str | None]


def group_id_of(key_data: dict[str, Any]) -> str | None:
    """Every key starts with its group id: `group` for types 0-2, `GroupId` for the KIP-848 family."""
    return key_data.get("group", key_data.get("GroupId"))


# An offsets topic rewrites the same few keys (one per group, topic and partition) over and over, so a
# worker remembers what each key decoded to. Bounded: cleared when full.
_KEY_CACHE: dict[bytes, Verdict] = {}
_KEY_CACHE_SIZE = 100_000


def check_record(key: bytes | None, value: bytes | None) -> Verdict:
    """(record type, group id, error): error is None when key and value both decode."""
    checked_key = _KEY_CACHE.get(key) if key is not None else None
    if checked_key is None:
        checked_key = _check_key(key)
        if key is not None:
            if len(_KEY_CACHE) >= _KEY_CACHE_SIZE:
                _KEY_CACHE.clear()
            _KEY_CACHE[key] = checked_key
    record_type, group_id, error = checked_key
    if error is not None or value is None:
        return checked_key
    try:
        decode_value(record_type, value)
    except DecodeError as e:
        hint = REGISTRY[record_type].early_access
        return record_type, None, f"{e} (possibly an early-access record: {hint})" if hint else str(e)
    return checked_key


def _check_key(key: bytes | None) -> Verdict:
    record_type = _INT16.unpack_from(key)[0] if key is not None and len(key) >= 2 else None
    try:
        decoded = decode_key(key)
    except DecodeError as e:
        return record_type, None, str(e)
    return decoded.record_type, group_id_of(decoded.data), None


def verdicts(keys: pa.Array, values: pa.Array, rows: pa.Array) -> list[pa.Array]:
    """`check_record` of the records at `rows` (indices) of `keys` and `values`, as three arrays as long as
    `keys` (record_type int16, group_id and error strings), null at every other row."""
    types: list = [None] * len(keys)
    groups: list = [None] * len(keys)
    errors: list = [None] * len(keys)
    for i, key, value in zip(rows.to_pylist(), keys.take(rows).to_pylist(), values.take(rows).to_pylist()):
        types[i], groups[i], errors[i] = check_record(key, value)
    return [pa.array(types, pa.int16()), pa.array(groups, pa.string()), pa.array(errors, pa.string())]
