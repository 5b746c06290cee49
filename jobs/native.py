"""Offset-commit records read with native Spark expressions, compiled from the codec's layout declarations.

Offset commits are almost every record of the topic and their layouts are flat: integers, strings and (in
value v4) one tagged uuid. `read_struct` turns one layout at one version into Spark columns that say whether
the bytes hold that struct (`ok`) and what its fields are, so the bulk of the log is validated and read
without a Python worker. The compiled reader accepts only what the codec accepts, with the same values
(tests/jobs/test_native.py checks the two against each other); where it is unsure (a varint longer than one
byte, tagged fields in an unusual shape) `ok` is false and the record goes to the Python check, which
gives the verdict and the error message.

Byte positions are 0-based Python ints while they are known when compiling. Once a string's length has
moved them they are helper columns (`NativeRead.steps`), added to the frame with the fields (`with_read`):
an expression that used them inline would repeat the whole chain of earlier lengths at every use, and
Spark's optimizer slows down with the size of the expression tree.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import count
from typing import Union

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from offsets_codec import REGISTRY
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
    raw = unsigned(buf, pos, width)
    half = 1 << (8 * width - 1)
    return F.when(raw >= half, raw - 2 * half).otherwise(raw)


def uuid_text(raw: Column) -> Column:
    """Kafka's text form of a uuid: base64url without padding (22 characters)."""
    return F.substring(F.translate(F.base64(raw), "+/", "-_"), 1, 22)


def _string(s: _Steps, buf: Column, pos: Position, fp: FieldPlan) -> tuple[Column, Column, Position]:
    """(ok, value, end) of a string field, as offsets_codec.wire.string_reader reads it."""
    if fp.compact:
        # uvarint length + 1 in one byte (< 0x80); 0 is null. Longer varints are left to the codec.
        head = s.bind(unsigned(buf, pos, 1))
        n = head - 1
        start = _plus(pos, 1)
        length_ok = (head >= 1) & (head < 0x80)
        null_ok = (head == 0) if fp.nullable else F.lit(False)
    else:
        # Most strings here are empty (commit metadata): no text conversion for those.
        n = s.bind(F.when(_slice(buf, pos, 2) == F.lit(b"\x00\x00"), F.lit(0).cast("bigint"))
                   .otherwise(signed(buf, pos, 2)))
        start = _plus(pos, 2)
        length_ok = n >= 0
        null_ok = (n == -1) if fp.nullable else F.lit(False)
    size = F.greatest(n, F.lit(0).cast("bigint"))
    end = s.bind(_plus(start, size))
    text = _slice(buf, start, size).cast("string")
    utf8 = (n == 0) | F.is_valid_utf8(text)
    ok = F.when(null_ok, _has(buf, start)).otherwise(
        length_ok & (n <= MAX_STRING_LENGTH) & _has(buf, end) & F.coalesce(utf8, F.lit(False)))
    value = F.when(length_ok, F.when(n == 0, F.lit("")).otherwise(text))
    return ok, value, end


def _primitive(s: _Steps, buf: Column, pos: Position, fp: FieldPlan) -> tuple[Column, Column, Position]:
    t = fp.type
    if isinstance(t, Primitive) and t.name in _WIDTHS:
        width = _WIDTHS[t.name]
        end = _plus(pos, width)
        reader = unsigned if t.name == "uint16" else signed
        return _has(buf, end), reader(buf, pos, width), end
    if isinstance(t, Primitive) and t.name == "uuid":
        end = _plus(pos, _UUID_BYTES)
        return _has(buf, end), uuid_text(_slice(buf, pos, _UUID_BYTES)), end
    if isinstance(t, Primitive) and t.name == "string":
        return _string(s, buf, pos, fp)
    raise NotNative(f"{fp.name}: {t} is not read natively")


def _fixed_size(fp: FieldPlan) -> int:
    t = fp.type
    if isinstance(t, Primitive) and t.name in _WIDTHS:
        return _WIDTHS[t.name]
    if isinstance(t, Primitive) and t.name == "uuid":
        return _UUID_BYTES
    raise NotNative(f"tagged field {fp.name}: only fixed-size tagged fields are read natively")


def _tagged_section(s: _Steps, buf: Column, pos: Position, plan: Plan) -> tuple[Column, dict[str, Column]]:
    """A flexible struct's tagged fields, in the two shapes brokers write: none at all, or every declared
    tagged field once, in tag order (each tag and size a one-byte varint). Trailing bytes are accepted."""
    tag_count = s.bind(unsigned(buf, pos, 1))
    none = tag_count == 0
    every = tag_count == len(plan.tagged)
    at = _plus(pos, 1)
    values: dict[str, Column] = {}
    for fp in plan.tagged:
        size = _fixed_size(fp)
        if fp.tag >= 0x80 or size >= 0x80:
            raise NotNative(f"tagged field {fp.name}: tag or size needs a multi-byte varint")
        header = _slice(buf, at, 2) == F.lit(bytes([fp.tag, size]))
        payload_ok, value, at = _primitive(s, buf, _plus(at, 2), fp)
        every = every & header & payload_ok
        values[fp.name] = F.when(none, F.lit(fp.default())).otherwise(value)
    return _has(buf, _plus(pos, 1)) & (none | (every if plan.tagged else F.lit(False))), values


def read_struct(layout: Layout, version: int, buf: Column, start: int = 0, guard: Column | None = None) -> NativeRead:
    """The struct `layout` at `version` read from `buf` at byte `start`; raises NotNative at compile time
    when the layout holds a type this compiler does not read. `guard`: compute nothing where it fails."""
    plan = plan_for(layout, version)
    s = _Steps(guard)
    ok: Column = F.lit(True)
    fields: dict[str, Column] = {}
    pos: Position = start
    for fp in plan.untagged:
        field_ok, fields[fp.name], pos = _primitive(s, buf, pos, fp)
        ok = ok & field_ok
    if plan.flexible:
        tags_ok, values = _tagged_section(s, buf, pos, plan)
        ok = ok & tags_ok
        fields.update(values)
    if guard is not None:
        ok = guard & ok
    return NativeRead(tuple(s.steps), F.coalesce(ok, F.lit(False)), fields)


# --- offset commits (record types 0 and 1) ----------------------------------------------------------

OFFSET_TYPES = tuple(t for t, rt in REGISTRY.items() if rt.group_family == "offsets")
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
    read = read_struct(_KEY_LAYOUT, _KEY_LAYOUT.valid.lowest, key, start=2, guard=is_offset_key(key))
    return NativeRead(read.steps, read.ok, read.fields)


def _offset_value(value: Column) -> NativeRead:
    head = F.substring(value, 1, 2)
    reads = {v: read_struct(_VALUE_LAYOUT, v, value, start=2, guard=head == F.lit(_int16_bytes(v)))
             for v in _VALUE_LAYOUT.versions}
    version = F.lit(None).cast("smallint")
    ok = F.lit(False)
    for v, read in reads.items():
        is_v = head == F.lit(_int16_bytes(v))
        version = F.when(is_v, F.lit(v).cast("smallint")).otherwise(version)
        ok = F.when(is_v, read.ok).otherwise(ok)
    fields: dict[str, Column] = {"version": version}
    for name in sorted({n for read in reads.values() for n in read.fields}):
        column = F.lit(None)
        for v, read in reads.items():
            if name in read.fields:
                column = F.when(head == F.lit(_int16_bytes(v)), read.fields[name]).otherwise(column)
        fields[name] = column
    steps = tuple(step for read in reads.values() for step in read.steps)
    return NativeRead(steps, F.coalesce(ok, F.lit(False)), fields)


def _sentinel(n: Column) -> Column:
    """Kafka's Utils.ofSentinel: -1 means absent."""
    return F.when(n != -1, n)


def offset_commit_struct(key: NativeRead, value: NativeRead) -> Column:
    """decode.OFFSET_COMMIT_DDL columns of a valid, non-tombstone offset commit from its native reads (the
    same values as decode.offset_commit_columns)."""
    k, v = key.fields, value.fields
    topic_id = v["topicId"]
    return F.struct(
        k["topic"].alias("topic"),
        k["partition"].cast("int").alias("partition"),
        v["offset"].alias("committed_offset"),
        _sentinel(v["leaderEpoch"]).cast("int").alias("leader_epoch"),
        F.coalesce(v["metadata"], F.lit("")).alias("metadata"),
        v["commitTimestamp"].alias("commit_timestamp_ms"),
        _sentinel(v["expireTimestamp"]).alias("expire_timestamp_ms"),
        F.when(topic_id != ZERO_UUID, topic_id).alias("topic_id"),
        v["version"].alias("value_version"),
    )
