"""The one generic writer: the inverse of `reader`, walking the same plans.

Used for test fixtures, hypothesis round trips and the spec's worked examples, so it favours clear
errors over speed. Like Kafka it fills missing fields with their defaults, leaves tagged fields out
when they equal their default, and writes tags in ascending order.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from . import wire
from .errors import EncodeError
from .layout import ArrayOf, Primitive, Struct
from .plan import FieldPlan, Plan

_FIXED = {"int8": wire.INT8, "int16": wire.INT16, "uint16": wire.UINT16, "int32": wire.INT32, "int64": wire.INT64}
_MISSING = object()


def normalize(plan: Plan, data: Mapping[str, Any], path: str = "") -> dict[str, Any]:
    """What decoding ``encode(plan, data)`` gives back: the fields of this version, defaults filled in.

    Keys that are fields of the struct in other versions are dropped (as Kafka drops ignorable
    fields); keys that are not fields at all are an error, since they are most likely typos.
    """
    if not isinstance(data, Mapping):
        raise EncodeError(f"{path or plan.name} needs a dict, got {type(data).__name__}")
    unknown = sorted(k for k in data if k not in plan.all_names)
    if unknown:
        raise EncodeError(f"{path or plan.name}: unknown field(s) {', '.join(map(str, unknown))}")
    out: dict[str, Any] = {}
    for fp in plan.fields:
        value = data.get(fp.name, _MISSING)
        out[fp.name] = fp.default() if value is _MISSING else _normalize_value(fp, value, _join(path, fp.name))
    return out


def _normalize_value(fp: FieldPlan, value: Any, path: str) -> Any:
    if value is None:
        return None
    t = fp.type
    if isinstance(t, Struct):
        assert fp.struct_plan is not None
        return normalize(fp.struct_plan, value, path)
    if isinstance(t, ArrayOf):
        if not isinstance(value, (list, tuple)):
            raise EncodeError(f"array field {path} needs a list, got {type(value).__name__}")
        if isinstance(t.element, Struct):
            assert fp.struct_plan is not None
            return [normalize(fp.struct_plan, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return list(value)
    if t.name == "bytes" and isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def encode_struct(plan: Plan, data: Mapping[str, Any]) -> bytes:
    """Encode ``data`` as the struct of ``plan`` (no version prefix)."""
    out = bytearray()
    _write_struct(plan, normalize(plan, data), out, "")
    return bytes(out)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _write_struct(plan: Plan, data: dict[str, Any], out: bytearray, path: str) -> None:
    for fp in plan.untagged:
        _write_value(fp, data[fp.name], out, _join(path, fp.name))
    if not plan.flexible:
        return
    present = []
    for fp in plan.tagged:
        value = data[fp.name]
        if value == fp.default():
            continue  # Kafka never writes a tagged field that equals its default
        payload = bytearray()
        _write_value(fp, value, payload, _join(path, fp.name))
        present.append((fp.tag, payload))
    wire.write_uvarint(out, len(present))
    for tag, payload in present:
        wire.write_uvarint(out, tag)
        wire.write_uvarint(out, len(payload))
        out += payload


def _write_value(fp: FieldPlan, value: Any, out: bytearray, path: str) -> None:
    t = fp.type
    if isinstance(t, Primitive):
        _write_primitive(t, value, out, fp.nullable, fp.compact, path)
    elif isinstance(t, ArrayOf):
        _write_array(fp, t, value, out, path)
    else:
        _write_struct_field(fp, value, out, path)


def _write_primitive(t: Primitive, value: Any, out: bytearray, nullable: bool, compact: bool, path: str) -> None:
    if t.fixed:
        wire.write_fixed(out, _FIXED[t.name], value, t.name, path)
    elif t.name == "uuid":
        out += wire.uuid_from_str(value)
    elif t.name == "string":
        wire.write_string(out, value, compact, nullable, path)
    else:
        wire.write_bytes(out, value, compact, nullable, path)


def _write_array(fp: FieldPlan, t: ArrayOf, value: Any, out: bytearray, path: str) -> None:
    if value is None:
        if not fp.nullable:
            raise EncodeError(f"null array in non-nullable field {path}")
        wire.write_length(out, -1, fp.compact, wire.INT32)
        return
    wire.write_length(out, len(value), fp.compact, wire.INT32)
    el = t.element
    if isinstance(el, Struct):
        assert fp.struct_plan is not None
        for i, item in enumerate(value):
            _write_struct(fp.struct_plan, item, out, f"{path}[{i}]")
    elif el.fixed:
        if any(not isinstance(v, int) or isinstance(v, bool) for v in value):
            raise EncodeError(f"array field {path} needs ints")
        try:
            out += struct.pack(f">{len(value)}{el.code}", *value)
        except struct.error:
            raise EncodeError(f"a value in {path} is out of range for {el.name}") from None
    else:
        for i, item in enumerate(value):
            _write_primitive(el, item, out, False, fp.compact, f"{path}[{i}]")


def _write_struct_field(fp: FieldPlan, value: Any, out: bytearray, path: str) -> None:
    assert fp.struct_plan is not None
    if fp.nullable:
        if fp.tagged:
            wire.write_uvarint(out, 0 if value is None else 1)
        else:
            out += wire.INT8.pack(-1 if value is None else 1)
        if value is None:
            return
    elif value is None:
        raise EncodeError(f"null struct in non-nullable field {path}")
    _write_struct(fp.struct_plan, value, out, path)
