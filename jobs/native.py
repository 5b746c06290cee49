"""Offset-commit records read with native Spark expressions, compiled from the codec's layout declarations.

Offset commits are almost every record of the topic and their layouts are flat: integers, strings and (in
value v4) one tagged uuid. `read_struct` turns one layout, at one version or several, into Spark columns that
say whether the bytes hold that struct (`ok`) and what its fields are, so the bulk of the log is validated and
read without a Python worker; a field several versions share is read once, whatever the version. The compiled
reader accepts only what the codec accepts, with the same values (tests/jobs/test_native.py checks the two
against each other); where it is unsure (a varint longer than one byte, tagged fields in an unusual shape)
`ok` is false and the record goes to the Python check, which gives the verdict and the error message.

Byte positions are 0-based Python ints while they are known when compiling. Once a string's length has
moved them they are helper columns (`NativeRead.steps`), added to the frame with the fields (`with_read`):
an expression that used them inline would repeat the whole chain of earlier lengths at every use, and
Spark's optimizer slows down with the size of the expression tree.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import count
from typing import Callable, Sequence, TypeVar, Union

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from offsets_codec import REGISTRY
from offsets_codec.registry import OFFSET_COMMIT_TYPES
from offsets_codec.layout import Layout, Primitive
from offsets_codec.plan import FieldPlan, Plan, plan_for
from offsets_codec.wire import MAX_STRING_LENGTH, ZERO_UUID

Position = Union[int, Column]
_WIDTHS = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8}
_UUID_BYTES = 16
_names = count()


class NotNative(ValueError):
    """The layout has a field type this compiler does not read (arrays, structs, bytes)."""


@dataclass(frozen=True)
class NativeRead:
    steps: tuple[tuple[str, Column], ...]  # helper columns, in order (each may use the ones before it)
    ok: Column  # the bytes hold the struct completely and validly, as the codec reads it
    fields: dict[str, Column]  # Kafka field name -> value (meaningful where `ok` holds)


def with_read(df: DataFrame, reads: list[NativeRead], columns: dict[str, Column]) -> DataFrame:
    """`df` plus `columns`, computed from `reads` (whose helper columns are added, then dropped).

    One projection: each helper refers to earlier ones by name (Spark's lateral column aliases), so the
    plan is analysed once, not once per helper."""
    helpers = [(name, column) for read in reads for name, column in read.steps]
    added = [column.alias(name) for name, column in helpers] + [column.alias(name) for name, column in columns.items()]
    return df.select("*", *added).drop(*(name for name, _ in helpers))


class _Steps:
    """Collects helper columns; `guard` (when given) keeps each one null where it does not hold."""

    def __init__(self, guard: Column | None = None) -> None:
        self.guard = guard
        self.steps: list[tuple[str, Column]] = []

    def bind(self, expr: Column) -> Column:
        name = f"_native_{next(_names)}"
        self.steps.append((name, expr if self.guard is None else F.when(self.guard, expr)))
        return F.col(name)


def _plus(a: Position, b: Position) -> Position:
    """a + b, kept a Python int while both are known when compiling."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return F.lit(a) + b if isinstance(a, int) else a + b


def _slice(buf: Column, pos: Position, n: Position) -> Column:
    """n bytes at 0-based pos (Spark's substring is 1-based)."""
    return F.substring(buf, _plus(pos, 1), n)


def _has(buf: Column, end: Position) -> Column:
    return F.length(buf) >= end


def unsigned(buf: Column, pos: Position, width: int) -> Column:
    """Big-endian unsigned integer of `width` bytes (<= 4) at pos, as a bigint."""
    return F.conv(F.hex(_slice(buf, pos, width)), 16, 10).cast("bigint")


def signed(buf: Column, pos: Position, width: int) -> Column:
    """Big-endian two's-complement integer of `width` bytes at pos, as a bigint."""
    if width == 8:
        return F.conv(F.hex(_slice(buf, pos, 8)), 16, -10).cast("bigint")
    spare = 64 - 8 * width  # sign-extend: the top bit of `width` bytes moved to the top of 64 and back
    return F.shiftright(F.shiftleft(unsigned(buf, pos, width), spare), spare)


def uuid_text(raw: Column) -> Column:
    """Kafka's text form of a uuid: base64url without padding (22 characters)."""
    return F.substring(F.translate(F.base64(raw), "+/", "-_"), 1, 22)


IsVersion = Callable[[Sequence[int]], Column]
T = TypeVar("T", int, Column)


def _same(a: object, b: object) -> bool:
    return a == b if isinstance(a, int) and isinstance(b, int) else a is b


def _by_version(values: dict[int, T], is_version: IsVersion) -> T | Column:
    """The one value all versions share, or a CASE over the version. Values are shared objects (ints, or one
    Column object per variant), so versions that agree cost nothing at run time."""
    groups: list[tuple[T, list[int]]] = []
    for v, value in values.items():
        match = next((g for g in groups if _same(g[0], value)), None)
        if match is None:
            groups.append((value, [v]))
        else:
            match[1].append(v)
    if len(groups) == 1:
        return groups[0][0]
    case = None
    for value, versions in groups:
        lit = F.lit(value) if isinstance(value, int) else value
        case = F.when(is_version(versions), lit) if case is None else case.when(is_version(versions), lit)
    return case


class _Walk:
    """Reads one struct at several versions at once. Each version keeps its own byte position, a Python int
    while it is known when compiling; a field shared by versions is read once, at a position that is a CASE
    over the version only where their positions differ (offset-commit values: the metadata string after
    leaderEpoch, which only versions 3+ have). One read per field, not one per version, keeps the generated
    code small enough for the JIT (see `hugeMethodLimit` in conf/offsetlake.toml)."""

    def __init__(self, buf: Column, versions: Sequence[int], start: int, guard: Column | None,
                 is_version: IsVersion | None) -> None:
        self.buf = buf
        self.versions = list(versions)
        self.pos: dict[int, Position] = {v: start for v in self.versions}
        self.steps = _Steps(guard)
        if is_version is None and len(self.versions) > 1:
            raise ValueError("reading several versions needs is_version")
        self.is_version = is_version or (lambda _versions: F.lit(True))

    def merged(self, values: dict[int, T]) -> T | Column:
        return _by_version(values, self.is_version)

    def at(self, versions: Sequence[int]) -> Position:
        """The position the next field starts at, in the given versions (a helper column when it varies)."""
        position = self.merged({v: self.pos[v] for v in versions})
        if isinstance(position, Column) and not any(position is self.pos[v] for v in versions):
            return self.steps.bind(position)  # a new CASE: computed once, read by the field's several uses
        return position

    def only(self, versions: Sequence[int]) -> Column | None:
        """The condition "the record is one of these versions", or None when it is every version read."""
        return None if len(versions) == len(self.versions) else self.is_version(versions)


def _string(w: _Walk, at: Position, fps: dict[int, FieldPlan]) -> tuple[Column, Column, Column]:
    """(ok, value, end) of a string field, as offsets_codec.wire.string_reader reads it, in the versions of `fps`."""
    buf = w.buf
    lengths: dict[bool, Column] = {}
    for compact in sorted({fp.compact for fp in fps.values()}):
        if compact:
            # uvarint length + 1 in one byte (< 0x80); 0 is null. Longer varints are left to the codec.
            lengths[compact] = unsigned(buf, at, 1) - 1
        else:
            # Most strings here are empty (commit metadata): no text conversion for those.
            lengths[compact] = F.when(_slice(buf, at, 2) == F.lit(b"\x00\x00"), F.lit(0).cast("bigint")).otherwise(
                signed(buf, at, 2))
    n = w.steps.bind(w.merged({v: lengths[fp.compact] for v, fp in fps.items()}))
    short = {True: n < 0x7F, False: F.lit(True)}  # a compact length must fit the one-byte varint
    null = {True: n == -1, False: F.lit(False)}
    header = w.merged({v: 1 if fp.compact else 2 for v, fp in fps.items()})
    start = _plus(at, header)
    size = F.greatest(n, F.lit(0).cast("bigint"))
    end = w.steps.bind(_plus(start, size))
    text = _slice(buf, start, size).cast("string")
    utf8 = (n == 0) | F.is_valid_utf8(text)
    length_ok = (n >= 0) & w.merged({v: short[fp.compact] for v, fp in fps.items()})
    null_ok = w.merged({v: null[fp.nullable] for v, fp in fps.items()})
    ok = F.when(null_ok, _has(buf, start)).otherwise(
        length_ok & (n <= MAX_STRING_LENGTH) & _has(buf, end) & F.coalesce(utf8, F.lit(False)))
    value = F.when(length_ok, F.when(n == 0, F.lit("")).otherwise(text))
    return ok, value, end


def _width(fp: FieldPlan) -> int:
    """The size of a fixed-size field; NotNative for any other type."""
    t = fp.type
    if isinstance(t, Primitive) and t.name in _WIDTHS:
        return _WIDTHS[t.name]
    if isinstance(t, Primitive) and t.name == "uuid":
        return _UUID_BYTES
    raise NotNative(f"{fp.name}: {t} is not read natively (strings apart, only fixed-size types are)")


def _fixed(buf: Column, at: Position, fp: FieldPlan) -> tuple[Column, Column, int]:
    """(ok, value, width) of a fixed-size field."""
    width = _width(fp)
    if fp.type.name == "uuid":
        value = uuid_text(_slice(buf, at, width))
    else:
        value = (unsigned if fp.type.name == "uint16" else signed)(buf, at, width)
    return _has(buf, _plus(at, width)), value, width


def _field(w: _Walk, fps: dict[int, FieldPlan]) -> tuple[Column, Column]:
    """Reads one untagged field in the versions that have it and moves their positions past it: (ok, value)."""
    versions = list(fps)
    at = w.at(versions)
    fp = next(iter(fps.values()))
    if isinstance(fp.type, Primitive) and fp.type.name == "string":
        ok, value, end = _string(w, at, fps)
        for v in versions:
            w.pos[v] = end
    else:
        ok, value, width = _fixed(w.buf, at, fp)
        for v in versions:
            w.pos[v] = _plus(w.pos[v], width)
    return ok, value


def _tagged_section(buf: Column, pos: Position, plan: Plan, steps: _Steps) -> tuple[Column, dict[str, Column]]:
    """A flexible struct's tagged fields, in the two shapes brokers write: none at all, or every declared
    tagged field once, in tag order (each tag and size a one-byte varint). Trailing bytes are accepted."""
    tag_count = steps.bind(unsigned(buf, pos, 1))
    none = tag_count == 0
    every = tag_count == len(plan.tagged)
    at = _plus(pos, 1)
    values: dict[str, Column] = {}
    for fp in plan.tagged:
        size = _width(fp)
        if fp.tag >= 0x80 or size >= 0x80:
            raise NotNative(f"tagged field {fp.name}: tag or size needs a multi-byte varint")
        header = _slice(buf, at, 2) == F.lit(bytes([fp.tag, size]))
        payload_ok, value, _ = _fixed(buf, _plus(at, 2), fp)
        at = _plus(at, 2 + size)
        every = every & header & payload_ok
        values[fp.name] = F.when(none, F.lit(fp.default())).otherwise(value)
    return _has(buf, _plus(pos, 1)) & (none | (every if plan.tagged else F.lit(False))), values


def read_struct(layout: Layout, versions: Sequence[int], buf: Column, start: int = 0, guard: Column | None = None,
                is_version: IsVersion | None = None) -> NativeRead:
    """The struct `layout` read from `buf` at byte `start`, in whichever of `versions` `is_version` says the
    record is (not needed for one version); raises NotNative at compile time when the layout holds a type this
    compiler does not read. A field a version lacks is null in it. `guard`: compute nothing where it fails."""
    plans = {v: plan_for(layout, v) for v in versions}
    w = _Walk(buf, versions, start, guard, is_version)
    ok: Column = F.lit(True)
    fields: dict[str, Column] = {}

    def add(versions_with: Sequence[int], part_ok: Column, values: dict[str, Column]) -> None:
        """A part read only in `versions_with`: it must be valid there, and its fields are null elsewhere."""
        nonlocal ok
        only = w.only(versions_with)
        ok = ok & (part_ok if only is None else (~only | part_ok))
        for name, value in values.items():
            if name in fields:
                raise NotNative(f"{name}: tagged in some versions and untagged or differently placed in others")
            fields[name] = value if only is None else F.when(only, value)

    for f in layout.fields:  # wire order: every version's untagged fields are in declaration order
        fps = {v: plans[v].by_name[f.name] for v in versions
               if f.name in plans[v].by_name and not plans[v].by_name[f.name].tagged}
        if fps:
            field_ok, value = _field(w, fps)
            add(list(fps), field_ok, {f.name: value})
    sections: dict[tuple[str, ...], list[int]] = {}
    for v in versions:
        if plans[v].flexible:
            sections.setdefault(tuple(fp.name for fp in plans[v].tagged), []).append(v)
    for versions_with in sections.values():
        add(versions_with, *_tagged_section(buf, w.at(versions_with), plans[versions_with[0]], w.steps))
    if guard is not None:
        ok = guard & ok
    return NativeRead(tuple(w.steps.steps), F.coalesce(ok, F.lit(False)), fields)


# --- offset commits (record types 0 and 1) ----------------------------------------------------------

OFFSET_TYPES = OFFSET_COMMIT_TYPES
_VALUE_LAYOUT = REGISTRY[OFFSET_TYPES[0]].value
_KEY_LAYOUT = REGISTRY[OFFSET_TYPES[0]].key
assert all(REGISTRY[t].value is _VALUE_LAYOUT for t in OFFSET_TYPES), "offset types share one value layout"
assert all(REGISTRY[t].key.fields == _KEY_LAYOUT.fields for t in OFFSET_TYPES), "and one key layout"


def _int16_bytes(n: int) -> bytes:
    return n.to_bytes(2, "big", signed=True)


def is_offset_key(key: Column) -> Column:
    """The key starts with an offset-commit record type (0 or 1): cheap, no decoding."""
    return F.coalesce(F.substring(key, 1, 2).isin(*[F.lit(_int16_bytes(t)) for t in OFFSET_TYPES]), F.lit(False))


def offset_key(column: str = "key") -> NativeRead:
    """An offset-commit key read from the binary column `column`: group, topic, partition after the 2-byte
    type. Trailing bytes are accepted, as the codec (and Kafka) accept them."""
    return _compiled("key", column)


def offset_value(column: str = "value") -> NativeRead:
    """A non-null offset-commit value of any version read from the binary column `column`: `ok`, and the
    fields under Kafka's names (null where the version has none) plus `version`."""
    return _compiled("value", column)


def _compiled(what: str, column: str) -> NativeRead:
    """Compiling a read builds thousands of JVM expression objects one Py4J call at a time (seconds): each is
    built once per JVM and reused (a Column is an unresolved expression, valid in any plan of that JVM)."""
    from pyspark import SparkContext

    jvm = id(SparkContext._jvm)  # noqa: SLF001 - a new JVM (rare: tests) compiles anew
    return _compile(what, column, jvm)


@lru_cache(maxsize=None)
def _compile(what: str, column: str, _jvm: int) -> NativeRead:
    return _offset_key(F.col(column)) if what == "key" else _offset_value(F.col(column))


def _offset_key(key: Column) -> NativeRead:
    return read_struct(_KEY_LAYOUT, [_KEY_LAYOUT.valid.lowest], key, start=2, guard=is_offset_key(key))


def _offset_value(value: Column) -> NativeRead:
    head = F.substring(value, 1, 2)
    code = {v: F.lit(_int16_bytes(v)) for v in _VALUE_LAYOUT.versions}

    def is_version(versions: Sequence[int]) -> Column:
        return head == code[versions[0]] if len(versions) == 1 else head.isin(*(code[v] for v in versions))

    versions = list(_VALUE_LAYOUT.versions)
    read = read_struct(_VALUE_LAYOUT, versions, value, start=2, guard=is_version(versions), is_version=is_version)
    version = _by_version({v: F.lit(v).cast("smallint") for v in versions}, is_version)
    return NativeRead(read.steps, read.ok, {"version": version, **read.fields})


def _sentinel(n: Column) -> Column:
    """Kafka's Utils.ofSentinel: -1 means absent."""
    return F.when(n != -1, n)


def _value_columns(value: NativeRead) -> list[Column]:
    v = value.fields
    topic_id = v["topicId"]
    return [
        v["offset"].alias("committed_offset"),
        _sentinel(v["leaderEpoch"]).cast("int").alias("leader_epoch"),
        F.coalesce(v["metadata"], F.lit("")).alias("metadata"),
        v["commitTimestamp"].alias("commit_timestamp_ms"),
        _sentinel(v["expireTimestamp"]).alias("expire_timestamp_ms"),
        F.when(topic_id != ZERO_UUID, topic_id).alias("topic_id"),
        v["version"].alias("value_version"),
    ]


def offset_commit_values(value: NativeRead) -> Column:
    """The value's part of decode.OFFSET_COMMIT_DDL (all but topic and partition) for a valid, non-tombstone
    offset commit."""
    return F.struct(*_value_columns(value))


def offset_commit_struct(key: NativeRead, value: NativeRead) -> Column:
    """decode.OFFSET_COMMIT_DDL columns of a valid, non-tombstone offset commit from its native reads (the
    same values as decode.offset_commit_columns)."""
    k = key.fields
    return F.struct(k["topic"].alias("topic"), k["partition"].cast("int").alias("partition"), *_value_columns(value))
