"""The contract's raw-record frame, which every source produces (the schema of Spark's Kafka source).

The column rules are declared once, in Spark's type names, and checked by `check_columns`: here on any
source's frame, and on a Parquet dump's footers before Spark starts (jobs.sources.parquet). So this
module imports Spark only where it builds the frame.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from jobs.base.errors import BadInput

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

REQUIRED: dict[str, tuple[str, ...]] = {
    "key": ("binary",),
    "value": ("binary",),
    "partition": ("int", "smallint", "bigint", "tinyint"),
    "offset": ("bigint", "int"),
    "timestamp": ("timestamp", "timestamp_ntz", "bigint", "int"),  # bigint, int: epoch milliseconds
}
# Batch metadata that segment and live sources may add (used by transactional replay).
OPTIONAL = {
    "topic": "string",
    "timestampType": "int",
    "producer_id": "bigint",
    "producer_epoch": "smallint",
    "is_transactional": "boolean",
    "is_control": "boolean",
}


def check_columns(types: Mapping[str, str], origin: str) -> None:
    """BadInput unless `types` (column -> Spark type name, e.g. `bigint`) has every required column with an
    allowed type."""
    problem = column_problem(types)
    if problem is not None:
        raise BadInput(f"{origin}: {problem}")


def column_problem(types: Mapping[str, str]) -> str | None:
    """What check_columns would reject in `types`, without the origin (None: nothing)."""
    missing = [c for c in REQUIRED if c not in types]
    if missing:
        return (f"missing required column(s) {', '.join(missing)} "
                f"(found: {', '.join(types) or 'none'}); expected key, value, partition, offset, timestamp")
    for name, allowed in REQUIRED.items():
        if types[name] not in allowed:
            return f"column {name} has type {types[name]}, expected " + " or ".join(allowed)
    return None


def normalise(df: DataFrame, origin: str) -> DataFrame:
    """Check the input columns and return key, value, partition, offset, timestamp (+ optional metadata).

    The timestamp may be a timestamp or a bigint of epoch milliseconds; unknown extra columns are dropped.
    """
    from pyspark.sql import functions as F

    types = {f.name: f.dataType.simpleString() for f in df.schema}
    check_columns(types, origin)
    ts = F.col("timestamp")
    if types["timestamp"] in ("bigint", "int"):
        ts = F.timestamp_millis(ts)
    columns = [
        F.col("key"),
        F.col("value"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("bigint").alias("offset"),
        ts.cast("timestamp").alias("timestamp"),
    ]
    columns += [F.col(name).cast(dtype).alias(name) for name, dtype in OPTIONAL.items() if name in types]
    return df.select(columns)
