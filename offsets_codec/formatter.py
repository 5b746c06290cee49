"""The JSON that Kafka 4.x console formatters print for a record (spec §11.2).

``{"key":{"type":T,"data":{...}},"value":{"version":V,"data":{...}}}`` with ``"value":null`` for a
tombstone, compact separators, fields in schema order and only those of that version, tagged fields
only when they differ from their default, uuids as base64url and bytes as padded standard Base64.

JSON field names are Kafka's generated ``camelCaseName()``: the schema name with its first letter
lower-cased (``GroupId`` prints as ``groupId``), while decoded ``data`` dicts keep the schema names.
Unlike Kafka's formatters, which each print only some record types, every type is formatted here.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from .layout import ArrayOf, Primitive, Struct
from .plan import FieldPlan, Plan, plan_for
from .records import OFFSETS, RecordCodec

# Jackson's default escapes: the two-character forms for these, \u00XX (upper-case hex) for other
# control characters; everything else, non-ASCII included, is written as is.
_ESCAPES = {chr(i): f"\\u{i:04X}" for i in range(0x20)}
_ESCAPES.update({'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"})
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def json_string(s: str) -> str:
    """A JSON string literal as Jackson writes it."""
    if _NEEDS_ESCAPE.search(s) is None:
        return f'"{s}"'
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES[m.group()], s) + '"'


def json_name(name: str) -> str:
    """Kafka's ``MessageGenerator.lowerCaseFirst``."""
    return name[:1].lower() + name[1:]


def to_kafka_json(key: bytes, value: bytes | None, codec: RecordCodec = OFFSETS) -> str:
    """Format one record like ``kafka-console-consumer`` with Kafka 4.x's coordinator formatters; `codec` is the
    record's topic's (SHARE_STATE for ``__share_group_state``, as Kafka's ShareGroupStateMessageFormatter).

    Raises `DecodeError` when the record cannot be decoded (Kafka's tool fails or skips it).
    """
    record = codec.decode_record(key, value)
    rt = codec.registry[record.key.record_type]
    key_json = struct_json(plan_for(rt.key, rt.key.valid.lowest), record.key.data)
    head = f'{{"key":{{"type":{record.key.record_type},"data":{key_json}}},"value":'
    if record.value is None:
        return head + "null}"
    v = record.value
    return head + f'{{"version":{v.version},"data":{struct_json(plan_for(rt.value, v.version), v.data)}}}}}'


def struct_json(plan: Plan, data: dict[str, Any]) -> str:
    """One struct, in schema order, dropping tagged fields that equal their default."""
    items = []
    for fp in plan.fields:
        value = data[fp.name]
        if fp.tagged and value == fp.default():
            continue
        items.append(f'"{json_name(fp.name)}":{_value_json(fp, value)}')
    return "{" + ",".join(items) + "}"


def _value_json(fp: FieldPlan, value: Any) -> str:
    if value is None:
        return "null"
    t = fp.type
    if isinstance(t, Struct):
        assert fp.struct_plan is not None
        return struct_json(fp.struct_plan, value)
    if isinstance(t, ArrayOf):
        el = t.element
        if isinstance(el, Struct):
            assert fp.struct_plan is not None
            plan = fp.struct_plan
            return "[" + ",".join(struct_json(plan, v) for v in value) + "]"
        return "[" + ",".join(_primitive_json(el, v) for v in value) + "]"
    return _primitive_json(t, value)


def _primitive_json(t: Primitive, value: Any) -> str:
    if value is None:
        return "null"
    if t.fixed:
        return str(int(value))
    if t.name == "bytes":
        return '"' + base64.b64encode(value).decode("ascii") + '"'
    return json_string(value)  # string, or uuid already in its base64url text form
