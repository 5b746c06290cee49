"""Record layouts as data: field types, `Field`, `Struct`, `Layout` and `RecordType`.

A layout mirrors one of Kafka's JSON message schemas: fields in wire order, each with the versions it is
present in, the versions it is nullable in, and (for tagged fields) its tag and tagged versions. Nothing
here knows how to read or write bytes; `plan`, `reader` and `writer` walk these declarations.

Declarations are checked when they are built (so at import time), with the rules Kafka's message
generator applies: ranges inside the valid versions, tags only in flexible versions, unique tags, and
defaults that fit the type.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Any, Union

from .errors import LayoutError
from .versions import MAX_VERSION, VersionRange
from .wire import ZERO_UUID


class _KafkaDefault:
    """Sentinel for a field declared without ``default``: the type's own default (0, "", empty, zero uuid)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "TYPE_DEFAULT"


TYPE_DEFAULT = _KafkaDefault()


@dataclass(frozen=True)
class Primitive:
    """A primitive type. ``code`` is the `struct` code of fixed-width integers; ``size`` their width."""

    name: str
    code: str | None = None
    size: int | None = None

    @property
    def fixed(self) -> bool:
        return self.code is not None

    @property
    def can_be_null(self) -> bool:
        return self.name in ("string", "bytes")

    def __str__(self) -> str:
        return self.name


INT8 = Primitive("int8", "b", 1)
INT16 = Primitive("int16", "h", 2)
UINT16 = Primitive("uint16", "H", 2)
INT32 = Primitive("int32", "i", 4)
INT64 = Primitive("int64", "q", 8)
UUID = Primitive("uuid", None, 16)
STRING = Primitive("string")
BYTES = Primitive("bytes")

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class Struct:
    """A nested struct type (Kafka's inline ``fields`` or a ``commonStructs`` entry)."""

    name: str
    fields: tuple["Field", ...]

    can_be_null = True

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ArrayOf:
    """``[]T`` for a primitive or struct ``T``."""

    element: Union[Primitive, Struct]

    can_be_null = True

    @property
    def name(self) -> str:
        return f"[]{self.element}"

    def __str__(self) -> str:
        return self.name


FieldType = Union[Primitive, Struct, ArrayOf]


@dataclass(frozen=True)
class Field:
    """One field, as in Kafka's schema JSON.

    ``versions``, ``nullable`` and ``tagged`` take Kafka's range syntax (``"0+"``, ``"1"``, ``"0-2"``,
    ``"none"``). ``default`` is a Python value; ``None`` is Kafka's ``"null"`` default, and leaving it out
    gives the type's default (0, "", b"", zero uuid, empty array, or the struct with all-default fields).
    """

    name: str
    type: FieldType
    versions: Any = "0+"
    nullable: Any = "none"
    tag: int | None = None
    tagged: Any = "none"
    default: Any = TYPE_DEFAULT

    def __post_init__(self) -> None:
        for attr in ("versions", "nullable", "tagged"):
            try:
                object.__setattr__(self, attr, VersionRange.parse(getattr(self, attr)))
            except ValueError as e:
                raise LayoutError(f"field {self.name}: {e}") from None

    def is_tagged_in(self, version: int) -> bool:
        return version in self.tagged

    def is_nullable_in(self, version: int) -> bool:
        return version in self.nullable


@dataclass(frozen=True)
class Layout:
    """A top-level key or value message: Kafka's ``validVersions``, ``flexibleVersions`` and fields."""

    name: str
    valid: Any
    flexible: Any
    fields: tuple[Field, ...]
    notes: str = dc_field(default="", compare=False)

    def __post_init__(self) -> None:
        for attr in ("valid", "flexible"):
            try:
                object.__setattr__(self, attr, VersionRange.parse(getattr(self, attr)))
            except ValueError as e:
                raise LayoutError(f"{self.name}: {e}") from None
        if self.valid.empty:
            raise LayoutError(f"{self.name}: validVersions is empty")
        if not self.flexible.empty and self.flexible.highest != MAX_VERSION:
            # Kafka: flexibleVersions is "none" or open-ended; once flexible, always flexible.
            raise LayoutError(f"{self.name}: flexibleVersions {self.flexible} must be open-ended")
        _check_fields(self.name, self.fields, self.valid, self.flexible)

    @property
    def versions(self) -> range:
        return range(self.valid.lowest, self.valid.highest + 1)


@dataclass(frozen=True)
class RecordType:
    """One record type of the topic: its key and value layouts, and the kind of group it belongs to."""

    record_type: int
    name: str
    key: Layout
    value: Layout
    group_family: str
    status: str = dc_field(default="", compare=False)
    # Earlier, incompatible value layouts written by early-access brokers, for error messages: a record in
    # such a layout fails (or misreads) with today's declaration, and the reader should be told why.
    early_access: str = dc_field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.key.flexible.empty:
            raise LayoutError(f"{self.name}: key layout {self.key.name} must not be flexible (spec §1)")


# --- declaration checks ---------------------------------------------------------------------------


def _check_fields(where: str, fields: tuple[Field, ...], parent: VersionRange, flexible: VersionRange) -> None:
    names: set[str] = set()
    tags: dict[int, str] = {}
    for f in fields:
        if not isinstance(f, Field):
            raise LayoutError(f"{where}: {f!r} is not a Field")
        at = f"{where}.{f.name}"
        if f.name in names:
            raise LayoutError(f"{at}: duplicate field name")
        names.add(f.name)
        present = f.versions.intersect(parent)
        if present.empty:
            raise LayoutError(f"{at}: versions {f.versions} lie outside the valid versions {parent}")
        if not f.nullable.issubset(f.versions):
            raise LayoutError(f"{at}: nullable versions {f.nullable} are not a subset of versions {f.versions}")
        if not f.nullable.empty and not f.type.can_be_null:
            raise LayoutError(f"{at}: type {f.type} cannot be nullable")
        _check_tag(at, f, flexible, tags)
        _check_default(at, f)
        inner = f.type.element if isinstance(f.type, ArrayOf) else f.type
        if isinstance(inner, Struct):
            _check_fields(f"{at}", inner.fields, present, flexible)
        elif isinstance(f.type, ArrayOf) and not isinstance(inner, Primitive):
            raise LayoutError(f"{at}: unsupported array element {inner!r}")


def _check_tag(at: str, f: Field, flexible: VersionRange, tags: dict[int, str]) -> None:
    if f.tag is None:
        if not f.tagged.empty:
            raise LayoutError(f"{at}: tagged versions {f.tagged} given without a tag")
        return
    if f.tagged.empty:
        raise LayoutError(f"{at}: tag {f.tag} given without tagged versions")
    if not isinstance(f.tag, int) or f.tag < 0:
        raise LayoutError(f"{at}: invalid tag {f.tag!r}")
    if f.tagged.highest != MAX_VERSION:
        raise LayoutError(f"{at}: tagged versions {f.tagged} must be open-ended")
    if not f.tagged.issubset(f.versions):
        raise LayoutError(f"{at}: tagged versions {f.tagged} are not a subset of versions {f.versions}")
    if not f.tagged.issubset(flexible):
        raise LayoutError(f"{at}: tagged versions {f.tagged} are not all flexible (flexible: {flexible})")
    both = f.nullable.intersect(f.tagged)
    if not (both.empty or both == f.tagged):
        raise LayoutError(f"{at}: either all tagged versions are nullable or none is")
    if f.tag in tags:
        raise LayoutError(f"{at}: tag {f.tag} already used by {tags[f.tag]}")
    tags[f.tag] = f.name


def _check_default(at: str, f: Field) -> None:
    d = f.default
    if d is TYPE_DEFAULT:
        return
    if d is None:
        if not f.type.can_be_null or not f.versions.issubset(f.nullable):
            raise LayoutError(f"{at}: null default needs the field nullable in all its versions")
        return
    t = f.type
    if isinstance(t, Primitive) and t.name in _INT_RANGES:
        low, high = _INT_RANGES[t.name]
        if not isinstance(d, int) or isinstance(d, bool) or not low <= d <= high:
            raise LayoutError(f"{at}: default {d!r} does not fit {t.name}")
    elif t is STRING:
        if not isinstance(d, str):
            raise LayoutError(f"{at}: default {d!r} is not a string")
    elif t is UUID:
        if not (isinstance(d, str) and len(d) == len(ZERO_UUID)):
            raise LayoutError(f"{at}: default {d!r} is not a uuid")
    else:
        # Kafka allows only the empty value or null for bytes, arrays and structs.
        raise LayoutError(f"{at}: a {t} field can only default to empty or null")


def natural_default(t: FieldType) -> Any:
    """The default of a type when the field declares none (structs are handled by the plan)."""
    if isinstance(t, Primitive):
        if t.fixed:
            return 0
        return {"string": "", "bytes": b"", "uuid": ZERO_UUID}[t.name]
    if isinstance(t, ArrayOf):
        return []
    raise TypeError(f"no natural default for {t}")  # structs: see plan.Plan.default_struct


__all__ = [
    "ArrayOf", "BYTES", "Field", "FieldType", "INT16", "INT32", "INT64", "INT8", "Layout", "Primitive",
    "RecordType", "STRING", "Struct", "TYPE_DEFAULT", "UINT16", "UUID", "natural_default",
]
