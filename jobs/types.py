"""Spark types from short type strings, without a running Spark (executors and `describe` have none), and
the one conversion of epoch milliseconds to timestamps.

Understands what the schemas use: primitives, `array<T>` and `struct<name:T,...>`; a column list is
`name T, name T`. (pyspark's own DDL parser needs a live SparkContext.)
"""
from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

PRIMITIVES = {
    "string": T.StringType(), "binary": T.BinaryType(), "boolean": T.BooleanType(),
    "tinyint": T.ByteType(), "smallint": T.ShortType(), "int": T.IntegerType(), "bigint": T.LongType(),
    "double": T.DoubleType(), "timestamp": T.TimestampType(), "date": T.DateType(),
}


def parse_type(text: str) -> T.DataType:
    text = text.strip()
    if text in PRIMITIVES:
        return PRIMITIVES[text]
    if text.startswith("array<") and text.endswith(">"):
        return T.ArrayType(parse_type(text[6:-1]))
    if text.startswith("struct<") and text.endswith(">"):
        return T.StructType([_field(part, ":") for part in _split(text[7:-1])])
    raise ValueError(f"unsupported type {text!r}")


def parse_columns(text: str) -> T.StructType:
    """`a int, b array<string>` -> StructType."""
    return T.StructType([_field(part, " ") for part in _split(text)])


def _field(part: str, sep: str) -> T.StructField:
    name, _, type_text = part.strip().partition(sep)
    return T.StructField(name.strip().strip("`"), parse_type(type_text))


def _split(text: str) -> list[str]:
    """Split on commas that are not inside <...>."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


# Timestamps Spark can hold (years 1-9999); a corrupt commitTimestamp outside them becomes null, not a crash.
_MIN_MS, _MAX_MS = -62135596800000, 253402300799999


def ms_to_timestamp(ms: Column) -> Column:
    """Epoch milliseconds as a timestamp; null outside the years Spark can hold."""
    return F.when(ms.between(_MIN_MS, _MAX_MS), F.timestamp_millis(ms))
