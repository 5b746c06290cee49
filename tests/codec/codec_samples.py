"""Test data derived from the layout declarations: a deterministic rich sample and hypothesis strategies.

Both walk the same plans as the codec, but only to learn the field names and types; the values they
produce are independent of the reader and writer under test.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from offsets_codec import REGISTRY
from offsets_codec.layout import ArrayOf, Primitive, Struct
from offsets_codec.plan import FieldPlan, Plan, plan_for
from offsets_codec.wire import uuid_to_str

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
RICH_INTS = {"int8": -7, "int16": 300, "uint16": 65535, "int32": -123456, "int64": 2**40 + 1}

# every (record type, value version) pair, and every key layout
VALUE_CASES = [(t, v) for t, rt in sorted(REGISTRY.items()) for v in rt.value.versions]
KEY_CASES = sorted(REGISTRY)


def value_plan(record_type: int, version: int) -> Plan:
    return plan_for(REGISTRY[record_type].value, version)


def key_plan(record_type: int) -> Plan:
    key = REGISTRY[record_type].key
    return plan_for(key, key.valid.lowest)


# --- deterministic samples ------------------------------------------------------------------------


def rich_sample(plan: Plan, nulls: bool = False) -> dict[str, Any]:
    """Every field set, and not to its default; with ``nulls`` every nullable field is None instead."""
    return {fp.name: _rich_value(fp, nulls) for fp in plan.fields}


def _rich_value(fp: FieldPlan, nulls: bool) -> Any:
    if nulls and fp.nullable:
        return None
    t = fp.type
    if isinstance(t, Struct):
        return rich_sample(fp.struct_plan, nulls)
    if isinstance(t, ArrayOf):
        if isinstance(t.element, Struct):
            return [rich_sample(fp.struct_plan, nulls), rich_sample(fp.struct_plan, nulls)]
        return [_rich_primitive(t.element, fp.name), _rich_primitive(t.element, fp.name + "2")]
    return _rich_primitive(t, fp.name)


def _rich_primitive(t: Primitive, name: str) -> Any:
    if t.fixed:
        return RICH_INTS[t.name]
    if t.name == "uuid":
        return uuid_to_str(bytes(range(1, 17)))
    if t.name == "string":
        return f"{name}-é✓"
    return b"\x00\xff" + name.encode()


# --- hypothesis strategies ------------------------------------------------------------------------

_TEXT = st.text(max_size=12)
_BYTES = st.binary(max_size=12)


def struct_strategy(plan: Plan, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({fp.name: _field_strategy(fp, depth) for fp in plan.fields})


def _field_strategy(fp: FieldPlan, depth: int) -> st.SearchStrategy[Any]:
    t = fp.type
    if isinstance(t, Struct):
        base = struct_strategy(fp.struct_plan, depth + 1)
    elif isinstance(t, ArrayOf):
        if isinstance(t.element, Struct):
            elem = struct_strategy(fp.struct_plan, depth + 1)
        else:
            elem = _primitive_strategy(t.element)
        base = st.lists(elem, max_size=3 if depth == 0 else 2)
    else:
        base = _primitive_strategy(t)
    return (base | st.none()) if fp.nullable else base


def _primitive_strategy(t: Primitive) -> st.SearchStrategy[Any]:
    if t.fixed:
        low, high = INT_RANGES[t.name]
        return st.integers(low, high)
    if t.name == "uuid":
        return st.binary(min_size=16, max_size=16).map(uuid_to_str)
    if t.name == "string":
        return _TEXT
    return _BYTES
