"""The one generic reader: turns a `Plan` into a closure that decodes that struct at that version.

Compilation happens once per plan. Every field becomes one small closure from `wire` (integers use
a precompiled `struct.Struct`). Reading a struct is then a loop over (name, reader) pairs, with no
per-record questions about versions or types.
"""

from __future__ import annotations

from typing import Any, Callable

from . import wire
from .errors import WireError
from .layout import ArrayOf, Primitive, Struct
from .plan import FieldPlan, Plan, element_min_size

StructReader = Callable[[Any, int], "tuple[dict[str, Any], int]"]

_FIXED = {"int8": wire.INT8, "int16": wire.INT16, "uint16": wire.UINT16, "int32": wire.INT32, "int64": wire.INT64}
_TRUNCATED = WireError.TRUNCATED
TAGGED_FIELDS = "_tagged_fields"  # how errors name a struct's tagged-field section

_READERS: dict[int, tuple[Plan, StructReader]] = {}


def reader_for(plan: Plan) -> StructReader:
    """The compiled reader of ``plan``: ``read(buf, pos) -> (data, next_pos)``; raises `WireError`."""
    hit = _READERS.get(id(plan))
    if hit is not None and hit[0] is plan:
        return hit[1]
    read = _compile_struct(plan)
    _READERS[id(plan)] = (plan, read)
    return read


def _compile_struct(plan: Plan) -> StructReader:
    # One (name, reader) pair per untagged field, in wire order. (Merging neighbouring integers into
    # one struct call was tried: building the dict from the tuple cost more than it saved.)
    steps = tuple((fp.name, value_reader(fp)) for fp in plan.untagged)

    if not plan.flexible:

        def read(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
            out: dict[str, Any] = {}
            for name, read_value in steps:
                out[name], pos = read_value(buf, pos)
            return out, pos

        return read

    tagged = _tagged_section(plan)

    def read_flexible(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        for name, read_value in steps:
            out[name], pos = read_value(buf, pos)
        return out, tagged(buf, pos, out)

    return read_flexible


def value_reader(fp: FieldPlan) -> wire.Reader:
    """A reader for the value of one field, untagged or as a tagged-field payload."""
    t = fp.type
    name = fp.name
    if isinstance(t, Primitive):
        return _primitive_reader(t, name, fp.nullable, fp.compact)
    if isinstance(t, ArrayOf):
        el = t.element
        if isinstance(el, Struct):
            assert fp.struct_plan is not None
            element = reader_for(fp.struct_plan)  # the array reader prefixes errors with name[i]
            code = None
        else:
            element = _primitive_reader(el, "", False, fp.compact)
            code = el.code
        return wire.array_reader(name, fp.nullable, fp.compact, element, element_min_size(fp), code)
    assert fp.struct_plan is not None
    return _struct_field_reader(fp)


def _primitive_reader(t: Primitive, name: str, nullable: bool, compact: bool) -> wire.Reader:
    if t.fixed:
        return wire.fixed_reader(_FIXED[t.name], t.name, name)
    if t.name == "uuid":
        return wire.uuid_reader(name)
    if t.name == "string":
        return wire.string_reader(name, nullable, compact)
    if t.name == "bytes":
        return wire.bytes_reader(name, nullable, compact)
    raise AssertionError(f"unknown primitive {t}")  # pragma: no cover


def _struct_field_reader(fp: FieldPlan) -> wire.Reader:
    """A struct-typed field, with its presence marker when nullable.

    Untagged nullable structs carry an int8 marker (-1 null, 1 present); tagged ones a uvarint marker
    (0 null, 1 present), as Kafka's generated code writes them (spec §2).
    """
    assert fp.struct_plan is not None
    inner = reader_for(fp.struct_plan)
    name = fp.name

    def read_struct(buf: Any, pos: int) -> tuple[Any, int]:
        try:
            return inner(buf, pos)
        except WireError as e:
            raise e.prefixed(name) from None

    if not fp.nullable:
        return read_struct

    if fp.tagged:

        def read_tagged_nullable(buf: Any, pos: int) -> tuple[Any, int]:
            marker, p = wire.read_uvarint(buf, pos, "struct", name, pos)
            if marker == 0:
                return None, p
            if marker != 1:
                raise WireError(WireError.MARKER, "struct", pos, name, marker)
            return read_struct(buf, p)

        return read_tagged_nullable

    def read_nullable(buf: Any, pos: int) -> tuple[Any, int]:
        try:
            marker = buf[pos]
        except IndexError:
            raise WireError(_TRUNCATED, "struct", pos, name) from None
        if marker == 0xFF:  # int8 -1
            return None, pos + 1
        if marker != 1:
            raise WireError(WireError.MARKER, "struct", pos, name, marker - 256 if marker > 127 else marker)
        return read_struct(buf, pos + 1)

    return read_nullable


def _tagged_section(plan: Plan) -> Callable[[Any, int, dict], int]:
    """The tagged-field section that ends every struct in a flexible version.

    Tagged fields missing from the wire take their default (so callers can rely on the key); known
    tags are decoded inside a window of their declared size, unknown tags are skipped by size.
    """
    # (name, is_factory, value-or-factory) in schema order, so decoded dicts read like the schema
    defaults = tuple(
        (fp.name, fp.default_mutable, fp.default_factory if fp.default_mutable else fp.default())
        for fp in plan.fields
        if fp.tagged
    )
    by_tag = {fp.tag: (fp.name, value_reader(fp)) for fp in plan.tagged}
    read_uvarint = wire.read_uvarint

    def read(buf: Any, pos: int, out: dict) -> int:
        for name, is_factory, default in defaults:
            out[name] = default() if is_factory else default
        try:
            count = buf[pos]
        except IndexError:
            raise WireError(_TRUNCATED, "uvarint", pos, TAGGED_FIELDS) from None
        if count == 0:  # the common case: no tagged fields at all
            return pos + 1
        count, pos = read_uvarint(buf, pos, "uvarint", TAGGED_FIELDS, pos)
        end_of_buf = len(buf)
        for _ in range(count):
            at = pos
            tag, pos = read_uvarint(buf, pos, "uvarint", TAGGED_FIELDS, at)
            size, pos = read_uvarint(buf, pos, "uvarint", TAGGED_FIELDS, at)
            end = pos + size
            known = by_tag.get(tag)
            if end > end_of_buf:
                raise WireError(_TRUNCATED, "tagged field", at, known[0] if known else f"<tag {tag}>")
            if known is not None:
                name, read_value = known
                # Read the payload from a copy of just its bytes, so it cannot run past its size.
                try:
                    out[name], used = read_value(buf[pos:end], 0)
                except WireError as e:
                    e.position += pos
                    raise
                if used != size:
                    raise WireError(WireError.TAG_SIZE, "tagged field", at, name, (tag, size, used))
            pos = end
        return pos

    return read
