"""The check: which records the replay can read, and why the others go to quarantine.

`check` adds to records (jobs.replay.records) each one's record type, group id, transaction marker and error.
Offset commits, nearly the whole log, are proven in bulk by jobs.decode.arrow_reader, which proves no more
than the codec accepts; every other record (group records, anything the bulk reader is unsure of) is checked by
the Python codec, one record at a time. A record the replay cannot place (no partition or offset, a negative
offset) is an error too: it would reorder the log.
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.base.arrow import mask
from jobs.decode.arrow_reader import proven, read
from offsets_codec import REGISTRY, SHARE_STATE, SHARE_STATE_REGISTRY, DecodeError, decode_key, decode_value
from offsets_codec.registry import OFFSET_COMMIT_TYPES

OFFSET_VALUE = REGISTRY[OFFSET_COMMIT_TYPES[0]].value
OFFSET_KEY = REGISTRY[OFFSET_COMMIT_TYPES[0]].key
# Both offset-commit key types are read as the key layout's one version (their first two bytes are the type).
OFFSET_KEY_HEADS = {t: OFFSET_KEY.valid.lowest for t in OFFSET_COMMIT_TYPES}
# The first two bytes of an offset-commit key: its type.
OFFSET_KEY_PREFIXES = tuple(t.to_bytes(2, "big", signed=True) for t in OFFSET_COMMIT_TYPES)
CHECK_FIELDS = (("record_type", pa.int16()), ("group_id", pa.string()), ("transaction_marker", pa.string()),
                ("error", pa.string()))
MALFORMED_CONTROL_KEY = "control record with a malformed key (expected int16 version >= 0, int16 type)"
NO_POSITION = "record without a coordinator partition or record offset"
NEGATIVE_OFFSET = "negative record offset"
_INT16 = struct.Struct(">h")
Verdict = tuple[int | None, str | None, str | None]


def check(records: pa.Table) -> pa.Table:
    """`records` (RECORD_SCHEMA) plus CHECK_FIELDS: error is null when the record can be replayed."""
    keys, values = records.column("key").combine_chunks(), records.column("value").combine_chunks()
    control = mask(records.column("is_control"))
    marker, sound = transaction_markers(keys, control)
    # An offsets topic rewrites few keys over and over: each distinct key is read once.
    distinct = pc.dictionary_encode(keys)
    key = read(distinct.dictionary, OFFSET_KEY, ("group",), heads=OFFSET_KEY_HEADS)
    index = pc.fill_null(distinct.indices, 0)
    at = index.to_numpy()
    key_ok = key.ok[at] & mask(pc.is_valid(keys))
    bulk = key_ok & (_is_null(values) | proven(values, OFFSET_VALUE)) & ~control
    head = pc.binary_slice(distinct.dictionary, 0, 2)
    distinct_types = np.zeros(len(distinct.dictionary), np.int16)
    for record_type, prefix in zip(OFFSET_COMMIT_TYPES, OFFSET_KEY_PREFIXES):
        distinct_types[mask(pc.equal(head, pa.scalar(prefix, pa.binary())))] = record_type
    record_type = pa.array(distinct_types[at], mask=~bulk)
    group_id = pc.if_else(pa.array(bulk), key.fields["group"].take(index), None)
    error = pa.array(np.where(control & ~sound, MALFORMED_CONTROL_KEY, None), pa.string())
    rest = np.flatnonzero(~bulk & ~control)
    if len(rest):  # the codec's verdicts where the bulk reader gave none (and ours are null)
        theirs = verdicts(keys, values, pa.array(rest))
        at = np.zeros(len(bulk), bool)
        at[rest] = True
        record_type, group_id, error = (pc.replace_with_mask(ours, pa.array(at), other) for ours, other in
                                        zip((record_type, group_id, error), theirs))
    positions = _misplaced(records)
    if positions is not None:
        error = pc.coalesce(positions, error)
    checked = records
    for (name, _), column in zip(CHECK_FIELDS, (record_type, group_id, marker, error)):
        checked = checked.append_column(name, column)
    return checked


def check_share_state(records: pa.Table) -> pa.Table:
    """Records of `__share_group_state` (RECORD_SCHEMA) plus CHECK_FIELDS, read with the share coordinator's
    registry, one at a time (they are few). Its errors name the topic: its type ids mean other records here."""
    types, groups, errors = [], [], []
    for key, value, control in zip(*(records.column(c).to_pylist() for c in ("key", "value", "is_control"))):
        record_type, group_id, error = (None, None, None) if control else _check_share_record(key, value)
        types.append(record_type)
        groups.append(group_id)
        errors.append(None if error is None else f"__share_group_state: {error}")
    error = pa.array(errors, pa.string())
    positions = _misplaced(records)
    if positions is not None:
        error = pc.coalesce(positions, error)
    return records.append_column("record_type", pa.array(types, pa.int16())).append_column(
        "group_id", pa.array(groups, pa.string())).append_column(
        "transaction_marker", pa.nulls(records.num_rows, pa.string())).append_column("error", error)


def _check_share_record(key: bytes | None, value: bytes | None) -> Verdict:
    record_type = _INT16.unpack_from(key)[0] if key is not None and len(key) >= 2 else None
    try:
        decoded = SHARE_STATE.decode_key(key)
        if value is not None:
            SHARE_STATE.decode_value(decoded.record_type, value)
    except DecodeError as e:
        hint = SHARE_STATE_REGISTRY[record_type].early_access if record_type in SHARE_STATE_REGISTRY else ""
        return record_type, None, f"{e} (possibly an early-access record: {hint})" if hint else str(e)
    return decoded.record_type, decoded.data["GroupId"], None


def _misplaced(records: pa.Table) -> pa.Array | None:
    """The error of records the replay cannot place in their partition's log; None when every one can."""
    partition, offset = records.column("coordinator_partition"), records.column("record_offset")
    unplaced = mask(pc.or_(pc.is_null(partition), pc.is_null(offset)))
    negative = mask(pc.less(offset, 0))
    if not (unplaced.any() or negative.any()):
        return None
    return pa.array(np.where(unplaced, NO_POSITION, np.where(negative, NEGATIVE_OFFSET, None)), pa.string())


def transaction_markers(keys: pa.Array, control: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Per record: COMMIT, ABORT or UNKNOWN for a control record whose key Kafka reads (int16 version >= 0, int16
    type: ControlRecordType), else null; and which control keys are sound."""
    sound = np.zeros(len(keys), bool)
    marker = np.full(len(keys), None, dtype=object)
    rows = np.flatnonzero(control)
    if len(rows):
        for i, key in zip(rows, keys.take(pa.array(rows)).to_pylist()):
            if key is not None and len(key) >= 4 and key[0] < 0x80:
                sound[i] = True
                marker[i] = {b"\x00\x01": "COMMIT", b"\x00\x00": "ABORT"}.get(key[2:4], "UNKNOWN")
    return pa.array(marker, pa.string()), sound


def _is_null(values: pa.Array) -> np.ndarray:
    return np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def group_id_of(key_data: dict[str, Any]) -> str | None:
    """Every key starts with its group id: `group` for types 0-2, `GroupId` for the KIP-848 family."""
    return key_data.get("group", key_data.get("GroupId"))


# An offsets topic rewrites the same few keys (one per group, topic and partition) over and over, so a
# worker remembers what each key decoded to. Bounded: cleared when full.
_KEY_CACHE: dict[bytes, Verdict] = {}
_KEY_CACHE_SIZE = 100_000


def check_record(key: bytes | None, value: bytes | None) -> Verdict:
    """(record type, group id, error) by the codec: error is None when key and value both decode."""
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
    """`check_record` of the records at `rows` (indices) of `keys` and `values`, as three arrays in the order of
    `rows` (record_type int16, group_id and error strings)."""
    found = [check_record(key, value) for key, value in zip(keys.take(rows).to_pylist(), values.take(rows).to_pylist())]
    types, groups, errors = zip(*found) if found else ((), (), ())
    return [pa.array(types, pa.int16()), pa.array(groups, pa.string()), pa.array(errors, pa.string())]
