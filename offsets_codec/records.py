"""Record framing (spec §1): key = int16 record type + key struct; value = int16 version + value struct, or null.

This is the hot path of the Spark job, so the readers for every (type, version) are compiled at import
and looked up in plain dicts.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from .errors import DecodeError, EncodeError, WireError
from .plan import plan_for
from .reader import reader_for
from .layout import RecordType
from .registry import REGISTRY, SHARE_STATE_REGISTRY
from .wire import as_bytes as _as_bytes
from .writer import encode_struct

_INT16 = struct.Struct(">h")
_unpack_int16 = _INT16.unpack_from


@dataclass(frozen=True)
class Key:
    """A decoded key. ``data`` uses Kafka's field names (``group``/``topic``/``partition``, ``GroupId``…)."""

    record_type: int
    name: str
    data: dict[str, Any]
    consumed: int = 0  # bytes read, including the 2-byte type; Kafka ignores any that follow


@dataclass(frozen=True)
class Value:
    """A decoded value: its version, the layout name, the fields of that version and the bytes read."""

    version: int
    name: str
    data: dict[str, Any]
    consumed: int  # bytes read, including the 2-byte version; < len(value) means trailing bytes


@dataclass(frozen=True)
class Record:
    key: Key
    value: Value | None  # None = tombstone

    @property
    def tombstone(self) -> bool:
        return self.value is None


_new = object.__new__


# The decode paths build millions of these. A frozen dataclass __init__ sets each field through
# object.__setattr__; filling __dict__ in one go is equivalent and about a third cheaper.
def _make_key(record_type: int, name: str, data: dict[str, Any], consumed: int) -> Key:
    k = _new(Key)
    k.__dict__.update(record_type=record_type, name=name, data=data, consumed=consumed)
    return k


def _make_value(version: int, name: str, data: dict[str, Any], consumed: int) -> Value:
    v = _new(Value)
    v.__dict__.update(version=version, name=name, data=data, consumed=consumed)
    return v


class RecordCodec:
    """Decoding and encoding of one topic's records: `registry` maps its record type ids to layouts. Each
    internal topic has its own (``__consumer_offsets``: REGISTRY; ``__share_group_state``: SHARE_STATE_REGISTRY),
    as the type ids overlap; the readers of every (type, version) are compiled once."""

    def __init__(self, registry: Mapping[int, RecordType]) -> None:
        self.registry = registry
        # record type -> (key layout name, reader); record type -> {version: (value layout name, reader)}
        self._key_readers = {t: (rt.key.name, reader_for(plan_for(rt.key, rt.key.valid.lowest)))
                             for t, rt in registry.items()}
        self._value_readers = {t: {v: (rt.value.name, reader_for(plan_for(rt.value, v))) for v in rt.value.versions}
                               for t, rt in registry.items()}

    def decode_key(self, key: bytes) -> Key:
        """Decode a record key. Raises `DecodeError` for null, short, unknown-type or malformed keys."""
        if key.__class__ is not bytes:
            key = _as_bytes(key, "key")
        try:
            record_type = _unpack_int16(key, 0)[0]
        except struct.error:
            raise _short_prefix(key, "key", "type", None) from None
        entry = self._key_readers.get(record_type)
        if entry is None:
            raise DecodeError(f"unknown record type {record_type}", record_type=record_type, field="type",
                              position=0)
        name, read = entry
        try:
            data, pos = read(key, 2)
        except WireError as e:
            raise e.to_decode_error(record_type, None) from None
        except Exception as e:  # pragma: no cover - defensive
            raise _internal(e, record_type, None) from e
        return _make_key(record_type, name, data, pos)

    def decode_value(self, record_type: int, value: bytes) -> Value:
        """Decode a non-null value of ``record_type``. Trailing bytes are accepted, as Kafka does; see ``consumed``."""
        if value.__class__ is not bytes:
            value = _as_bytes(value, "value")
        try:
            versions = self._value_readers.get(record_type)
        except TypeError:  # unhashable record_type
            versions = None
        if versions is None:
            raise DecodeError(
                f"unknown record type {record_type}",
                record_type=record_type if isinstance(record_type, int) else None,
            )
        try:
            version = _unpack_int16(value, 0)[0]
        except struct.error:
            raise _short_prefix(value, "value", "version", record_type) from None
        entry = versions.get(version)
        if entry is None:
            raise DecodeError(
                f"unknown value version {version} for record type {record_type}",
                record_type=record_type,
                version=version,
                field="version",
                position=0,
            )
        name, read = entry
        try:
            data, pos = read(value, 2)
        except WireError as e:
            raise e.to_decode_error(record_type, version) from None
        except Exception as e:  # pragma: no cover - defensive
            raise _internal(e, record_type, version) from e
        return _make_value(version, name, data, pos)

    def decode_record(self, key: bytes, value: bytes | None) -> Record:
        """Decode a key and its value; a ``None`` value is a tombstone (an empty value is an error, as in Kafka)."""
        k = self.decode_key(key)
        return Record(k, None if value is None else self.decode_value(k.record_type, value))

    def encode_key(self, record_type: int, data: dict[str, Any]) -> bytes:
        """The key bytes of ``record_type`` for ``data`` (Kafka field names)."""
        rt = self.registry.get(record_type)
        if rt is None:
            raise EncodeError(f"unknown record type {record_type}")
        return _INT16.pack(record_type) + encode_struct(plan_for(rt.key, rt.key.valid.lowest), data)

    def encode_value(self, record_type: int, version: int, data: dict[str, Any]) -> bytes:
        """The value bytes of ``record_type`` at ``version``; missing fields take their defaults."""
        rt = self.registry.get(record_type)
        if rt is None:
            raise EncodeError(f"unknown record type {record_type}")
        if not isinstance(version, int) or version not in rt.value.valid:
            raise EncodeError(f"unknown value version {version} for record type {record_type}")
        return _INT16.pack(version) + encode_struct(plan_for(rt.value, version), data)


def _short_prefix(buf: bytes, what: str, name: str, record_type: int | None) -> DecodeError:
    if not buf:
        return DecodeError(f"empty {what}", record_type=record_type)
    return DecodeError(f"truncated at byte 0 reading int16 {name}", record_type=record_type, field=name, position=0)


def _internal(e: Exception, record_type: int | None, version: int | None) -> DecodeError:
    # Should never happen; keeps the "only DecodeError escapes" promise if it does. Tests fuzz for it.
    return DecodeError(f"internal decoder error: {type(e).__name__}: {e}", record_type=record_type, version=version)


OFFSETS = RecordCodec(REGISTRY)  # __consumer_offsets
SHARE_STATE = RecordCodec(SHARE_STATE_REGISTRY)  # __share_group_state: never decoded with the other

decode_key = OFFSETS.decode_key
decode_value = OFFSETS.decode_value
decode_record = OFFSETS.decode_record
encode_key = OFFSETS.encode_key
encode_value = OFFSETS.encode_value
